"""The one way a test or fixture waits with a wall-clock timeout (DESIGN.md, Evidence).

    from waiting import wait_until        # tests/ is on sys.path, as for test_layout
    wait_until(lambda: conn.tree.num_stored == 4, 5, what="the 4 stored blocks")

It polls ``predicate`` every ``interval`` seconds and returns its first truthy value; when
``timeout`` seconds pass first it raises TimeoutError naming ``what`` (a string, or a function
giving one then, e.g. with a log tail). A test asserts what it waited for, never how long it
took; test_no_timed_asserts.py flags a hand-written deadline loop whose outcome is asserted.
"""
from __future__ import annotations

import inspect
import time


def wait_until(predicate, timeout: float, interval: float = 0.01, what=None, sleep=time.sleep):
    """``predicate()``'s first truthy value within ``timeout`` s, else TimeoutError; ``sleep``
    passes each interval (a browser page's ``wait_for_timeout`` keeps its events flowing)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            break
        sleep(interval)
    if callable(what):
        what = what()
    if what is None:
        try:
            what = inspect.getsource(predicate).strip()
        except (OSError, TypeError):
            what = repr(predicate)
    raise TimeoutError(f"not within {timeout:g} s: {what}")
