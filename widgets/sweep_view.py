"""SweepView: a sweep of engine knobs as its frontier, each point opening its own run.

Left, the frontier of output tokens/s per user against output tokens/s in total (the axes of
vLLM's ``vllm bench sweep plot_pareto``; inferlab.lab.drawings.frontier), a plotly
FigureWidget that follows the page's theme. Click a point and, beside the plot, that point's
recorded run opens: its scheduler timeline, its KV cache blocks and its token stream, replayed
from the trace file the sweep wrote (``trace_path``), under a caption naming the point's
knobs and numbers. A point whose trace is missing or unreadable says so in the caption.

    view = SweepView(rows)               # rows as the sweep writes them (lab/drawings/frontier)
    view = SweepView.from_result(result) # anything with ``.rows``
    view.open_point(3)                       # what a click on point 3 does
    view.figure()                        # the frontier as a plotly figure
"""
from __future__ import annotations

import base64
import html
import os

import ipywidgets as w
import traitlets as t

from inferlab.lab.drawings import frontier
from inferlab.observe.trace import Trace

from inferlab.widgets._base import STATIC_IMAGES, SavedDisplay, asset, png_of
from inferlab.widgets._plot import PlotView
from inferlab.widgets.kv_map import KVBlockMap
from inferlab.widgets.timeline import SchedulerTimeline
from inferlab.widgets.token_stream import TokenStream

HINT = "Click a point of the frontier to open its run here: its timeline, KV blocks and tokens."


class FrontierPlot(PlotView):
    """The frontier as a live plot; a click on a point sends its number (``on_pick``)."""
    _esm = asset("common.js", "sweep_view.js")
    _css = asset("common.css", "sweep_view.css")
    kind = "Sweep frontier"
    picked = t.Int(-1).tag(sync=True)            # the point opened beside (-1: none)
    redraw_on = ("dark", "picked")

    def __init__(self, rows, on_pick=None, **kwargs):
        self._rows = list(rows)
        self._on_pick = on_pick
        self._heading = kwargs.get("title")
        super().__init__(**kwargs)
        self.clock = frontier.sweep_clock(self._rows)[0]

    def _on_page_msg(self, widget, content, buffers) -> None:
        if content.get("event") == "pick":
            if self._on_pick is not None:
                self._on_pick(int(content.get("point", -1)))
            return
        super()._on_page_msg(widget, content, buffers)

    def _spec(self, dark: bool | None = None) -> dict:
        return frontier.spec(self._rows, title=self._heading, dark=self._is_dark(dark),
                             selected=self.picked if self.picked >= 0 else None, narrow=True)

    def __repr__(self):
        return f"FrontierPlot({len(self._rows)} points)"


def _check(rows) -> list[dict]:
    out = []
    for i, r in enumerate(rows):
        if not isinstance(r, dict) or "point" not in r:
            raise TypeError(f"sweep row {i} is not a sweep row (a dict with 'point', 'knobs', "
                            f"'metrics', 'trace_path', 'error'): {r!r:.80}")
        out.append(r)
    return out


class SweepView(SavedDisplay, w.HBox):
    def __init__(self, rows, *, title: str | None = None):
        self.rows = _check(list(rows))
        self._title = title
        self._by_point = {r["point"]: r for r in self.rows}
        self.plot = FrontierPlot(self.rows, self.open_point, title=title)
        self.caption = w.HTML(f"<div class='il-sweep-note'>{html.escape(HINT)}</div>"
                              + self._failed_html())
        self.caption.add_class("il-sweep-caption")
        self.timeline, self.kv_map, self.tokens = SchedulerTimeline(), KVBlockMap(), TokenStream()
        self.views = [self.timeline, self.kv_map, self.tokens]
        # the views join the page with the first point opened (a plot first drawn unseen keeps
        # plotly's default 700 px width), and are hidden while a point cannot be opened (not
        # taken out: plotly's widget, shown again, would still update its first, gone view)
        self.runs = w.VBox([])
        self.runs.add_class("il-sweep-runs")
        self.trace: Trace | None = None
        self.shown: int | None = None
        self.errors: list[str] = []
        side = w.VBox([self.caption, self.runs],
                      layout=w.Layout(flex="1 1 480px", min_width="0"))
        self.plot.layout = w.Layout(flex="1 1 400px", min_width="0")
        super().__init__([self.plot, side], layout=w.Layout(flex_flow="row wrap",
                                                            align_items="flex-start"))
        self.add_class("il-sweep")

    @classmethod
    def from_result(cls, result, **kwargs) -> "SweepView":
        """The view of a sweep's result: anything with ``.rows`` (the sweep's rows)."""
        rows = getattr(result, "rows", None)
        if rows is None:
            raise TypeError(f"{type(result).__name__} has no .rows: pass the sweep's result "
                            "or SweepView(rows)")
        return cls(rows, **kwargs)

    def frontier_points(self) -> list[int]:
        return frontier.frontier_points(self.rows)

    def figure(self, dark: bool = False, ringed: bool = False):
        """The frontier as a plotly figure at full width, for export (the live plot is the
        same, its title in shorter lines); ``ringed``: the point opened beside ringed."""
        return frontier.figure(self.rows, title=self._title, dark=dark,
                               selected=self.shown if ringed else None)

    # --- opening a point -------------------------------------------------------------------
    def open_point(self, point: int) -> Trace | None:
        """Open ``point``'s run beside the plot (what a click on it does): its trace, loaded
        from ``trace_path``, replayed into the timeline, KV map and token stream. A point
        that failed, has no trace or whose trace cannot be read says why in the caption
        (returns None)."""
        row = self._by_point.get(point)
        try:
            if row is None:
                raise LookupError(f"the sweep has no point {point}")
            if not frontier.plotted(row):
                raise LookupError(f"point {point} failed: {row.get('error') or 'no throughput'}")
            path = row.get("trace_path")
            if not path:
                raise LookupError(f"point {point} has no recorded trace (its trace_path is "
                                  "empty)")
            if not os.path.exists(path):
                raise LookupError(f"point {point}'s trace file {path} is not there (moved "
                                  "or deleted?)")
            trace = Trace.load(path)
        except Exception as e:  # noqa: BLE001 - said in the view, never a traceback
            msg = str(e) if isinstance(e, LookupError) else \
                f"point {point}'s trace could not be read ({type(e).__name__}: {e})"
            self.errors.append(msg)
            self._show(row, None, msg)
            return None
        if self.runs.children:   # shown before its plots change: an update that reaches a
            self.runs.layout.display = ""    # hidden plot can leave it at the wrong width
        trace.replay(*self.views)
        # the KV map at the run's fullest step (at its last, every block is free again)
        used = [r.kv_blocks_used for r in trace.records]
        if used and used.index(max(used)) < len(used) - 1:
            self.kv_map.cursor = used.index(max(used))
        for v in self.views:     # their redraws sent now (detach ends a replay's wait): one
            v.detach()           # that reached a plot as the page mounted it would fix its
                                 # width at plotly's default 700 px
        self._show(row, trace, None)
        return trace

    def _show(self, row, trace, error) -> None:
        self.trace = trace
        self.shown = row["point"] if row is not None and trace is not None else None
        self.plot.picked = self.shown if self.shown is not None else -1
        if trace is not None and not self.runs.children:
            self.runs.children = tuple(self.views)
        self.runs.layout.display = "" if trace is not None else "none"
        self.caption.value = self._caption(row, trace, error)

    def _caption(self, row, trace, error) -> str:
        if error is not None:
            return (f"<div class='il-sweep-error'>{html.escape(error)}</div>"
                    + self._failed_html())
        names = frontier.varying_knobs(self.rows)
        m = row["metrics"]
        knobs = row.get("knobs") or {}
        vary = ", ".join(f"<b>{html.escape(f'{k}={knobs[k]}')}</b>" for k in names if k in knobs)
        rest = ", ".join(html.escape(f"{k}={v}") for k, v in knobs.items() if k not in names)
        on = "on the frontier" if row["point"] in self.frontier_points() else \
            "not on the frontier"
        nums = (f"{frontier.fmt(m.get(frontier.Y))} output tok/s in total, "
                f"{frontier.fmt(m.get(frontier.X))} per user; TTFT p50 "
                f"{frontier.fmt(m.get('ttft_p50_ms'))} ms, ITL p50 "
                f"{frontier.fmt(m.get('itl_p50_ms'))} ms")
        run = (f"{len(trace)} steps, {len(trace.requests)} requests on "
               f"{html.escape(str(trace.meta.get('model', '?')))}, clock "
               f"{html.escape(str(trace.meta.get('clock', row.get('clock', ''))))}; from "
               f"{html.escape(os.path.basename(row['trace_path']))}")
        return (f"<div class='il-sweep-point'>point {row['point']} ({on}): {vary}"
                + (f" <span class='il-sweep-rest'>(also {rest})</span>" if rest else "")
                + f"</div><div class='il-sweep-nums'>{nums}</div>"
                f"<div class='il-sweep-run'>{run}</div>")

    def _failed_html(self) -> str:
        bad = frontier.failed(self.rows)
        if not bad:
            return ""
        names = frontier.varying_knobs(self.rows)
        items = "".join(f"<li>point {r['point']} ({html.escape(frontier.knob_text(r, names))}):"
                        f" {html.escape(str(r.get('error') or 'no throughput measured'))}</li>"
                        for r in bad)
        return f"<div class='il-sweep-failed'>not plotted (failed):<ul>{items}</ul></div>"

    # --- output ----------------------------------------------------------------------------
    def __repr__(self) -> str:
        return (f"SweepView({len(self.rows)} points, {len(self.frontier_points())} on the "
                f"frontier, {len(frontier.failed(self.rows))} failed)")

    def _repr_mimebundle_(self, **kwargs):
        out = super()._repr_mimebundle_(**kwargs)
        data, meta = out if isinstance(out, tuple) else (out, {})
        data = dict(data)
        data["text/plain"] = repr(self)
        if STATIC_IMAGES:
            try:
                data["image/png"] = base64.b64encode(png_of(self.figure(), height=480)).decode()
            except Exception as e:  # noqa: BLE001 - no browser for kaleido: widget only
                from inferlab.lab.figures import export_failed
                self.errors.append(export_failed("SweepView static image", e))
        return data, meta

    def close(self):
        for v in (self.plot, *self.views):
            v.close()
        super().close()
