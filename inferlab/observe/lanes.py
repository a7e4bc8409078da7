"""Lanes: step records folded, one at a time, into per-request segments of time.

Each request's life becomes a row of segments (queued | prefill | decode | preempted) with
its finish time; timelines, the comparison view and the Chrome trace export draw from them.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..core.events import StepRecord

COMPUTE = ("prefill", "decode")


@dataclass(slots=True)
class Segment:
    """One stretch of one request's life: queued | prefill | decode | preempted."""

    request_id: str
    kind: str
    t0: float
    t1: float
    step0: int
    step1: int
    tokens: int = 0


class LaneBuilder:
    """Folds StepRecords, one at a time, into per-request segments (timelines, Perfetto)."""

    def __init__(self, arrivals: dict | None = None):
        self.arrivals = arrivals if arrivals is not None else {}
        self.segments: list[Segment] = []
        self.order: list[str] = []             # request ids by first appearance
        self.priority: dict[str, int] = {}     # rid -> priority, when not 0
        self.finish: dict[str, tuple[float, str]] = {}   # rid -> (time, finished|aborted|...)
        self._open: dict[str, Segment] = {}      # rid -> open queued/preempted segment
        self._last: dict[str, Segment] = {}      # rid -> last compute segment
        self.t_last = 0.0

    def _see(self, rid):
        if rid not in self._last and rid not in self._open and rid not in self.finish:
            self.order.append(rid)

    def add(self, rec: StepRecord) -> None:
        k, t0, t1 = rec.step, rec.t_start, rec.t_end
        for ev in rec.request_events:
            if ev.kind == "queued":
                self._see(ev.request_id)
                if ev.info is not None and ev.info.priority:
                    self.priority[ev.request_id] = ev.info.priority
                start = min(self.arrivals.get(ev.request_id, t0), t0)
                self._open[ev.request_id] = Segment(ev.request_id, "queued", start, t0, k, k)
            elif ev.kind == "preempted":
                self._close(ev.request_id, t0, k)
                self._open[ev.request_id] = Segment(ev.request_id, "preempted", t0, t0, k, k)
        for c in rec.batch:
            rid = c.request_id
            self._see(rid)
            self._close(rid, t0, k)
            last = self._last.get(rid)
            if c.kind == "decode" and last is not None and last.kind == "decode" \
                    and last.step1 == k - 1:
                last.t1, last.step1 = t1, k
                last.tokens += c.num_tokens
            else:
                seg = Segment(rid, c.kind, t0, t1, k, k, c.num_tokens)
                self.segments.append(seg)
                self._last[rid] = seg
        for ev in rec.request_events:
            if ev.kind in ("finished", "aborted", "rejected"):
                self._see(ev.request_id)
                self._close(ev.request_id, t1, k)
                self.finish[ev.request_id] = (t1, ev.kind)
        self.t_last = max(self.t_last, t1)

    def _close(self, rid, t, k):
        seg = self._open.pop(rid, None)
        if seg is not None:
            seg.t1, seg.step1 = max(t, seg.t0), k
            self.segments.append(seg)

    def all_segments(self) -> list[Segment]:
        """Closed segments plus the still-open waits, cut at the last step's end."""
        tail = [Segment(s.request_id, s.kind, s.t0, max(self.t_last, s.t0), s.step0, s.step1)
                for s in self._open.values()]
        return self.segments + tail
