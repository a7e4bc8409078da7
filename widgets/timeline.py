"""SchedulerTimeline: one lane per request (queued, prefill chunks, decode, preempted,
finished) over time, and under it a strip of each step's batch: prefill and decode tokens.
Its one drawing (inferlab.lab.drawings.timeline) is the live plot, updated in place, cut at
the scrubber's step; ``lanes`` and ``segments()`` give the lanes to Python (the browser reads
only the plot)."""
from __future__ import annotations

import traitlets as t

from inferlab.observe.lanes import LaneBuilder

from inferlab.widgets._base import asset
from inferlab.widgets._plot import PlotView

class SchedulerTimeline(PlotView):
    _esm = asset("common.js", "timeline.js")
    _css = asset("common.css", "timeline.css")
    kind = "Scheduler timeline"
    lanes = t.List(t.Unicode())                  # request ids, one lane each, in order

    def _reset(self):
        self._lb = LaneBuilder(self._trace.arrivals() if self._trace is not None else {})
        self._steps: list[dict] = []

    def _ingest(self, records):
        self._lb.arrivals.update(self._trace.arrivals())
        for rec in records:
            self._lb.add(rec)
            self._steps.append({"step": rec.step, "t0": rec.t_start, "t1": rec.t_end,
                                "prefill": rec.num_prefill_tokens,
                                "decode": rec.num_decode_tokens, "running": len(rec.batch),
                                "budget": rec.token_budget})

    def _sync(self):
        self.lanes = list(self._lb.order)
        self._changed()

    def segments(self):
        return self._lb.all_segments()

    def finishes(self) -> dict:
        """{request id: (time, "finished" | "aborted" | ...)} for each request that ended."""
        with self._lock:
            return dict(self._lb.finish)

    def priorities(self) -> dict:
        """{request id: priority} per lane (0 unless scheduled by priority)."""
        with self._lock:
            return {r: self._lb.priority.get(r, 0) for r in self._lb.order}

    def _spec(self, dark: bool | None = None) -> dict:
        """The scheduler timeline (inferlab.lab.drawings.timeline), cut at the scrubber's
        step, in the page's theme unless ``dark`` says."""
        from inferlab.lab.drawings.timeline import spec
        with self._lock:
            upto = self.shown_time() if self.cursor >= 0 else None
            return spec(self._lb.all_segments(), self._lb.order, self._steps, self.t0,
                        title=self.title, clock=self.clock, upto=upto, finish=self._lb.finish,
                        dark=self._is_dark(dark))

    def __repr__(self):
        return f"SchedulerTimeline({len(self._lb.order)} requests, " \
               f"{self.num_steps} steps, clock={self.clock!r})"
