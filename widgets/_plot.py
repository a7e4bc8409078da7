"""A view's one plotly drawing, live: a plotly ``FigureWidget`` (an anywidget) held in a trait
of the view, rendered by the view's JS as a child widget, and updated in place.

``sync(fw, last, new)`` makes the FigureWidget show the figure spec ``new`` (a plain dict, as
the drawings build it), sending only the properties that changed since ``last`` (one
restyle per changed trace, one relayout); a figure whose traces differ in number or type
gets a new FigureWidget instead (the caller assigns it). ``Throttle`` runs a
redraw at most ``rate`` times a second, the last request always drawn (trailing edge).
"""
from __future__ import annotations

import threading
import time

import plotly.graph_objects as go


def _changes(old: dict, new: dict) -> dict:
    diff = {k: v for k, v in new.items() if old.get(k) != v}
    diff.update({k: None for k in old if k not in new})
    return diff


def _shape(spec: dict) -> list:
    return [(t.get("type"), t.get("name")) for t in spec["data"]]


def sync(fw: go.FigureWidget | None, last: dict | None, new: dict) -> go.FigureWidget | None:
    """Make ``fw`` (which shows the figure spec ``last``) show the spec ``new`` in place,
    sending only what changed (one restyle per changed trace, one relayout); returns a new
    FigureWidget instead when ``fw`` cannot take it (None, or other traces), else None."""
    if fw is None or last is None or _shape(last) != _shape(new):
        return go.FigureWidget(new)
    # one restyle per changed trace, not one batch_update: a batch sends each property as one
    # value per trace, with "undefined" for the traces where it did not change, and plotly's
    # widget front end resets those to the default (showlegend back to true, ...): the
    # legend then lists every trace
    for trace, old, tr in zip(fw.data, last["data"], new["data"]):
        diff = _changes(old, tr)
        if diff:
            trace.update(diff, overwrite=True)
    diff = _changes(last["layout"], new["layout"])
    if diff:
        fw.layout.update(diff, overwrite=True)
    return None


def same(fw: go.FigureWidget, fig: go.Figure) -> bool:
    """Whether ``fw`` shows ``fig`` (traces and layout; trace uids aside)."""
    a, b = fw.to_plotly_json(), fig.to_plotly_json()
    for t in (*a["data"], *b["data"]):
        t.pop("uid", None)
    return a == b


class Throttle:
    """Call ``fn`` at most ``rate`` times a second, and at most ``duty`` of the time (a slow
    draw waits longer: the engine in the same process keeps the rest); a call that comes too
    soon is run once, later, for all the calls in between (the last state is always drawn)."""

    def __init__(self, fn, rate: float, lock, duty: float = 0.25):
        self._fn, self._rate, self._lock, self._duty = fn, rate, lock, duty
        self._last = 0.0
        self._gap = 1.0 / rate
        self._again = False
        self._timer: threading.Timer | None = None
        self.count = 0

    def __call__(self) -> None:
        wait = self._last + self._gap - time.monotonic()
        if wait <= 0:
            self._run()
        elif self._timer is not None:
            self._again = True          # drawn again after the pending one
        else:
            self._timer = threading.Timer(wait, self._later)
            self._timer.daemon = True
            self._timer.start()

    def _later(self) -> None:
        with self._lock:
            try:
                self._run()
            finally:
                self._timer = None
                if self._again:
                    self._again = False
                    self()

    def _run(self) -> None:
        self._last = t0 = time.monotonic()
        self.count += 1
        try:
            self._fn()
        finally:
            self._gap = max(1.0 / self._rate, (time.monotonic() - t0) / self._duty)

    def pending(self) -> bool:
        """A redraw is waiting or under way."""
        return self._timer is not None

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
