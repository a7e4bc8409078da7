"""Trace: every StepRecord of a run, kept so it can be saved, exported and replayed.

    trace = Trace.record(eng)          # or: trace = Trace(); eng.subscribe(trace)
    eng.generate(prompts)
    trace.save("run.trace.json"); Trace.load("run.trace.json")
    with Trace.record(eng, path="run.trace.jsonl") as trace:   # to disk as it runs
        eng.generate(prompts)          # survives the process being killed; memory bounded
    trace.to_chrome_trace("run.chrome.json")   # open in https://ui.perfetto.dev
    trace.replay(view)                 # into a widget with a time scrubber

Files are versioned JSON (never pickle) in the format defined by ``trace_format``; older
versions are migrated on load, and a malformed, foreign or newer file raises
``TraceFormatError``. A recording with ``path=`` is written as it runs, one step per line
(``trace_lines``, ``trace_writer``): after a crash the file loads up to its last complete
step, and only the last ``keep`` steps stay in memory (``records`` reads older ones back
from the file). ``save`` and ``load`` take either layout (``.jsonl``: lines). The recorder reads only step records and the engine's public
attributes. ``inferlab bench trace`` measures what recording costs.
"""
from __future__ import annotations

import importlib.metadata
import os
import time

from ..core.events import StepRecord
from . import trace_format, trace_lines, trace_read
from .chrome import chrome_trace
from .files import write_file
from .lanes import COMPUTE, LaneBuilder, Segment  # noqa: F401 - re-exported
from .trace_format import FORMAT, VERSION  # noqa: F401 - re-exported

__all__ = ["Trace", "LaneBuilder", "Segment", "FORMAT", "VERSION"]


class Trace:
    """Records StepRecords (it is a hook: ``eng.subscribe(trace)``) plus run metadata."""

    def __init__(self, meta: dict | None = None):
        self.records: list[StepRecord] = []
        self.meta: dict = dict(meta or {})
        self.requests: dict[str, dict] = {}    # rid -> prompt_len, arrival, prompt_text
        self.writer = None                     # a TraceWriter while recording to a file
        self._unsubscribe = None

    # --- recording ----------------------------------------------------------------
    @classmethod
    def record(cls, engine, path=None, *, keep: int = trace_lines.KEEP,
               flush_interval: float = 1.0, **meta) -> "Trace":
        """A Trace subscribed to ``engine``, with its model, config and clock noted.

        With ``path`` (e.g. ``"run.trace.jsonl"``) every step is also written to that file as
        it runs (flushed within ``flush_interval`` seconds and at every request's end), and
        only the last ``keep`` steps stay in memory: ``records`` reads older ones back from
        the file. A path that cannot be written raises OutputWriteError here, before any
        step; a write that fails later warns, and the steps from then on stay in memory."""
        import dataclasses

        cfg = engine.config
        config = dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else dict(vars(cfg))
        info = {"model": engine.model_name, "clock": engine.clock_name,
                "config": {k: v for k, v in config.items()
                           if isinstance(v, (str, int, float, bool, type(None)))},
                "num_blocks": engine.num_blocks, "inferlab_version": _version(),
                # what one token's K and V take in this engine's cache (its dtype's bytes)
                "kv_bytes_per_token": getattr(getattr(engine, "runner", None),
                                              "kv_bytes_per_token", None),
                "created": time.strftime("%Y-%m-%dT%H:%M:%S")}
        trace = cls({**info, **meta})
        if path is not None:
            from .trace_writer import TraceWriter
            trace.writer = TraceWriter(path, trace.meta, flush_interval)
            trace.records = trace_lines.StepLog(trace.writer.path, keep)
        trace._unsubscribe = engine.subscribe(trace)
        return trace

    def stop(self) -> "Trace":
        """Stop recording (the records so far stay); a file being recorded gets its end line
        and is closed (see ``write_error`` for a write that failed on the way)."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self.writer is not None:
            self.writer.close()
        return self

    def __enter__(self) -> "Trace":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def write_error(self):
        """The OutputWriteError that stopped writing the recording's file, or None."""
        return self.writer.error if self.writer is not None else None

    def __call__(self, rec: StepRecord) -> None:
        w = self.writer
        if w is None:
            self.records.append(rec)
        else:
            self.records.append(rec, w.write(rec), w.flushed_steps)
        for ev in rec.request_events:
            if ev.kind == "queued" and ev.info is not None:
                self.requests[ev.request_id] = trace_format.request_entry(ev.info)

    def __len__(self) -> int:
        return len(self.records)

    def __repr__(self) -> str:
        span = f", {self.duration:.3f} s" if self.records else ""
        # a file-backed trace counts its request table (the lanes would read the whole file)
        n = len(self.request_ids) if isinstance(self.records, list) else len(self.requests)
        return (f"Trace({len(self.records)} steps, {n} requests{span}, "
                f"model={self.meta.get('model')!r}, clock={self.meta.get('clock')!r})")

    # --- views of the records ----------------------------------------------------------
    @property
    def t0(self) -> float:
        starts = [r.t_start for r in self.records[:1]]
        # a copy first: a live trace gains requests on the engine's thread meanwhile
        starts += [v["arrival"] for v in dict(self.requests).values()
                   if v.get("arrival") is not None]
        return min(starts) if starts else 0.0

    @property
    def duration(self) -> float:
        return (self.records[-1].t_end - self.t0) if self.records else 0.0

    @property
    def request_ids(self) -> list[str]:
        return self.lanes().order

    def arrivals(self) -> dict:
        return {k: v["arrival"] for k, v in dict(self.requests).items()   # a copy: see t0
                if v.get("arrival") is not None}

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
        """Write the whole trace to ``path``: JSON Lines for a ``.jsonl`` name (streamed, one
        step per line), else one JSON document. An unwritable path or a full disk raises
        OutputWriteError naming the path; the trace in memory is unchanged."""
        path = os.fspath(path)
        backing = getattr(self.records, "path", None)
        if backing is not None and os.path.exists(path) and os.path.samefile(path, backing):
            from ..errors import InvalidInputError
            raise InvalidInputError(f"{path!r} is the file this trace reads its steps from; "
                                    "save to another path")
        if path.endswith(".jsonl"):
            from .trace_writer import TraceWriter
            w = TraceWriter(path, self.meta, flush_interval=float("inf"), live=False)
            for rec in self.records:
                w.write(rec)
            w.close()
            if w.error is not None:
                raise w.error
            return path
        return write_file(path, trace_format.encode(self), "the trace")

    @classmethod
    def _from_file(cls, data, source: str) -> "Trace":
        meta, requests, records = trace_read.from_file(data, source)
        trace = cls(meta)
        trace.requests = requests
        trace.records = records
        return trace

    @classmethod
    def from_dict(cls, d, source: str = "trace") -> "Trace":
        """A Trace from a file's parsed JSON value (any supported version)."""
        return cls._from_file(d, source)

    @classmethod
    def load(cls, path, keep: int = trace_lines.KEEP) -> "Trace":
        """A trace from a JSON file or a lines file (told apart by content; ``.jsonl``).
        A lines file keeps its last ``keep`` steps in memory and reads the rest back when
        asked; one cut short (a killed recording) loads up to its last complete step, with
        ``meta["truncated"]`` saying what was cut."""
        path = os.fspath(path)
        if trace_lines.is_lines(path):
            meta, requests, records = trace_lines.read(path, keep)
            trace = cls(meta)
            trace.requests, trace.records = requests, records
            return trace
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


def _version() -> str:
    try:
        return importlib.metadata.version("inferlab")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"
