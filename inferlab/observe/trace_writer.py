"""TraceWriter: a recording goes to its file as it runs (the lines layout of ``trace_lines``).

When lines reach the file (the operating system's page cache: they survive the process being
killed, though not a power cut until ``close``, which fsyncs):
- the header at once, when the writer is made (so a bad path fails before the run starts);
- a step whose events end a request ("finished", "aborted", "rejected") at once, with every
  step before it;
- any other step within ``flush_interval`` seconds (1.0): the engine's hook flushes when the
  last flush is that old, and a timer thread covers an engine that has gone quiet;
- everything when more than ``MAX_BUFFER`` bytes wait, and at ``close`` (plus the end line).

A write that fails (full disk, file size limit, the file system went away) never breaks the
engine: the writer keeps the error (``.error``, an OutputWriteError naming the path and how
many steps the file holds), warns once, and writes nothing more; the Trace keeps every later
step in memory. ``Trace.load`` reads the file up to its last complete step.
"""
from __future__ import annotations

import atexit
import os
import threading
import time
import warnings
import weakref

import msgspec

from .files import write_error
from .trace_format import step_to_file
from .trace_lines import end_line, header_line

ENDS = frozenset({"finished", "aborted", "rejected"})
MAX_BUFFER = 1 << 20
_open: "weakref.WeakSet[TraceWriter]" = weakref.WeakSet()


class TraceWriter:
    def __init__(self, path, meta: dict, flush_interval: float = 1.0, live: bool = True):
        """``live``: a recording (a timer thread flushes, a failed write warns); else a
        one-shot save whose caller raises ``.error``."""
        self.path = os.fspath(path)
        self.live = live
        self.flush_interval = float(flush_interval)
        self.steps = 0                # steps handed to write()
        self.flushed_steps = 0        # steps known to be in the file
        self.bytes_written = 0        # offset of the next line (buffered ones included)
        self.flushes = 0
        self.error = None
        self._buf = bytearray()
        self._lock = threading.Lock()
        self._enc = msgspec.json.Encoder()
        self._closed = False
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC
                               | getattr(os, "O_CLOEXEC", 0), 0o666)
        except OSError as e:
            raise self._error(e) from e
        self._last = time.monotonic()
        with self._lock:
            self._add(header_line(meta))
            self._flush()
        if self.error is not None:
            self.close()
            raise self.error
        self._wake = threading.Event()
        _open.add(self)
        if live:
            threading.Thread(target=_tick, args=(weakref.ref(self), self._wake,
                                                 max(self.flush_interval, 0.05)),
                             daemon=True, name="inferlab-trace-flush").start()

    def _add(self, line: bytes) -> int:
        off = self.bytes_written
        self._buf += line
        self.bytes_written += len(line)
        return off

    def write(self, rec) -> int:
        """Append one StepRecord; returns the byte offset of its line."""
        line = self._enc.encode(step_to_file(rec)) + b"\n"
        with self._lock:
            if self._closed or self.error is not None:
                return -1
            off = self._add(line)
            self.steps += 1
            if (len(self._buf) > MAX_BUFFER
                    or any(e.kind in ENDS for e in rec.request_events)
                    or time.monotonic() - self._last >= self.flush_interval):
                self._flush()
        return off

    def flush(self) -> None:
        with self._lock:
            if self._buf and not self._closed:
                self._flush()

    def _flush(self) -> None:
        """Everything buffered to the file (the lock held)."""
        if self.error is not None:
            return
        done = 0
        try:
            with memoryview(self._buf) as view:
                while done < len(view):
                    done += os.write(self._fd, view[done:])
        except OSError as e:
            self._buf = bytearray()    # (not clear(): a view may outlive a failed write)
            self.error = self._error(e)
            if self.live and self.flushes:    # (a failed header: the caller raises)
                warnings.warn(str(self.error), RuntimeWarning, stacklevel=4)
            return
        self._buf = bytearray()
        self.flushed_steps = self.steps
        self.flushes += 1
        self._last = time.monotonic()

    def _error(self, e: OSError):
        if not self.flushes:
            return write_error(self.path, e, "record a trace to" if self.live else
                               "save the trace to", "nothing was written there" +
                               (" (the engine was not touched)" if self.live else ""))
        keeps = (f"the file keeps its first {self.flushed_steps} steps (Trace.load reads "
                 "them); ")
        if not self.live:
            return write_error(self.path, e, "save the trace to",
                               keeps + "the trace in memory is unchanged")
        return write_error(self.path, e, "go on writing the recording to",
                           keeps + "later steps are kept in memory only "
                           "(trace.save(another_path) writes them all)")

    def close(self) -> None:
        """Flush, write the end line (the recording stopped cleanly), fsync and close."""
        with self._lock:
            if self._closed:
                return
            if self.error is None:
                self._add(end_line(self.steps, time.strftime("%Y-%m-%dT%H:%M:%S")))
                self._flush()
            if self.error is None:
                try:
                    os.fsync(self._fd)
                except OSError:
                    pass                   # e.g. a pipe or /dev/full: nothing to sync
            os.close(self._fd)
            self._closed = True
        wake = getattr(self, "_wake", None)
        if wake is not None:
            wake.set()
        _open.discard(self)

    @property
    def closed(self) -> bool:
        return self._closed


def _tick(ref, wake: threading.Event, interval: float) -> None:
    """Flush a quiet writer's buffered lines every ``interval``; ends with the writer."""
    while not wake.wait(interval):
        w = ref()
        if w is None:
            return
        w.flush()
        del w


@atexit.register
def _flush_all() -> None:
    """At a normal exit, what is buffered reaches the file (with no end line: the recording
    was not stopped, and loading says so)."""
    for w in list(_open):
        w.flush()
