"""Pacing a view's redraws: at most ``rate`` a second, at most ``duty`` of the time, and,
once the page answers redraws, one at a time (the page that falls behind gets the latest
state when it is ready, never a queue of states to draw one by one). ``PlotView`` (_plot.py)
redraws through it; the page's answer is ilPlot's "drawn" message (common.js)."""
from __future__ import annotations

import threading
import time


class Throttle:
    """Call ``fn`` at most ``rate`` times a second, and at most ``duty`` of the time (a slow
    draw waits longer: the engine in the same process keeps the rest); a call that comes too
    soon is run once, later, for all the calls in between (the last state is always drawn).

    Paced by the page: once a page has said it drew (``drawn()``), each call waits until the
    page has drawn the last one, or ``ack_timeout`` s: a page that falls behind gets the
    latest state when it is ready, never a queue of states it has to draw one by one."""
    ack_timeout = 1.0

    def __init__(self, fn, rate: float, lock, duty: float = 0.25):
        self._fn, self._rate, self._lock, self._duty = fn, rate, lock, duty
        self._last = 0.0
        self._gap = 1.0 / rate
        self._again = False
        self._timer: threading.Timer | None = None
        self._held = 0.0                    # monotonic time the page's answer is awaited to
        self.paced = False                  # a page answers draws
        self.count = 0

    def __call__(self) -> None:
        # under the lock: a call between the pending timer's draw and its clearing ``_timer``
        # would set ``_again`` after it was read, and the last state would never be drawn
        with self._lock:
            wait = max(self._last + self._gap, self._held) - time.monotonic()
            if wait <= 0:
                self._run()
            elif self._timer is not None:
                self._again = True          # drawn again after the pending one
            else:
                self._timer = threading.Timer(wait, self._later)
                self._timer.daemon = True
                self._timer.start()

    def drawn(self) -> None:
        """The page drew the last call's result: a waiting call runs now (or when the rate
        allows)."""
        with self._lock:
            self.paced, self._held = True, 0.0
            if self._timer is not None:
                self._timer.cancel()
                self._timer, self._again = None, False
                self()

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
            done = time.monotonic()
            self._gap = max(1.0 / self._rate, (done - t0) / self._duty)
            if self.paced:
                self._held = done + self.ack_timeout

    def finish(self) -> None:
        """A waiting call runs now (the end of a live run: its last state drawn at once)."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer, self._again = None, False
                self._run()

    def pending(self) -> bool:
        """A redraw is waiting or under way."""
        return self._timer is not None

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
