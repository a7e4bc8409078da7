"""SchedulerTimeline: one lane per request (queued, prefill chunks, decode, preempted,
finished) over time, and under it a strip of each step's batch: prefill and decode tokens.
Its one drawing (inferlab.lab.drawings.timeline) is the live plot, updated in place, cut at
the scrubber's step. The lanes as typed arrays (``seg_*``, ``fin_*``) stay in the kernel,
for Python (tests, the comparison): the browser reads only the plot."""
from __future__ import annotations

import traitlets as t

from inferlab.observe.lanes import LaneBuilder

from inferlab.widgets._base import asset, pack
from inferlab.widgets._plot import PlotView

KINDS = {"queued": 0, "prefill": 1, "decode": 2, "preempted": 3}


def pack_segments(lb: LaneBuilder, t0: float) -> dict:
    """Lanes and segments of a LaneBuilder as typed arrays (shared with the comparison)."""
    lane = {rid: i for i, rid in enumerate(lb.order)}
    segs = lb.all_segments()
    fin = [(lane[r], tt, k) for r, (tt, k) in lb.finish.items() if r in lane]
    return {
        "lanes": list(lb.order),
        "lane_priority": [lb.priority.get(r, 0) for r in lb.order],
        "seg_lane": pack([lane[s.request_id] for s in segs], "<i4"),
        "seg_kind": pack([KINDS[s.kind] for s in segs], "u1"),
        "seg_t0": pack([s.t0 - t0 for s in segs], "<f8"),
        "seg_t1": pack([s.t1 - t0 for s in segs], "<f8"),
        "seg_step0": pack([s.step0 for s in segs], "<i4"),
        "seg_step1": pack([s.step1 for s in segs], "<i4"),
        "seg_tokens": pack([s.tokens for s in segs], "<i4"),
        "fin_lane": pack([f[0] for f in fin], "<i4"),
        "fin_t": pack([f[1] - t0 for f in fin], "<f8"),
        "fin_aborted": pack([f[2] != "finished" for f in fin], "u1"),
    }


class SchedulerTimeline(PlotView):
    _esm = asset("common.js", "timeline.js")
    _css = asset("common.css", "timeline.css")
    kind = "Scheduler timeline"
    lanes = t.List(t.Unicode())
    lane_priority = t.List(t.Int())              # per lane; 0 unless scheduled by priority
    seg_lane = t.Bytes(b"")
    seg_kind = t.Bytes(b"")                      # 0 queued 1 prefill 2 decode 3 preempted
    seg_t0 = t.Bytes(b"")
    seg_t1 = t.Bytes(b"")
    seg_step0 = t.Bytes(b"")
    seg_step1 = t.Bytes(b"")
    seg_tokens = t.Bytes(b"")
    fin_lane = t.Bytes(b"")
    fin_t = t.Bytes(b"")
    fin_aborted = t.Bytes(b"")

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
        for k, v in pack_segments(self._lb, self.t0).items():
            setattr(self, k, v)
        self._changed()

    def segments(self):
        return self._lb.all_segments()

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
