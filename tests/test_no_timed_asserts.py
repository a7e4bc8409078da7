"""No test and no notebook cell asserts a wall-clock duration or rate (DESIGN.md, Evidence).

A busy machine makes such an assert fail for no fault of the code, and a quiet one lets a
real slowdown pass. Tests assert counts (steps, tokens, blocks) and directions on simulated
clocks; speed is compared side by side in one run by the benchmarks (BENCHMARKS.md) and
judged, with its spread and a busy-machine warning, by the report card (`inferlab claims`).
A wait with a wall-clock timeout (a server up, a message in) goes through the one helper,
``waiting.wait_until``, which fails naming what it waited for.

The check (tests/clock_flow.py) reads the code: an assertion that names a wall-clock
quantity (elapsed, *_ms, tok_s, wall, ...), or holds a value followed there from a clock read
(``time``, ``timeit``, ``datetime``; any alias; through assignments, arithmetic and calls), or
tests the outcome of a hand-written deadline loop, is an offender. An assert on a number
priced by the simulated clock or the cost model says so on its line with the comment
``# simulated clock``; one that checks a fixed value fed in by the test (a decoded message,
not a measurement) says ``# fixed input``. Below, every evasion it follows is a sample.
"""
from __future__ import annotations

import pathlib

import pytest

from clock_flow import HELPER, hand_waits, timed_asserts
from waiting import wait_until

ROOT = pathlib.Path(__file__).resolve().parent.parent


def sources() -> list[pathlib.Path]:
    tests = sorted((ROOT / "tests").rglob("*.py"))
    notebooks = sorted((ROOT / "notebooks").glob("*.py"))
    return tests + notebooks


def test_no_test_or_notebook_asserts_a_wall_clock_time():
    files = sources()
    assert len(files) > 20, [str(f) for f in files]
    offenders = [o for f in files
                 for o in timed_asserts(f.read_text(encoding="utf-8"), str(f.relative_to(ROOT)))]
    assert not offenders, ("asserts on wall-clock durations or rates (assert counts or "
                           "simulated-clock directions instead; compare speed in a benchmark; "
                           f"wait with {HELPER}):\n" + "\n".join(offenders))


def flagged(source: str) -> list[int]:
    return [int(f.split(":")[1]) for f in timed_asserts(source, "bad.py")]


def test_checker_finds_timed_asserts():
    bad = '''
import time
t = time.perf_counter()
assert time.perf_counter() - t < 0.5
elapsed = 1.0
assert elapsed < 2
assert res["draw_ms"]["p90"] < 50
assert stats.tok_s > 100
assert data["runs"]["wall"]["ratio"] > 1
assert time.time() > 0
assert hook_us < 200
assert r.tokens_per_s > 1
'''
    found = timed_asserts(bad, "bad.py")
    assert [f.split(":")[1] for f in found] == ["4", "6", "7", "8", "9", "10", "11", "12"], found
    assert "clock call 'time.perf_counter()'" in found[0]
    assert "name 'elapsed'" in found[1] and "key 'draw_ms'" in found[2]


# each evasion the word-based check alone missed: (source, the lines flagged)
EVASIONS = {
    "ratio of two perf_counter differences": ('''
import time
t0 = time.perf_counter()
run()
a = time.perf_counter() - t0
t0 = time.perf_counter()
run(); run()
b = time.perf_counter() - t0
assert a / b < 2
''', [9]),
    "perf_counter under an alias": ('''
from time import perf_counter as pc, monotonic as mono
import time as t
clock = t.process_time
t0 = pc()
x = pc() - t0
assert x < 1
start = mono()
assert check(mono() - start)
c0 = clock()
d = [clock() - c0 for _ in range(3)]
assert max(d) < 1
''', [7, 9, 12]),
    "timeit": ('''
import timeit
from timeit import default_timer
import statistics
assert timeit.timeit("f()", number=10) < 1
runs = timeit.repeat("f()", number=3)
best = min(runs)
assert best < 0.1
t = default_timer(); f(); d = default_timer() - t
total = 0
total += d
assert statistics.median([total, d]) < 1
''', [5, 8, 12]),
    "unittest methods and pytest.fail": ('''
import time, unittest, pytest
import numpy as np
class T(unittest.TestCase):
    def setUp(self):
        self.t0 = time.monotonic()
    def test_fast(self):
        run()
        took = time.monotonic() - self.t0
        self.assertLess(took, 1.0)
        self.assertTrue(time.monotonic() - self.t0 < 2)
        np.testing.assert_array_less([took], [1.0])
    def test_other(self):
        self.assertLessEqual(time.monotonic() - self.t0, 3)
def test_slow():
    start = time.time(); run(); spent = time.time() - start
    if spent > 1:
        pytest.fail("too slow")
    elif spent > 0.5:
        raise AssertionError("slowish")
''', [10, 11, 12, 14, 18, 20]),
    "a helper waiting on the wall clock": ('''
import time
def wait_until(cond, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return cond()
def test_up():
    assert wait_until(lambda: server.up, 5)
def test_token():
    token, deadline = None, time.time() + 60
    while token is None and time.time() < deadline:
        token = read()
    assert token
def test_view():
    end = time.monotonic() + 10
    for _ in range(1000):
        if time.monotonic() > end:
            break
        poll()
    while time.monotonic() < end and not view.warnings:
        time.sleep(0.05)
    died = [w for w in view.warnings if "exited" in w]
    assert died
''', [11, 16, 26]),
    "datetime differences": ('''
from datetime import datetime
import datetime as dt
start = datetime.now()
run()
took = (datetime.now() - start).total_seconds()
assert took < 1
begin = dt.datetime.utcnow()
assert dt.datetime.utcnow() - begin < limit
''', [7, 9]),
    "a function returning a timed value": ('''
import time
def measure(f):
    t = time.perf_counter(); f()
    return time.perf_counter() - t
def test_it():
    runs = []
    for _ in range(3):
        runs.append(measure(step))
    best, worst = min(runs), max(runs)
    assert worst / best < 3
    assert measure(step) < 1
''', [11, 12]),
}


@pytest.mark.parametrize("name", EVASIONS)
def test_checker_follows_clock_values(name):
    source, lines = EVASIONS[name]
    assert flagged(source) == lines, timed_asserts(source, "bad.py")


def test_checker_lets_counts_simulated_clocks_and_the_wait_helper_pass():
    good = '''
import time
from waiting import wait_until
assert steps["continuous"] < steps["static"], steps
assert out.token_ids == ref
assert stats.kv_blocks_used == 0
assert clock.name == "wall"
assert isinstance(make_clock("wall"), WallClock)
assert data["input_check_s"] > 0 and m.ttft > 0
assert one["step_ms"] / many["step_ms"] < many["tp"]   # simulated clock
assert (many["comm_ms"]   # simulated clock
        > 0)
t = time.perf_counter(); run()
print(f"{time.perf_counter() - t:.1f} s")
durations = [time.perf_counter() - t]
assert len(durations) == 1
out, end = [], time.monotonic() + 5
assert out == []
time.sleep(0.1)
if m.ttft > 1:
    pytest.fail("simulated")
def test_server(self):
    t = 3
    assert t == 3
    wait_until(lambda: srv.up, 30, what="the server up")
    assert srv.status == 200
    assert wait_until(lambda: len(q) == 2, 5) == 1
    self.assertEqual(self.tokens, [1, 2])
def wait(msg_id, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        msg = get()
        if msg:
            return msg
    raise TimeoutError(msg_id)
assert wait("a", 5)["status"] == "ok"
'''
    assert timed_asserts(good, "good.py") == []


def test_the_wait_helper_returns_the_value_or_names_what_it_waited_for():
    seen = []
    assert wait_until(lambda: seen.append(1) or len(seen) == 3 and "ok", 5, interval=0) == "ok"
    with pytest.raises(TimeoutError, match="the third token"):
        wait_until(lambda: False, 0, what="the third token")
    with pytest.raises(TimeoutError, match="lambda: False"):
        wait_until(lambda: False, 0)


def test_every_wait_goes_through_the_helper():
    """A hand-written wait (a loop sleeping between tries, a deadline from a clock read) in a
    test, a notebook, or a script a test runs: waiting.wait_until instead. This file's own
    samples and the helper itself are the exceptions."""
    skip = {"waiting.py", "test_no_timed_asserts.py"}
    offenders = [o for f in sources() if f.name not in skip
                 for o in hand_waits(f.read_text(encoding="utf-8"), str(f.relative_to(ROOT)))]
    assert not offenders, f"waits written by hand (use {HELPER}):\n" + "\n".join(offenders)


def test_checker_finds_hand_written_waits():
    bad = '''
import time
for _ in range(50):
    if ready():
        break
    time.sleep(0.1)
end = time.monotonic() + 10
async def f():
    while not done():
        await asyncio.sleep(0.01)
def g(page):
    for _ in range(240):
        page.wait_for_timeout(250)
for d in stream():   # not a wait
    time.sleep(0.005)
SCRIPT = """
import time
end = time.time() + 10
while time.time() < end:
    pass
"""
'''
    found = hand_waits(bad, "bad.py")
    assert [f.split(":")[1].split(" ")[0] for f in found] == ["3", "7", "9", "12", "16"], found
    assert "(in a script)" in found[-1] and "deadline" in found[-1]
