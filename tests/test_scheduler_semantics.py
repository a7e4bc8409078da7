"""Scheduler semantics that users of vLLM expect, with exact assertions: the token budget,
check-before-change, no preemption churn, min_tokens, the per-request prefill cap, and
priority scheduling (admission order, who is preempted, displacement)."""
from __future__ import annotations

import pytest

import inferlab as il
from inferlab.core.config import EngineConfig
from inferlab.core.kv_manager import PagedKVManager
from inferlab.core.params import SamplingParams
from inferlab.core.request import Request, RequestStatus
from inferlab.core.scheduler import Scheduler
from inferlab.core.textstream import TextState
from inferlab.errors import CapacityError, InvalidInputError, InvalidTypeError


def make(num_blocks=16, block_size=4, max_model_len=64, **kw) -> Scheduler:
    cfg = EngineConfig(block_size=block_size, num_blocks=num_blocks, **kw)
    return Scheduler(cfg, PagedKVManager(num_blocks, block_size, cfg.enable_prefix_caching),
                     max_model_len=max_model_len)


def req(rid, n, max_tokens=4, start=100, **kw) -> Request:
    params = kw.pop("params", None) or SamplingParams(max_tokens=max_tokens)
    return Request(rid, list(range(start, start + n)), params, **kw)


def step(s: Scheduler, token=7):
    """One step with a fake model that samples ``token``: (chunks, admitted/preempted)."""
    out = s.schedule()
    assert out.num_batched_tokens == sum(c.num_tokens for c in out.chunks) <= s.token_budget
    ev = [(e.request_id, e.kind) for e in s.drain_events() if e.kind in ("preempted", "admitted")]
    s.update(out, {c.request_id: token for c in out.chunks if c.samples})
    return [(c.request_id, c.num_tokens) for c in out.chunks], ev


def run(s: Scheduler, token=7, limit=200):
    log = []
    while s.has_unfinished() and len(log) < limit:
        log.append(step(s, token))
    assert not s.has_unfinished()
    return log


# --- 1. the token budget is a budget -------------------------------------------------------
def test_chunking_off_respects_the_budget_every_step():
    eng = il.Engine("tiny", enable_chunked_prefill=False, max_num_batched_tokens=16,
                    max_model_len=16, block_size=4, num_blocks=64)
    recs = []
    eng.subscribe(recs.append)
    prompts = [list(range(10 + 20 * i, 22 + 20 * i)) for i in range(3)]     # 12 tokens each
    eng.generate(prompts, il.SamplingParams(max_tokens=3, ignore_eos=True), use_tqdm=False)
    # a whole prompt per step, never two that overflow 16: 12 | 1+12 | 1+1+12 | 1+1 | 1
    assert [r.num_batched_tokens for r in recs] == [12, 13, 14, 2, 1]
    assert all(r.token_budget == 16 for r in recs)


def test_chunking_off_with_a_budget_below_max_model_len_is_refused_naming_both():
    with pytest.raises(InvalidInputError, match=r"max_num_batched_tokens \(16\).*max_model_len "
                                                r"\(64\)"):
        EngineConfig(enable_chunked_prefill=False, max_num_batched_tokens=16, max_model_len=64)
    with pytest.raises(InvalidInputError, match=r"\(16\).*\(2048\)"):     # resolved from the model
        il.Engine("tiny", enable_chunked_prefill=False, max_num_batched_tokens=16)
    EngineConfig(enable_chunked_prefill=True, max_num_batched_tokens=16, max_model_len=64)


def test_a_prompt_longer_than_the_budget_is_refused_when_chunking_is_off():
    s = make(enable_chunked_prefill=False, max_num_batched_tokens=8, max_model_len=8)
    s.check_fits_budget(8)
    with pytest.raises(CapacityError, match=r"9 tokens.*max_num_batched_tokens is 8"):
        s.check_fits_budget(9)
    make(max_num_batched_tokens=8, max_model_len=64).check_fits_budget(60)    # chunks instead


def test_lab_shows_an_invalid_budget_in_its_status():
    from inferlab.widgets import Lab
    lab = Lab("tiny", enable_chunked_prefill=False, max_num_batched_tokens=256, num_requests=1)
    lab._run()                       # in this thread: the engine refuses the pair
    assert lab.status.value.startswith("error: InvalidInputError")
    assert "(256)" in lab.status.value and "(2048)" in lab.status.value
    assert EngineConfig(**Lab().config())                 # the Lab's defaults are valid


# --- 2. check before you change ----------------------------------------------------------
def test_finish_refuses_an_illegal_transition_and_changes_nothing():
    s = make()
    r = req("a", 4)
    s.add(r)
    s.drain_events()
    with pytest.raises(RuntimeError, match="WAITING -> FINISHED_STOPPED"):
        s.finish(r, RequestStatus.FINISHED_STOPPED)
    assert r.status is RequestStatus.WAITING and list(s.waiting) == [r]
    assert s.requests == {"a": r} and s.drain_events() == []
    s.finish(r, RequestStatus.FINISHED_ABORTED)           # the legal way out still works
    assert not s.has_unfinished() and not s.requests


def test_finish_of_a_preempted_request_as_length_is_refused_in_place():
    s = make(num_blocks=3, block_size=4, max_num_batched_tokens=4)
    a, b = req("a", 5, max_tokens=3, start=10), req("b", 8, max_tokens=1, start=110)
    s.add(a), s.add(b)
    step(s), step(s), step(s)
    assert b.status is RequestStatus.PREEMPTED and list(s.waiting) == [b]
    with pytest.raises(RuntimeError):
        s.finish(b, RequestStatus.FINISHED_LENGTH)
    assert list(s.waiting) == [b] and b.status is RequestStatus.PREEMPTED
    run(s)


# --- 3. no preemption churn -------------------------------------------------------------
def test_a_preempted_request_is_not_readmitted_in_the_same_step():
    # a (5 tokens) and b (8) share 3 blocks of 4 with a budget of 4. At step 2 b's chunk
    # needs a block: b (the newest) yields. Before, it was readmitted at once, recomputing
    # its 3 tokens, and yielded again the next step.
    s = make(num_blocks=3, block_size=4, max_num_batched_tokens=4)
    s.add(req("a", 5, max_tokens=3, start=10))
    s.add(req("b", 8, max_tokens=1, start=110))
    log = run(s)
    assert log == [
        ([("a", 4)], [("a", "admitted")]),
        ([("a", 1), ("b", 3)], [("b", "admitted")]),
        ([("a", 1)], [("b", "preempted")]),               # nobody joins this step
        ([("a", 1), ("b", 3)], [("b", "admitted")]),
        ([("b", 4)], []),
        ([("b", 1)], []),
    ]
    assert (s.num_preemptions, s.num_recomputed_tokens, s.max_request_preemptions) == (1, 3, 1)


def test_engine_stats_report_recomputation():
    eng = il.Engine("tiny", num_blocks=3, block_size=4, max_num_batched_tokens=4,
                    max_model_len=32)
    a = eng.add_request(list(range(10, 15)), il.SamplingParams(max_tokens=3, ignore_eos=True))
    b = eng.add_request(list(range(110, 118)), il.SamplingParams(max_tokens=1, ignore_eos=True))
    outs = {}
    while eng.has_unfinished_requests():
        outs.update({o.request_id: o for o in eng.step() if o.finished})
    st = eng.stats()
    assert (st.num_preemptions, st.num_recomputed_tokens,
            st.max_preemptions_per_request) == (1, 3, 1)
    assert st.to_dict()["num_recomputed_tokens"] == 3
    assert outs[b].metrics.num_preemptions == 1 and outs[a].metrics.num_preemptions == 0


# --- 4a. min_tokens ---------------------------------------------------------------------
def test_min_tokens_validation():
    SamplingParams(max_tokens=4, min_tokens=4)
    for bad in (-1, 5):
        with pytest.raises(InvalidInputError, match="min_tokens"):
            SamplingParams(max_tokens=4, min_tokens=bad)
    for bad in (True, 1.0, "2"):
        with pytest.raises(InvalidTypeError, match="min_tokens"):
            SamplingParams(max_tokens=4, min_tokens=bad)


@pytest.mark.parametrize("min_tokens, n_out", [(0, 1), (1, 1), (3, 3)])
def test_stop_token_ignored_until_min_tokens(min_tokens, n_out):
    s = make()
    sp = SamplingParams(max_tokens=8, stop_token_ids=[7], min_tokens=min_tokens)
    r = req("a", 3, params=sp)
    s.add(r)
    run(s, token=7)
    assert len(r.output_token_ids) == n_out and r.finish_reason == "stop" and r.stop_reason == 7


def test_eos_ignored_until_min_tokens_and_banned_from_sampling():
    sp = SamplingParams(max_tokens=8, stop_token_ids=[5], min_tokens=2)
    r = Request("a", [1, 2, 3], sp, eos_token_id=2)
    assert sorted(r.banned_token_ids()) == [2, 5]
    r.output_token_ids = [9]
    assert sorted(r.banned_token_ids()) == [2, 5]
    r.output_token_ids = [9, 9]
    assert r.banned_token_ids() == []
    ignored = Request("b", [1], SamplingParams(max_tokens=4, min_tokens=2, ignore_eos=True),
                      eos_token_id=2)
    assert ignored.banned_token_ids() == [2]       # vLLM masks EOS under ignore_eos too
    ignored.output_token_ids = [9, 9]
    assert ignored.banned_token_ids() == []
    s = make()
    r = Request("c", [1, 2, 3], SamplingParams(max_tokens=8, min_tokens=2), eos_token_id=7)
    s.add(r)
    run(s, token=7)
    assert r.output_token_ids == [7, 7] and r.finish_reason == "stop"


def test_min_tokens_masks_stop_tokens_in_the_sampler():
    eng = il.Engine("tiny", num_blocks=32, block_size=4, max_model_len=64)
    prompt = [5, 6, 7, 8, 9]
    free = eng.generate([prompt], il.SamplingParams(max_tokens=6, ignore_eos=True),
                        use_tqdm=False)[0].token_ids
    stop = free[0]
    early = eng.generate([prompt], il.SamplingParams(max_tokens=6, stop_token_ids=[stop]),
                         use_tqdm=False)[0]
    assert early.token_ids == [stop] and early.finish_reason == "stop"
    held = eng.generate([prompt], il.SamplingParams(max_tokens=6, stop_token_ids=[stop],
                                                     min_tokens=3), use_tqdm=False)[0]
    assert len(held.token_ids) >= 3 and stop not in held.token_ids[:3]


class _CharTok:
    """A tokenizer whose token i is the character chr(i)."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join(map(chr, ids))


def test_stop_strings_count_only_after_min_tokens():
    ts = TextState(_CharTok(), ["ab"])
    ids = [ord(c) for c in "xabyab"]
    got = [ts.push(ids[:k], check_stop=k > 3) for k in range(1, 7)]
    # "ab" at 1..2 falls in the first 3 tokens: not a stop; the second "ab" (4..5) is
    assert [hit for _, hit in got] == [False, False, False, False, False, True]
    assert ts.text == "xaby"


# --- 4b. long_prefill_token_threshold ----------------------------------------------------
def test_long_prefill_threshold_caps_each_prompt_per_step():
    s = make(max_num_batched_tokens=64, long_prefill_token_threshold=8)
    s.add(req("long", 20, max_tokens=2, start=10))
    s.add(req("short", 4, max_tokens=3, start=200))
    assert run(s) == [
        ([("long", 8), ("short", 4)], [("long", "admitted"), ("short", "admitted")]),
        ([("long", 8), ("short", 1)], []),
        ([("long", 4), ("short", 1)], []),
        ([("long", 1)], []),
    ]


def test_long_prefill_threshold_validation():
    assert EngineConfig(long_prefill_token_threshold=None).long_prefill_token_threshold == 0
    with pytest.raises(InvalidInputError, match="long_prefill_token_threshold"):
        EngineConfig(long_prefill_token_threshold=-1)
    with pytest.raises(InvalidTypeError, match="long_prefill_token_threshold"):
        EngineConfig(long_prefill_token_threshold=2.5)
    with pytest.raises(InvalidInputError, match="needs enable_chunked_prefill=True"):
        EngineConfig(long_prefill_token_threshold=8, enable_chunked_prefill=False,
                     max_num_batched_tokens=2048)


# --- 4c. priority scheduling -------------------------------------------------------------
def test_priority_policy_validation():
    with pytest.raises(InvalidInputError, match="scheduling_policy"):
        EngineConfig(scheduling_policy="lifo")
    with pytest.raises(InvalidInputError, match="continuous"):
        EngineConfig(scheduling_policy="priority", scheduler="static")
    eng = il.Engine("tiny", num_blocks=16, block_size=4, max_model_len=32)
    with pytest.raises(InvalidInputError, match="scheduling_policy='priority'"):
        eng.add_request([5, 6], priority=1)
    eng.add_request([5, 6], priority=0)                  # 0 is fine under fcfs
    with pytest.raises(InvalidTypeError, match="priority"):
        eng.add_request([5, 6], priority=1.5)
    with pytest.raises(InvalidInputError, match="2 priorities for 1 prompts"):
        eng.generate([[5, 6]], priority=[0, 0], use_tqdm=False)
    eng.abort_all()


def test_priority_admission_order_then_arrival():
    s = make(max_num_seqs=1, scheduling_policy="priority")
    for i, (p, t) in enumerate(zip([2, 1, 1, 0], [1.0, 3.0, 2.0, 4.0])):
        s.add(req(str(i), 3, max_tokens=1, start=10 * i + 10, priority=p, arrival_time=t))
    assert [chunks[0][0] for chunks, _ in run(s)] == ["3", "2", "1", "0"]


def _lo_then_hi(policy):
    """lo (7 tokens) runs; hi (8 tokens) joins a step later; 4 blocks of 4 are then full."""
    s = make(num_blocks=4, block_size=4, scheduling_policy=policy, enable_prefix_caching=False)
    prio = 5 if policy == "priority" else 0
    s.add(req("lo", 7, max_tokens=3, start=10, priority=prio, arrival_time=1.0))
    first = step(s)
    s.add(req("hi", 8, max_tokens=3, start=110, arrival_time=2.0))
    return s, [first] + run(s)


def test_fcfs_preempts_the_newest_and_priority_the_lowest():
    s, log = _lo_then_hi("fcfs")
    assert log[2] == ([("lo", 1)], [("hi", "preempted")])            # the newest yields
    s, log = _lo_then_hi("priority")
    assert log == [
        ([("lo", 7)], [("lo", "admitted")]),
        ([("lo", 1), ("hi", 8)], [("hi", "admitted")]),
        ([("hi", 1)], [("lo", "preempted")]),      # lo yields itself; hi still runs
        ([("hi", 1)], []),
        ([("lo", 9)], [("lo", "admitted")]),       # recomputes its 8 tokens, samples its 3rd
    ]
    assert (s.num_preemptions, s.num_recomputed_tokens) == (1, 8)


def test_higher_priority_arrival_displaces_a_running_request():
    s = make(num_blocks=4, block_size=4, scheduling_policy="priority")
    s.add(req("lo", 12, max_tokens=3, start=10, priority=5, arrival_time=1.0))
    step(s)
    s.add(req("hi", 8, max_tokens=2, start=110, priority=0, arrival_time=2.0))
    # the cache has 1 free block, hi needs 2: lo (its decode already scheduled) yields,
    # hi gets in, and lo does not come back in the same step
    assert run(s) == [
        ([("hi", 8)], [("lo", "preempted"), ("hi", "admitted")]),
        ([("hi", 1)], []),
        ([("lo", 9)], [("lo", "admitted")]),     # 4 tokens from the prefix cache
        ([("lo", 1)], []),
    ]
    # the same under fcfs: hi waits for lo
    s = make(num_blocks=4, block_size=4)
    s.add(req("lo", 12, max_tokens=3, start=10))
    step(s)
    s.add(req("hi", 8, max_tokens=2, start=110))
    assert [ev for _, ev in run(s)] == [[], [], [("hi", "admitted")], []]


def test_priority_reaches_the_step_record_the_trace_and_the_timeline(tmp_path):
    from inferlab.observe.trace import Trace
    from inferlab.widgets import SchedulerTimeline
    eng = il.Engine("tiny", num_blocks=32, block_size=4, max_model_len=32,
                    scheduling_policy="priority")
    tr = Trace.record(eng)
    tl = SchedulerTimeline(eng, trace=tr)
    outs = eng.generate([[5, 6, 7], [8, 9, 10]], il.SamplingParams(max_tokens=2, ignore_eos=True),
                        use_tqdm=False, priority=[2, 0])
    tl.detach()
    tr.stop()
    queued = {e.request_id: e.info.priority for r in tr.records for e in r.request_events
              if e.kind == "queued"}
    assert queued == {outs[0].request_id: 2, outs[1].request_id: 0}
    assert tr.requests[outs[0].request_id]["priority"] == 2
    assert "priority" not in tr.requests[outs[1].request_id]       # 0 is not written
    p = tmp_path / "t.json"
    tr.save(p)
    back = Trace.load(p)
    assert back.requests == tr.requests
    assert tl.priorities() == {outs[0].request_id: 2,
                                                     outs[1].request_id: 0}
