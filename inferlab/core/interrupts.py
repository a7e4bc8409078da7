"""Interrupts land between engine steps, never inside one.

Ctrl-C, or Jupyter's Kernel -> Interrupt (a SIGINT to the kernel), raises KeyboardInterrupt in
the main thread at whatever line it is on; inside a step that line may be halfway through
freeing a request's blocks. ``@atomic`` holds a SIGINT that arrives while the method runs and
hands it to the handler that was there before (Python's, which raises KeyboardInterrupt, or
the kernel's) as the method returns, so the engine is always between two whole steps and
``generate`` / ``stream`` can clean up after it. Nested calls hold it once. Only the main
thread receives signals, so elsewhere (a Lab's background run) this does nothing.
"""
from __future__ import annotations

import functools
import signal
import threading

try:                     # the C functions under ``signal``: 10x faster (no enum wrapping),
    import _signal as _sig   # which matters in a per-step path (~2 us vs ~11 us a step)
except ImportError:      # pragma: no cover - other Pythons
    _sig = signal

_held = [False]          # main thread only: a SIGINT is being held by an outer call


class hold_interrupts:
    """A context in which a SIGINT waits until the end (main thread; elsewhere a no-op)."""

    __slots__ = ("prev", "got")

    def __enter__(self):
        self.prev, self.got = None, None
        if _held[0] or threading.current_thread() is not threading.main_thread():
            return self
        try:
            prev = _sig.getsignal(signal.SIGINT)
            if prev is None:              # installed from C: leave it alone
                return self
            _sig.signal(signal.SIGINT, self._hold)
        except (ValueError, OSError):     # e.g. a sub-interpreter
            return self
        self.prev = prev
        _held[0] = True
        return self

    def _hold(self, signum, frame):
        self.got = frame

    def __exit__(self, *exc):
        prev = self.prev
        if prev is None:
            return False
        _held[0] = False
        _sig.signal(signal.SIGINT, prev)
        if self.got is not None:          # deliver it now, between steps
            if callable(prev):
                prev(signal.SIGINT, self.got)
            elif prev == signal.SIG_DFL:
                signal.raise_signal(signal.SIGINT)
        return False


def atomic(method):
    """Run ``method`` with SIGINT held until it returns (see the module's docstring)."""
    @functools.wraps(method)
    def run(*args, **kwargs):
        with hold_interrupts():
            return method(*args, **kwargs)
    return run
