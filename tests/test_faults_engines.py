"""Engines and views sharing one kernel (issue 15), in process (a kernel is one process).

Two Labs running at once in background threads, and two engines with their own views in one
thread, never show each other's steps; stopping one Lab leaves the other running. A closed
view (``close()``, or its comm closed by the front end) unsubscribes from its engine and its
flusher thread ends. A SIGINT that arrives inside a step lands as the step returns.
"""
import signal
import threading

import numpy as np
import pytest

import inferlab as il
from inferlab.observe.trace import Trace
from inferlab.widgets import KVBlockMap, Lab, SchedulerTimeline, TokenStream
from inferlab.widgets._base import wait_until

SP = il.SamplingParams(max_tokens=6, ignore_eos=True)


def flushers():
    return [t for t in threading.enumerate() if t.name.endswith("-flusher") and t.is_alive()]


def same_as_replay(view):
    """A view shows exactly its own trace: its state equals a replay of that trace."""
    again = type(view)(view.trace)
    if isinstance(view, KVBlockMap):        # owner indices are in order of first sight
        cells = [[(c["owner"], c["fill"], c["ref"], c["flags"]) for c in v.cells()]
                 for v in (view, again)]
        return cells[0] == cells[1] and view.summary == again.summary
    names = [n for n in view.trait_names(sync=True) if not n.startswith("_")
             and n not in ("title", "live", "cursor", "layout", "tabbable", "tooltip", "plot",
                           "plot_seq")]           # plot_seq counts redraws, not state
    drawn = [v._spec(dark=False)["data"] for v in (view, again)]    # the plot: its marks
    return drawn[0] == drawn[1] and all(getattr(view, n) == getattr(again, n) for n in names)


def test_two_labs_in_one_kernel_do_not_cross_talk():
    a = Lab("tiny", workload_kind="random tokens: synthetic", num_requests=30, rate=0.0, num_blocks=64, block_size=4, max_num_seqs=2)
    b = Lab("tiny", workload_kind="random tokens: synthetic", num_requests=200, rate=0.0, num_blocks=256, block_size=8, max_num_seqs=1)
    b.start()
    a.start()
    try:
        assert wait_until(lambda: all(lab.trace is not None and len(lab.trace) >= 3
                                      for lab in (a, b)) or not (a.running and b.running),
                          timeout=300)
        assert a.running and b.running, (a.status.value, b.status.value)
        a.stop()                               # ending one ...
        a.thread.join(120)
        assert not a.running and a.status.value.startswith("stopped"), a.status.value
        assert b.running                       # ... leaves the other running
        n = len(b.trace)
        assert wait_until(lambda: len(b.trace) > n + 10, timeout=120)
        assert b.running and b.timeline.live
    finally:
        for lab in (a, b):
            lab.stop()
            lab.thread.join(120)
    s = a.engine.stats()
    assert (s.kv_blocks_used, s.num_running, s.num_waiting) == (0, 0, 0)
    for lab, blocks in ((a, 64), (b, 256)):
        recs = lab.trace.records
        assert {r.kv_blocks_total for r in recs} == {blocks}
        assert lab.kv_map.summary["blocks_total"] == blocks
        assert all(v.trace is lab.trace and v.num_steps == len(recs) for v in lab.views)
        assert set(lab.timeline.lanes) <= set(lab.trace.requests)
        for v in lab.views:
            assert same_as_replay(v), (lab, v)


def test_two_engines_with_their_own_views_in_one_thread():
    e1 = il.Engine("tiny", num_blocks=32, block_size=4)
    e2 = il.Engine("tiny", num_blocks=48, block_size=8)
    v1 = [SchedulerTimeline(e1), KVBlockMap(e1), TokenStream(e1)]
    v2 = [SchedulerTimeline(e2), KVBlockMap(e2), TokenStream(e2)]
    e1.generate(["only the first engine"], SP, use_tqdm=False)
    for v in v1 + v2:
        v.flush()
    assert all(v.num_steps > 0 for v in v1) and all(v.num_steps == 0 for v in v2)
    n1 = [v.num_steps for v in v1]
    e2.generate(["now the second", "and more"], SP, use_tqdm=False)
    for v in v1 + v2:
        v.detach()
    assert [v.num_steps for v in v1] == n1 and all(v.num_steps > 0 for v in v2)
    assert v1[1].summary["blocks_total"] == 32 and v2[1].summary["blocks_total"] == 48
    assert len(v1[2].requests) == 1 and len(v2[2].requests) == 2
    assert all(same_as_replay(v) for v in v1 + v2)


def test_a_closed_view_costs_the_engine_nothing():
    eng = il.Engine("tiny", num_blocks=32, block_size=4)
    before = set(flushers())
    view = SchedulerTimeline(eng)
    assert len(eng.bus) == 2                   # its trace and its wake-up hook
    eng.generate(["a b c"], SP, use_tqdm=False)
    assert wait_until(lambda: view.num_steps == len(view.trace) > 0)
    view.close()
    assert len(eng.bus) == 0 and set(flushers()) <= before
    n = (len(view.trace), view.num_steps)
    eng.generate(["d e f"], SP, use_tqdm=False)
    assert (len(view.trace), view.num_steps) == n
    # the front end closing the comm (the notebook cell deleted, the view closed in JS)
    other = TokenStream(eng)
    eng.generate(["g h"], SP, use_tqdm=False)
    assert len(eng.bus) == 2
    other.comm.handle_close({"content": {"comm_id": other.comm.comm_id, "data": {}}})
    assert len(eng.bus) == 0 and not other.live
    assert wait_until(lambda: set(flushers()) <= before, timeout=5)


def test_a_view_given_a_trace_leaves_it_recording():
    eng = il.Engine("tiny", num_blocks=32, block_size=4)
    trace = Trace.record(eng)
    view = SchedulerTimeline().attach(eng, trace=trace)
    view.close()
    assert len(eng.bus) == 1                   # the user's trace goes on
    eng.generate(["x"], SP, use_tqdm=False)
    assert len(trace) > 0 and view.num_steps == 0
    trace.stop()


@pytest.fixture
def python_sigint():
    """Python's own SIGINT handler for the test, whatever an earlier test left installed (a
    process that ignores SIGINT rightly has the held one ignored too), restored after."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_a_sigint_inside_a_step_lands_as_the_step_returns(python_sigint):
    """Without this, Ctrl-C could stop a step halfway (a hook raising KeyboardInterrupt
    mid-publish, blocks half freed). The hook runs to its end; the interrupt comes after."""
    eng = il.Engine("tiny", num_blocks=32, block_size=4)
    done = []

    def hook(rec):
        if rec.step == 2 and not done:
            signal.raise_signal(signal.SIGINT)       # arrives now, inside the step
            done.append(rec.step)                    # and the hook still runs to here
    eng.subscribe(hook)
    view = SchedulerTimeline(eng)
    with pytest.raises(KeyboardInterrupt):
        eng.generate(["interrupted", "me too"], il.SamplingParams(max_tokens=30), use_tqdm=False)
    assert done == [2] and eng.bus.errors == [] and len(eng.bus) == 3
    s = eng.stats()
    assert (s.kv_blocks_used, s.num_running, s.num_waiting) == (0, 0, 0)
    view.flush()                                     # the view shows where it stopped
    assert all(k != "finished" for _, k in view.finishes().values()) and len(view.lanes) == 2
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    ref = il.Engine("tiny", num_blocks=32, block_size=4).generate(["again"], SP, use_tqdm=False)
    assert eng.generate(["again"], SP, use_tqdm=False)[0].token_ids == ref[0].token_ids
    view.close()
