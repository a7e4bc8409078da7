"""The trace file as lines (JSON Lines): the layout a recording is written in as it runs.

    {"format":"inferlab-trace","version":2,"layout":"lines","meta":{...}}     the header
    {"step":0,"t_start":...}                          one step per line (``trace_format.Step``)
    {"end":{"steps":1234,"closed":"2026-11-29T10:00:00"}}        only when recording stopped

A step line is the same msgspec ``Step`` struct as in a JSON file of the same version, so both
layouts share one schema and one validation. The file is only ever appended to, so a process
killed mid-write leaves at most one incomplete last line: loading drops it and says so in
``meta["truncated"]`` and a warning, as it does for a file without its end line (the process
died, or it is still recording). Any other bad line raises ``TraceFormatError`` with its number.

A trace loaded from (or recorded to) such a file keeps only its last ``keep`` steps in
memory; ``StepLog`` reads the older ones back from the file when they are asked for.

    is_lines(path) -> bool          by the extension (.jsonl), else by the first line
    read(path, keep) -> (meta, requests, StepLog)
"""
from __future__ import annotations

import os
import threading
import warnings
from array import array
from collections import deque
from collections.abc import Sequence
from typing import Any, Literal

import msgspec

from ..errors import TraceFormatError
from .trace_format import (FORMAT, VERSION, NonNeg, Step, describe_error, check_meta, check_step,
                           request_entry, step_from_file)

LAYOUT = "lines"
KEEP = 2000                 # steps a file-backed trace keeps in memory (~4.4 KB each)
EVERY = 256                 # one byte offset kept per this many lines (8 bytes each)


class Header(msgspec.Struct, forbid_unknown_fields=True):
    format: Literal["inferlab-trace"]
    version: Literal[2]
    layout: Literal["lines"]
    meta: dict[str, Any]


class EndInfo(msgspec.Struct, forbid_unknown_fields=True):
    steps: NonNeg
    closed: str


class End(msgspec.Struct, forbid_unknown_fields=True):
    end: EndInfo


class _Peek(msgspec.Struct):
    format: Any = None
    version: Any = None
    layout: Any = None


def header_line(meta: dict) -> bytes:
    return msgspec.json.encode(Header(FORMAT, VERSION, LAYOUT, dict(meta))) + b"\n"


def end_line(steps: int, closed: str) -> bytes:
    return msgspec.json.encode(End(EndInfo(steps, closed))) + b"\n"


def is_lines(path) -> bool:
    """True for a lines file: a ``.jsonl`` name, or a first line that is a lines header."""
    path = os.fspath(path)
    if path.endswith(".jsonl"):
        return True
    with open(path, "rb") as f:
        first = f.readline(1 << 20)
    if not first.endswith(b"\n"):
        return False                  # one line (a JSON file) or nothing
    try:
        return msgspec.json.decode(first, type=_Peek).layout == LAYOUT
    except msgspec.MsgspecError:
        return False


class StepLog(Sequence):
    """The steps of a trace whose file holds them: a read-only list of StepRecords.

    The last ``keep`` are in memory; older ones are read back from the file when indexed,
    sliced or iterated (a sparse index keeps one byte offset per EVERY lines). While
    recording, a step leaves memory only once the writer has flushed it, so every step is
    always in the file or in memory, even after a write failed."""

    def __init__(self, path: str, keep: int = KEEP):
        self.path, self.keep = path, max(int(keep), 1)
        self._lock = threading.Lock()
        self._offsets = array("q")       # byte offset of line k * EVERY (k = 0, 1, ...)
        self._tail: deque = deque()      # the newest steps, as StepRecords
        self._n = 0

    # --- growing (the recorder, or the loader) ------------------------------------------
    def append(self, rec, offset: int, durable: int) -> None:
        """Add the next step (its line starts at byte ``offset``); the first ``durable``
        steps are known to be in the file, so those beyond ``keep`` may leave memory."""
        with self._lock:
            if self._n % EVERY == 0:
                self._offsets.append(offset)
            self._tail.append(rec)
            self._n += 1
            tail = self._tail
            while len(tail) > self.keep and self._n - len(tail) < durable:
                tail.popleft()

    @property
    def in_memory(self) -> int:
        return len(self._tail)

    # --- reading ----------------------------------------------------------------------
    def __len__(self) -> int:
        return self._n

    def _snapshot(self):
        with self._lock:
            return self._n, list(self._tail)

    def __getitem__(self, i):
        n, tail = self._snapshot()
        first = n - len(tail)
        if isinstance(i, slice):
            a, b, step = i.indices(n)
            if step != 1:
                return [self[k] for k in range(a, b, step)]
            if b <= a:
                return []
            disk = list(self._read(a, min(b, first))) if a < first else []
            return disk + tail[max(a, first) - first:max(b - first, 0)]
        k = i + n if i < 0 else i
        if not 0 <= k < n:
            raise IndexError(f"step index {i} out of range (the trace has {n} steps)")
        return tail[k - first] if k >= first else next(self._read(k, k + 1))

    def __iter__(self):
        n, tail = self._snapshot()
        yield from self._read(0, n - len(tail))
        yield from tail

    def _read(self, a: int, b: int):
        """Steps a..b-1 from the file (all of them whole lines written before)."""
        if b <= a:
            return
        dec = msgspec.json.Decoder(Step)
        with open(self.path, "rb") as f:
            k = a // EVERY
            f.seek(self._offsets[k])
            for _ in range(a - k * EVERY):
                f.readline()
            for i in range(a, b):
                line = f.readline()
                try:
                    yield step_from_file(dec.decode(line))
                except msgspec.MsgspecError as e:
                    raise TraceFormatError(
                        f"{self.path} changed after it was written: step {i} (line {i + 2}) "
                        f"no longer reads back ({e})") from None

    def __eq__(self, other):
        if isinstance(other, (list, tuple, StepLog)):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    __hash__ = None

    def __repr__(self) -> str:
        return (f"StepLog({self._n} steps, the last {len(self._tail)} in memory, "
                f"the rest in {self.path!r})")


def _bad(source: str, lineno: int, problem) -> TraceFormatError:
    path, what = problem
    return TraceFormatError(f"{source} (trace lines, format v{VERSION}) is malformed at line "
                            f"{lineno}, {path}: {what}")


def _header(source: str, line: bytes) -> dict:
    if not line:
        raise TraceFormatError(f"{source} is empty: a recording that never wrote its header")
    try:
        peek = msgspec.json.decode(line, type=_Peek)
    except msgspec.MsgspecError:
        raise TraceFormatError(f"{source} does not start with an inferlab trace header line"
                               + ("" if line.endswith(b"\n") else " (it is cut short)")) from None
    if peek.format != FORMAT:
        raise TraceFormatError(f"{source} is not an inferlab trace (expected a first line "
                               f"with \"format\": \"{FORMAT}\")")
    v = peek.version
    if isinstance(v, int) and not isinstance(v, bool) and v > VERSION:
        raise TraceFormatError(f"{source} is trace format version {v}, newer than this "
                               f"inferlab reads (up to {VERSION}); upgrade inferlab")
    try:
        head = msgspec.json.decode(line, type=Header)
    except msgspec.ValidationError as e:
        raise _bad(source, 1, describe_error(e)) from None
    problem = check_meta(head.meta)
    if problem:
        raise _bad(source, 1, problem)
    return head.meta


def read(path, keep: int = KEEP):
    """Read and validate a lines file: ``(meta, requests, StepLog)``. Every line is decoded
    and checked; only the last ``keep`` steps stay in memory."""
    source = os.fspath(path)
    dec, end_dec = msgspec.json.Decoder(Step), msgspec.json.Decoder(End)
    log = StepLog(source, keep)
    kept: deque = deque(maxlen=log.keep)
    requests: dict[str, dict] = {}
    end, cut, lineno = None, None, 1
    with open(source, "rb") as f:
        first = f.readline()
        meta = _header(source, first)
        offset = len(first)
        for line in f:
            lineno += 1
            whole = line.endswith(b"\n")
            if end is not None:
                raise TraceFormatError(f"{source} has data after its end line (line {lineno})")
            try:
                if line.startswith(b'{"end"'):
                    end = end_dec.decode(line).end
                    continue
                s = dec.decode(line)
            except msgspec.ValidationError as e:
                raise _bad(source, lineno, describe_error(e)) from None
            except msgspec.DecodeError as e:
                if whole:
                    raise TraceFormatError(f"{source} line {lineno} is not valid JSON "
                                           f"({e})") from None
                cut = len(line)            # the last line, cut mid-write
                break
            problem = check_step(s, "$")
            if problem:
                raise _bad(source, lineno, problem)
            for e in s.request_events:
                if e.kind == "queued" and e.info is not None:
                    requests[e.request_id] = request_entry(e.info)
            if log._n % EVERY == 0:
                log._offsets.append(offset)
            log._n += 1
            kept.append(s)
            offset += len(line)
    n = log._n
    if end is not None and end.steps != n:
        raise TraceFormatError(f"{source}: its end line says {end.steps} steps, but it holds "
                               f"{n}")
    log._tail.extend(step_from_file(s) for s in kept)
    notes = []
    if cut is not None:
        notes.append(f"last line incomplete ({cut} bytes) dropped")
    if end is None:
        notes.append("no end line: the recording did not stop cleanly (the process was "
                     "killed, or it is still recording)")
    if notes:
        meta["truncated"] = "; ".join(notes) + f"; {n} complete steps loaded"
        warnings.warn(f"inferlab: {source}: {meta['truncated']}", RuntimeWarning, stacklevel=3)
    return meta, requests, log
