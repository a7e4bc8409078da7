"""Trace: every StepRecord of a run, kept so it can be saved, exported and replayed.

    trace = Trace.record(eng)          # or: trace = Trace(); eng.subscribe(trace)
    eng.generate(prompts)
    trace.save("run.trace.json"); Trace.load("run.trace.json")
    trace.to_chrome_trace("run.chrome.json")   # open in https://ui.perfetto.dev
    trace.replay(view)                 # into a widget with a time scrubber

Files are versioned JSON (never pickle) in the format defined by ``trace_format``; older
versions are migrated on load, and a malformed, foreign or newer file raises
``TraceFormatError``. The recorder reads only step records and the engine's public
attributes. ``inferlab bench trace`` measures what recording costs.
"""
from __future__ import annotations

import os
import time

from ..core.events import StepRecord
from . import trace_format
from .chrome import chrome_trace
from .lanes import COMPUTE, LaneBuilder, Segment  # noqa: F401 - re-exported
from .trace_format import FORMAT, VERSION  # noqa: F401 - re-exported

__all__ = ["Trace", "LaneBuilder", "Segment", "FORMAT", "VERSION"]


class Trace:
    """Records StepRecords (it is a hook: ``eng.subscribe(trace)``) plus run metadata."""

    def __init__(self, meta: dict | None = None):
        self.records: list[StepRecord] = []
        self.meta: dict = dict(meta or {})
        self.requests: dict[str, dict] = {}    # rid -> prompt_len, arrival, prompt_text
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
        for ev in rec.request_events:
            if ev.kind == "queued" and ev.info is not None:
                self.requests[ev.request_id] = trace_format.request_entry(ev.info)

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
        """The trace as the JSON value of a current-version file."""
        return trace_format.to_builtins(self)

    def save(self, path) -> str:
        path = os.fspath(path)
        data = trace_format.encode(self)
        with open(path, "wb") as f:
            f.write(data)
        return path

    @classmethod
    def _from_file(cls, data, source: str) -> "Trace":
        meta, requests, records = trace_format.from_file(data, source)
        trace = cls(meta)
        trace.requests = requests
        trace.records = records
        return trace

    @classmethod
    def from_dict(cls, d, source: str = "trace") -> "Trace":
        """A Trace from a file's parsed JSON value (any supported version)."""
        return cls._from_file(d, source)

    @classmethod
    def load(cls, path) -> "Trace":
        path = os.fspath(path)
        with open(path, "rb") as f:
            data = f.read()
        return cls._from_file(data, path)

    def to_chrome_trace(self, path=None) -> dict:
        """Chrome Trace Event Format: one thread (track) per request with its queued, prefill,
        decode and preempted slices; counters for KV usage and batch size. Opens in Perfetto."""
        return chrome_trace(self, path)

    def replay(self, *views, step: int | None = None):
        """Load this trace into widgets (each gets a time scrubber); returns the first view."""
        for v in views:
            v.load_trace(self)
            if step is not None:
                v.cursor = step
        return views[0] if views else None
