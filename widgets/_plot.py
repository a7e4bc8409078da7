"""A view's one plotly drawing, live: a plotly ``FigureWidget`` (an anywidget) held in a trait
of the view, rendered by the view's JS as a child widget, and updated in place.

``sync(fw, last, new)`` makes the FigureWidget show the figure spec ``new`` (a plain dict, as
the drawings build it), sending only the properties that changed since ``last``, all in one
``Plotly.update`` (one redraw in the page); a figure whose traces differ in number or type has
them replaced in the same widget. ``Throttle`` (_pace.py) runs a
redraw at most ``rate`` times a second and, once a page answers, when it has drawn the last.
``PlotView`` is the base of every view drawn this way (its JS: ``ilPlot`` in common.js).
"""
from __future__ import annotations

import base64
import threading

import numpy as np
import plotly.graph_objects as go
from plotly.basedatatypes import BaseFigure, Undefined
import traitlets as t
from ipywidgets import widget_serialization

from inferlab.widgets._base import View
from inferlab.widgets._pace import Throttle

try:
    # plotly looks pandas up in sys.modules at every property read; a draw in a flusher
    # thread while another thread imported pandas found it half made ("partially
    # initialized module 'pandas' has no attribute 'Series"): imported here, once, first
    import pandas  # noqa: F401
except ImportError:          # pandas is optional (the lab extra)
    pass


class LiveFigure(go.FigureWidget):
    """A FigureWidget that does not take plotly.js's answers back: after every update the
    front end sends the trace and layout defaults it computed (``_js2py_traceDeltas``,
    ``_js2py_layoutDelta``: every trace's full defaults), which plotly's Python side
    deserializes, compares with its own copy and answers with a reset message, all on the
    kernel's main thread; three live plots of a long Lab run kept that thread so busy that
    a Stop click waited behind them for a minute. The views never read those defaults, so
    these two traits are not synced here (the messages arrive and are dropped). User zooms
    and pans (``_js2py_relayout``, ``_js2py_restyle``) still sync."""
    _js2py_traceDeltas = t.Dict(allow_none=True)
    _js2py_layoutDelta = t.Dict(allow_none=True)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # plotly's anywidget view sizes the plot once, to its box then (700 px when the
        # box was not laid out yet), and never again: responsive plots follow the window's
        # resize events, which the view's JS sends when its box changes (ilPlot)
        self._config = {**self._config, "responsive": True}


def _changes(old: dict, new: dict) -> dict:
    diff = {k: v for k, v in new.items() if old.get(k) != v}
    diff.update({k: None for k in old if k not in new})
    return diff


def _numbers(diff: dict) -> dict:
    """``diff`` with its lists of numbers as numpy arrays: plotly validates a list element by
    element and sends it as JSON, an array at once and as binary (tens of ms on a long run)."""
    out = {}
    for k, v in diff.items():
        if isinstance(v, dict):
            v = _numbers(v)
        elif isinstance(v, list) and len(v) > 16 and all(type(x) in (int, float) for x in v):
            v = np.asarray(v, dtype=float)
        out[k] = v
    return out


def _layout(diff: dict) -> dict:
    """A layout change as plotly.js takes it: validated by plotly (a template's name becomes
    the template, ...), removed properties None."""
    given = go.Layout({k: v for k, v in diff.items() if v is not None}).to_plotly_json()
    return _numbers({k: given.get(k) for k in diff})


def _shape(spec: dict) -> list:
    return [(t.get("type"), t.get("name")) for t in spec["data"]]


def sync(fw: go.FigureWidget | None, last: dict | None, new: dict) -> go.FigureWidget | None:
    """Make ``fw`` (which shows the figure spec ``last``) show the spec ``new`` in place,
    sending only what changed, as one ``Plotly.update`` (the page redraws once); returns a
    new FigureWidget instead when there is none yet (``fw`` or ``last`` None), else None."""
    if fw is None or last is None:
        return LiveFigure(new)
    if _shape(last) != _shape(new):
        # other traces: replaced in the same widget (a new widget would mean closing the old
        # one's comm while its front end may still send on it: "no comm channel defined")
        fw.data = ()
        fw.add_traces([_numbers(tr) for tr in new["data"]])
        last = {"data": new["data"], "layout": last["layout"]}
    # one restyle for all traces: each changed property with its value for *every* trace
    # that has it (plotly's widget front end resets a trace's property it is sent as
    # "undefined" to the default: showlegend back to true, ...), undefined only for a trace
    # that has it neither before nor after (a key its type may not even accept)
    keys = {k for old, tr in zip(last["data"], new["data"]) for k in _changes(old, tr)}
    restyle = {k: [_numbers({k: tr.get(k)})[k] if k in tr or k in old else Undefined
                   for old, tr in zip(last["data"], new["data"])] for k in sorted(keys)}
    relayout = _layout(_changes(last["layout"], new["layout"]))
    # a subplot's axes the layout does not have yet (xaxis3, ...): plotly_update refuses
    # them, layout.update makes them (a figure's subplots rarely change: once, as it grows)
    added = {k: relayout.pop(k) for k in list(relayout)
             if not BaseFigure._is_key_path_compatible(k, fw.layout)}
    if added:
        fw.layout.update(added, overwrite=True)
    if restyle or relayout:
        fw.plotly_update(restyle_data=restyle, relayout_data=relayout)
    return None


def _plain(x):
    """``x`` with its numpy arrays, and plotly's typed arrays ({"dtype", "bdata"}: how it
    keeps an array it validated), as lists (a value compares with the spec it came from)."""
    if isinstance(x, dict) and "bdata" in x and "dtype" in x:
        a = np.frombuffer(base64.b64decode(x["bdata"]), dtype=x["dtype"])
        return a.reshape(x["shape"]).tolist() if "shape" in x else a.tolist()
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x.tolist() if isinstance(x, np.ndarray) else x


def same(fw: go.FigureWidget, fig: go.Figure) -> bool:
    """Whether ``fw`` shows ``fig`` (traces and layout; trace uids aside)."""
    a, b = (_plain(f.to_dict()) for f in (fw, fig))
    for t in (*a["data"], *b["data"]):
        t.pop("uid", None)
    return a == b


class PlotView(View):
    """A view whose one drawing is a plotly FigureWidget (``plot``), updated in place.

    A subclass builds the figure as a plain dict in ``_spec(dark)`` and calls ``_changed()``
    when what it shows changed (after a flush, on a scrubber move); the redraw is throttled
    (``Throttle``: at most ``plot_rate`` a second, ``plot_duty`` of the time at most). ``figure()``
    is ``go.Figure(self._spec(dark))``: the export is what the live widget shows."""
    dark = t.Bool(False).tag(sync=True)              # the page's theme (the JS sets it)
    plot = t.Instance(go.FigureWidget, allow_none=True).tag(sync=True, **widget_serialization)
    # the traces ``plot`` shows: the page compares its plot with it and asks for a fresh
    # widget when they differ (``_on_page_msg``)
    plot_traces = t.Int(0).tag(sync=True)
    # one more per redraw sent: the page answers each with "drawn" once plotly has drawn it
    # (``Throttle.drawn``: the next redraw waits for that answer)
    plot_seq = t.Int(0).tag(sync=True)
    redraw_on: tuple = ("dark",)                     # traits whose change redraws
    # redraws a second at most, and the share of the time they may take: the Lab shows three
    # plots, and the engine and the notebook's own clicks share the kernel with them
    plot_rate, plot_duty = 10.0, 0.2

    def __init__(self, *args, **kwargs):
        self._redraw: Throttle | None = None
        self.resyncs = 0                              # fresh widgets the page asked for
        self.plots_made = 0                           # FigureWidgets made (first, resyncs)
        self._sent: dict | None = None                # the figure spec the FigureWidget shows
        super().__init__(*args, **kwargs)
        self._redraw = Throttle(self._draw, self.plot_rate, self._lock, self.plot_duty)
        self._draw()
        self.observe(lambda ch: self._changed(), list(self.redraw_on))
        self.on_msg(self._on_page_msg)

    def _on_page_msg(self, _, content, buffers) -> None:
        """The page's plot lacks traces the kernel's has: plotly's widget front end can miss
        a plot's first updates (seen: the live vLLM timeline, fed from its first second,
        showed empty axes in most runs of notebook 12; the likeliest cause, updates that
        arrive before plotly's code has loaded, is not pinned down). A fresh FigureWidget
        carries the whole figure in its opening state."""
        if content.get("event") == "drawn":
            if self._redraw is not None and content.get("seq") == self.plot_seq:
                self._redraw.drawn()
            return
        if content.get("event") != "resync":
            return
        with self._lock:
            if self._sent is not None:
                old, self.plot = self.plot, LiveFigure(self._sent)
                self.resyncs += 1
                self.plots_made += 1
                if old is not None:     # once the page has mounted the new one: the old
                    # one's view, still shown till then, would sync on a closed comm
                    later = threading.Timer(10.0, old.close)
                    later.daemon = True
                    later.start()

    def _spec(self, dark: bool | None = None) -> dict:
        raise NotImplementedError

    def _is_dark(self, dark: bool | None) -> bool:
        return self.dark if dark is None else bool(dark)

    def _changed(self) -> None:
        """What the figure shows changed: redraw (throttled)."""
        if self._redraw is not None:
            self._redraw()

    def _on_cursor(self, change) -> None:
        with self._lock:
            if self._trace is not None and self._step_t:
                self._show(self.shown_step())

    def _show(self, k: int) -> None:
        """Show step ``k``: a view that keeps per-step state (the KV map, the prefix cache)
        computes it here; the default redraws (the drawing cuts at the scrubber itself)."""
        self._changed()

    def _follow(self) -> None:
        """After a flush: show the latest step unless the scrubber holds an earlier one."""
        if self.cursor < 0 or self.cursor >= len(self._step_t):
            self._show(len(self._step_t) - 1)

    def _draw(self) -> None:
        """Show ``_spec()`` in the FigureWidget (in place: only what changed is sent)."""
        # one draw at a time, under the view's lock (the order every caller already takes
        # it in): ``plot`` and ``_sent`` change together. Outside it, two threads drawing at
        # once (the throttle's timer and a live source's flusher, or the constructor's first
        # draw) could each make a FigureWidget and keep one diffed against the other's spec
        with self._lock:
            new = self._spec()
            fresh = sync(self.plot, self._sent, new)
            self._sent = new
            if fresh is not None:
                self.plots_made += 1
                old, self.plot = self.plot, fresh
                if old is not None:
                    old.close()
            with self.hold_sync():
                self.plot_traces = len(new["data"])
                self.plot_seq += 1

    def detach(self) -> "PlotView":
        super().detach()
        if self._redraw is not None:      # the run's last step drawn now, not after a wait
            self._redraw.finish()
        return self

    def figure(self, dark: bool | None = None) -> go.Figure:
        """The one drawing of this view: what the live widget shows (``plot``), in the
        page's theme unless ``dark`` says."""
        return go.Figure(self._spec(dark))

    def close(self):
        if self._redraw is not None:
            self._redraw.cancel()
        if self.plot is not None:
            self.plot.close()
        super().close()
