"""Trace: every StepRecord of a run, kept so it can be saved, exported and replayed.

    trace = Trace.record(eng)          # or: trace = Trace(); eng.subscribe(trace)
    eng.generate(prompts)
    trace.save("run.trace.json"); Trace.load("run.trace.json")
    trace.to_chrome_trace("run.chrome.json")   # open in https://ui.perfetto.dev
    trace.replay(view)                 # into a widget with a time scrubber

Files are versioned JSON (never pickle): a malformed, foreign or newer file raises
``TraceFormatError``. ``inferlab bench trace`` measures what recording costs.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

from inferlab.errors import TraceFormatError
from inferlab.core.events import StepRecord

FORMAT = "inferlab-trace"
VERSION = 1
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


class Trace:
    """Records StepRecords (it is a hook: ``eng.subscribe(trace)``) plus run metadata."""

    def __init__(self, meta: dict | None = None):
        self.records: list[StepRecord] = []
        self.meta: dict = dict(meta or {})
        self.requests: dict[str, dict] = {}    # rid -> prompt_len, arrival, prompt_text
        self._engine = None
        self._unsubscribe = None

    # --- recording ----------------------------------------------------------------
    @classmethod
    def record(cls, engine, **meta) -> "Trace":
        """A Trace subscribed to ``engine``, with its model, config and clock noted."""
        import dataclasses

        from inferlab import __version__
        cfg = engine.config
        config = dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else dict(vars(cfg))
        info = {"model": engine.model_name, "clock": engine.clock_name,
                "config": {k: v for k, v in config.items()
                           if isinstance(v, (str, int, float, bool, type(None)))},
                "num_blocks": engine.num_blocks, "inferlab_version": __version__,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S")}
        trace = cls({**info, **meta})
        trace._engine = engine
        trace._unsubscribe = engine.subscribe(trace)
        return trace

    def stop(self) -> "Trace":
        """Stop recording (the records so far stay)."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        return self

    def __call__(self, rec: StepRecord) -> None:
        self.records.append(rec)
        if self._engine is not None and rec.request_events:
            self._note_requests(rec)

    def _note_requests(self, rec):
        reqs = self._engine.scheduler.requests
        for ev in rec.request_events:
            r = reqs.get(ev.request_id) if ev.kind == "queued" else None
            if r is not None:
                text = r.prompt_text or ""
                self.requests[ev.request_id] = {
                    "prompt_len": len(r.prompt_token_ids), "arrival": r.arrival_time,
                    "prompt_text": text[:2000]}

    def __len__(self) -> int:
        return len(self.records)

    def __repr__(self) -> str:
        span = f", {self.duration:.3f} s" if self.records else ""
        return (f"Trace({len(self.records)} steps, {len(self.request_ids)} requests{span}, "
                f"model={self.meta.get('model')!r}, clock={self.meta.get('clock')!r})")

    # --- views of the records ----------------------------------------------------------
    @property
    def t0(self) -> float:
        starts = [r.t_start for r in self.records[:1]]
        starts += [v["arrival"] for v in self.requests.values() if v.get("arrival") is not None]
        return min(starts) if starts else 0.0

    @property
    def duration(self) -> float:
        return (self.records[-1].t_end - self.t0) if self.records else 0.0

    @property
    def request_ids(self) -> list[str]:
        return self.lanes().order

    def arrivals(self) -> dict:
        return {k: v["arrival"] for k, v in self.requests.items() if v.get("arrival") is not None}

    def lanes(self) -> LaneBuilder:
        lb = LaneBuilder(self.arrivals())
        for rec in self.records:
            lb.add(rec)
        return lb

    def token_texts(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for rec in self.records:
            for e in rec.emitted:
                out.setdefault(e.request_id, []).append(e.text)
        return out

    # --- files -------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "meta": self.meta,
                "requests": self.requests, "steps": [r.to_dict() for r in self.records]}

    def save(self, path) -> str:
        path = os.fspath(path)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_dict(), f, separators=(",", ":"))
        return path

    @classmethod
    def from_dict(cls, d, source: str = "trace") -> "Trace":
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise TraceFormatError(f"{source} is not an inferlab trace (expected a JSON object "
                                   f"with \"format\": \"{FORMAT}\")")
        v = d.get("version")
        if not isinstance(v, int) or isinstance(v, bool):
            raise TraceFormatError(f"{source} has no integer \"version\" (got {v!r})")
        if v > VERSION:
            raise TraceFormatError(f"{source} is trace format version {v}, newer than this "
                                   f"inferlab reads (up to {VERSION}); upgrade inferlab")
        if v < 1:
            raise TraceFormatError(f"{source} has an invalid trace version {v}")
        steps = d.get("steps")
        if not isinstance(steps, list):
            raise TraceFormatError(f"{source}: \"steps\" must be a list of step records")
        from inferlab.observe.trace_format import validate
        validate(d, source)
        trace = cls(d.get("meta") or {})
        trace.requests = dict(d.get("requests") or {})
        for i, s in enumerate(steps):
            try:
                trace.records.append(StepRecord.from_dict(s))
            except (TypeError, KeyError, ValueError, AttributeError) as e:
                raise TraceFormatError(f"{source}: step record #{i} is malformed "
                                       f"({type(e).__name__}: {e})") from None
        return trace

    @classmethod
    def load(cls, path) -> "Trace":
        path = os.fspath(path)
        try:
            with open(path, encoding="utf-8") as f:
                d = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise TraceFormatError(f"{path} is not valid JSON ({e}); inferlab traces are JSON "
                                   "files written by Trace.save()") from None
        return cls.from_dict(d, source=path)

    def to_chrome_trace(self, path=None) -> dict:
        """Chrome Trace Event Format: one thread (track) per request with its queued, prefill,
        decode and preempted slices; counters for KV usage and batch size. Opens in Perfetto."""
        t0, us = self.t0, 1e6
        pid = 1
        lanes = self.lanes()
        tid = {rid: i + 1 for i, rid in enumerate(lanes.order)}
        ev = [{"ph": "M", "pid": pid, "name": "process_name",
               "args": {"name": f"inferlab {self.meta.get('model', '')} "
                                f"({self.meta.get('clock', 'wall')} clock)"}}]
        for rid, i in tid.items():
            ev.append({"ph": "M", "pid": pid, "tid": i, "name": "thread_name",
                       "args": {"name": rid}})
            ev.append({"ph": "M", "pid": pid, "tid": i, "name": "thread_sort_index",
                       "args": {"sort_index": i}})
        for s in lanes.all_segments():
            ev.append({"ph": "X", "pid": pid, "tid": tid[s.request_id], "name": s.kind,
                       "cat": "compute" if s.kind in COMPUTE else "wait",
                       "ts": (s.t0 - t0) * us, "dur": max(s.t1 - s.t0, 0.0) * us,
                       "args": {"steps": [s.step0, s.step1], "tokens": s.tokens}})
        for rid, (t, kind) in lanes.finish.items():
            ev.append({"ph": "i", "s": "t", "pid": pid, "tid": tid[rid], "name": kind,
                       "ts": (t - t0) * us})
        for r in self.records:
            ts = (r.t_end - t0) * us
            ev.append({"ph": "C", "pid": pid, "name": "KV usage", "ts": ts,
                       "args": {"blocks_used": r.kv_blocks_used,
                                "tokens_used": r.kv_tokens_used}})
            ev.append({"ph": "C", "pid": pid, "name": "batch size", "ts": ts,
                       "args": {"requests": len(r.batch), "prefill_tokens": r.num_prefill_tokens,
                                "decode_tokens": r.num_decode_tokens}})
        out = {"traceEvents": ev, "displayTimeUnit": "ms",
               "otherData": {k: str(v) for k, v in self.meta.items() if k != "config"}}
        if path is not None:
            with open(os.fspath(path), "w", encoding="utf-8") as f:
                json.dump(out, f, separators=(",", ":"))
        return out

    def replay(self, *views, step: int | None = None):
        """Load this trace into widgets (each gets a time scrubber); returns the first view."""
        for v in views:
            v.load_trace(self)
            if step is not None:
                v.cursor = step
        return views[0] if views else None
