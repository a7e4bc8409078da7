"""Engine core with exact assertions: block ids, free-queue order, ref counts, no leaks."""
import pytest

from inferlab.core.block_pool import BlockPool
from inferlab.core.config import EngineConfig
from inferlab.errors import InvalidInputError
from inferlab.core.kv_manager import ContiguousKVManager, PagedKVManager
from inferlab.core.params import SamplingParams
from inferlab.core.request import Request, RequestStatus
from inferlab.core.scheduler import Scheduler


def req(rid, n_prompt, max_tokens=4, start=100):
    return Request(rid, list(range(start, start + n_prompt)), SamplingParams(max_tokens=max_tokens))


def test_block_pool_free_queue_order_and_ref_counts():
    pool = BlockPool(6, enable_caching=False)
    assert pool.allocate(2) == [0, 1]
    assert pool.allocate(3) == [2, 3, 4]
    assert list(pool.free_queue) == [5]
    pool.free([4, 3, 2])                       # freed tail first
    assert list(pool.free_queue) == [5, 4, 3, 2]
    assert pool.allocate(2) == [5, 4]
    pool.touch([0])
    assert pool.ref_cnt[:2] == [2, 1]
    pool.free([0, 1])
    assert pool.ref_cnt[:2] == [1, 0] and list(pool.free_queue) == [3, 2, 1]
    with pytest.raises(RuntimeError):
        pool.free([1])                         # already at zero
    with pytest.raises(RuntimeError):
        pool.allocate(4)


def test_paged_allocation_grows_block_by_block_and_frees_everything():
    kv = PagedKVManager(8, block_size=4, enable_prefix_caching=False)
    r = req("a", 6)
    assert kv.allocate_slots(r, 6)
    assert kv.block_table("a") == [0, 1]
    r.num_computed_tokens = 6
    kv.commit(r)
    assert kv.allocate_slots(r, 1) and kv.block_table("a") == [0, 1]   # 7th token fits block 1
    r.num_computed_tokens = 7
    r.output_token_ids = [1, 2]                                         # 8 tokens
    assert kv.allocate_slots(r, 1) and kv.block_table("a") == [0, 1]
    r.num_computed_tokens = 8
    assert kv.allocate_slots(r, 1) and kv.block_table("a") == [0, 1, 2]  # 9th token: new block
    assert kv.usage().blocks_used == 3
    kv.free(r)
    assert kv.pool.num_free == 8 and kv.pool.ref_cnt == [0] * 8
    assert list(kv.pool.free_queue)[-3:] == [2, 1, 0]


def test_paged_allocation_refuses_without_changing_state():
    kv = PagedKVManager(3, block_size=4, enable_prefix_caching=False)
    a, b = req("a", 8), req("b", 8)
    assert kv.allocate_slots(a, 8)
    assert not kv.allocate_slots(b, 8)
    assert kv.block_table("b") == [] and kv.pool.num_free == 1


def test_prefix_cache_shares_blocks_and_evicts_lru():
    kv = PagedKVManager(6, block_size=4, enable_prefix_caching=True)
    a = req("a", 10)
    kv.allocate_slots(a, 10)                       # blocks 0, 1 will be full -> indexed now
    assert kv.cached_block_ids() == {0, 1}
    a.num_computed_tokens = 10
    kv.commit(a)
    b = req("b", 9)                                # same first 8 tokens
    hits = kv.get_computed_blocks(b)
    assert hits == [0, 1]
    assert kv.allocate_slots(b, 1, hits)
    assert kv.block_table("b") == [0, 1, 3] and kv.pool.ref_cnt[:4] == [2, 2, 1, 1]
    kv.free(a)
    kv.free(b)
    assert kv.pool.ref_cnt == [0] * 6
    # free queue: never-used 4, 5; a frees tail first but only 2 reaches zero (0, 1 are
    # shared); then b's blocks tail first: 3, 1, 0. The shared prefix is evicted last.
    assert list(kv.pool.free_queue) == [4, 5, 2, 3, 1, 0]
    c = req("c", 9)
    assert kv.get_computed_blocks(c) == [0, 1]     # still cached after both finished
    d = req("d", 20, start=500)                    # 5 blocks: evicts from the head
    assert kv.allocate_slots(d, 18)                # 4 of them full after this step
    assert kv.block_table("d") == [4, 5, 2, 3, 1]
    # block 1 evicted (d's partial last block now), block 0 survives; d's full ones indexed
    assert kv.cached_block_ids() == {0, 4, 5, 2, 3}
    assert kv.get_computed_blocks(req("e", 9)) == [0]
    ev = [e.kind for e in kv.drain_events()]
    assert "evicted" in ev and "shared" in ev and "cached" in ev


def test_blocks_indexed_at_allocation_are_shared_in_the_same_step():
    """vLLM's allocate_slots indexes the blocks that will be full after the step, so a
    request admitted in the same step finds them (their K/V is written by that step)."""
    kv = PagedKVManager(8, block_size=4, enable_prefix_caching=True)
    a, b = req("a", 10), req("b", 10)              # the same 10 tokens
    assert kv.allocate_slots(a, 10)                # nothing computed yet
    hits = kv.get_computed_blocks(b)
    assert hits == [0, 1]
    assert kv.allocate_slots(b, 2, hits)
    assert kv.block_table("b") == [0, 1, 3] and kv.pool.ref_cnt[:4] == [2, 2, 1, 1]
    assert kv.shares_unwritten(a) and not kv.shares_unwritten(b)
    a.num_computed_tokens = 10
    kv.commit(a)
    assert not kv.shares_unwritten(a)              # written: a may be preempted again


def test_blocks_freed_before_their_step_ran_leave_the_index():
    kv = PagedKVManager(8, block_size=4, enable_prefix_caching=True)
    a = req("a", 10)
    assert kv.allocate_slots(a, 6)                 # a chunk: block 0 full after the step
    a.num_computed_tokens = 6
    kv.commit(a)
    assert kv.allocate_slots(a, 4)                 # next chunk indexes block 1 ahead
    assert kv.cached_block_ids() == {0, 1}
    kv.free(a, keep_hashes=True)                   # preempted before that step ran
    assert kv.cached_block_ids() == {0}            # block 1 never got its K/V
    assert kv.get_computed_blocks(req("b", 10)) == [0]
    assert kv.pool.ref_cnt == [0] * 8
    assert set(kv.pool.free_uncached) >= {1, 2} and list(kv.pool.free_cached) == [0]


def test_prefix_hit_never_covers_the_last_token():
    kv = PagedKVManager(6, block_size=4, enable_prefix_caching=True)
    a = req("a", 8)
    kv.allocate_slots(a, 8)
    a.num_computed_tokens = 8
    kv.commit(a)
    same = req("b", 8)                             # identical prompt: only 1 block may hit
    assert kv.get_computed_blocks(same) == [0]


def test_contiguous_first_fit_and_fragmentation():
    kv = ContiguousKVManager(10, block_size=2, max_model_len=16, reserve="request")
    a, b, c = req("a", 2, 2), req("b", 4, 2), req("c", 2, 2)    # 2, 3, 2 blocks
    assert kv.allocate_slots(a, 2) and kv.block_table("a") == [0, 1]
    assert kv.allocate_slots(b, 4) and kv.block_table("b") == [2, 3, 4]
    assert kv.allocate_slots(c, 2) and kv.block_table("c") == [5, 6]
    kv.free(a)
    kv.free(c)                                     # holes: [0,1], [5..9] -> 2 and 5 blocks
    d = req("d", 6, 2)                             # needs 4 blocks: only the tail hole fits
    assert kv.allocate_slots(d, 6) and kv.block_table("d") == [5, 6, 7, 8]
    e = req("e", 4, 2)                  # 3 blocks; 3 are free ([0, 1] and [9]) but not together
    assert not kv.allocate_slots(e, 4) and kv.block_table("e") == []
    d.num_computed_tokens = 6
    kv.commit(d)
    u = kv.usage()
    assert (u.blocks_used, u.slots_allocated, u.tokens_used) == (7, 14, 6)


def make_scheduler(policy="continuous", num_blocks=16, block_size=4, **kw):
    cfg = EngineConfig(scheduler=policy, block_size=block_size, num_blocks=num_blocks, **kw)
    kv = PagedKVManager(num_blocks, block_size, cfg.enable_prefix_caching)
    return Scheduler(cfg, kv, max_model_len=64)


def run_fake(s, steps=100, token=7):
    """Drive a scheduler with a fake model that always samples ``token``."""
    log = []
    for _ in range(steps):
        out = s.schedule()
        if out.is_empty:
            break
        log.append([(c.request_id, c.num_tokens, c.kind) for c in out.chunks])
        s.update(out, {c.request_id: token for c in out.chunks if c.samples})
    return log


def test_continuous_joins_as_soon_as_it_fits_and_chunks_prompts():
    s = make_scheduler(max_num_batched_tokens=8, max_num_seqs=4)
    s.add(req("a", 5, max_tokens=3))
    s.add(req("b", 10, max_tokens=2, start=300))                    # no prefix in common
    log = run_fake(s)
    assert log[0] == [("a", 5, "prefill"), ("b", 3, "prefill")]    # b's prompt is chunked
    assert log[1] == [("a", 1, "decode"), ("b", 7, "prefill")]
    assert log[2] == [("a", 1, "decode"), ("b", 1, "decode")]
    assert len(log) == 3                                            # both finished
    assert s.kv.pool.num_free == 16


def test_requests_admitted_together_compute_their_common_prefix_once():
    s = make_scheduler(max_num_batched_tokens=64, max_num_seqs=4)
    for rid in "abc":
        s.add(req(rid, 10, max_tokens=2))                           # the same 10 tokens
    out = s.schedule()
    assert [(c.request_id, c.start, c.num_tokens, c.num_cached) for c in out.chunks] == \
        [("a", 0, 10, 0), ("b", 8, 2, 8), ("c", 8, 2, 8)]          # a fills blocks 0, 1
    assert out.block_tables == {"a": [0, 1, 2], "b": [0, 1, 3], "c": [0, 1, 4]}
    assert s.prefix_cache_hits == 16 and out.num_batched_tokens == 14
    s_off = Scheduler(EngineConfig(block_size=4, num_blocks=16, max_num_batched_tokens=64,
                                   enable_prefix_caching=False),
                      PagedKVManager(16, 4, False), max_model_len=64)
    for rid in "abc":
        s_off.add(req(rid, 10, max_tokens=2))
    assert s_off.schedule().num_batched_tokens == 30                # the effect, removed


def _prio(rid, n, prio, start=100):
    r = req(rid, n, max_tokens=4, start=start)
    r.priority = prio
    return r


def _step(s):
    out = s.schedule()
    s.update(out, {c.request_id: 7 for c in out.chunks if c.samples})
    return [(c.request_id, c.start, c.num_tokens) for c in out.chunks]


def test_priority_keeps_a_request_whose_fresh_blocks_another_shares():
    """r fills block 2 in this step; w, admitted in the same step, shares it; x may displace
    r by priority but must not: w's tokens in block 2 come from r's chunk."""
    s = make_scheduler(num_blocks=4, max_num_batched_tokens=16, max_num_seqs=4,
                       scheduling_policy="priority", long_prefill_token_threshold=8)
    s.add(_prio("r", 12, 5))
    assert _step(s) == [("r", 0, 8)]
    s.add(_prio("w", 13, 0))                                  # r's 12 tokens and one more
    s.add(_prio("x", 4, 1, start=300))                        # needs the last free block
    assert _step(s) == [("r", 8, 4), ("w", 12, 1)]           # x waits; r is not preempted
    assert s.num_preemptions == 0 and s.kv.block_table("w")[:3] == s.kv.block_table("r")


def test_a_preemption_in_the_admission_loop_looks_the_prefix_up_again():
    """x finds r's block that r fills in this step, then preempts r to fit: that block
    never gets its K/V, so x must compute those tokens itself."""
    s = make_scheduler(num_blocks=4, max_num_batched_tokens=16, max_num_seqs=4,
                       scheduling_policy="priority", long_prefill_token_threshold=8)
    s.add(_prio("r", 12, 5))
    s.add(_prio("f", 3, 3, start=300))
    assert _step(s) == [("f", 0, 3), ("r", 0, 8)]            # f: block 0, r: blocks 1, 2
    s.add(_prio("x", 13, 0))                                  # r's 12 tokens and one more
    assert _step(s) == [("x", 8, 5)]                         # not ("x", 12, 1)
    assert s.num_preemptions == 2 and s.requests["x"].num_cached_tokens == 8


def test_static_admits_next_batch_only_when_all_finished():
    s = make_scheduler("static", max_num_seqs=2)
    s.add(req("a", 2, max_tokens=1))
    s.add(req("b", 2, max_tokens=3))
    s.add(req("c", 2, max_tokens=1))
    log = run_fake(s)
    assert [sorted(r for r, _, _ in step) for step in log] == [
        ["a", "b"], ["b"], ["b"], ["c"]]


def test_preemption_frees_and_recomputes():
    s = make_scheduler(num_blocks=4, block_size=2, max_num_seqs=4, enable_prefix_caching=False)
    s.add(req("a", 3, max_tokens=4))
    s.add(req("b", 3, max_tokens=4, start=200))
    log = run_fake(s)
    assert s.num_preemptions >= 1
    assert any(k == "prefill" and n > 3 for step in log for _, n, k in step)  # recompute w/ outputs
    assert s.kv.pool.num_free == 4 and s.kv.pool.ref_cnt == [0] * 4
    assert not s.has_unfinished()


def test_request_state_machine_rejects_illegal_moves():
    r = req("a", 2)
    with pytest.raises(RuntimeError):
        r.move_to(RequestStatus.PREEMPTED)
    r.move_to(RequestStatus.RUNNING)
    r.move_to(RequestStatus.FINISHED_LENGTH)
    with pytest.raises(RuntimeError):
        r.move_to(RequestStatus.RUNNING)


def test_engine_abort_frees_blocks(tiny_engine):
    import inferlab as il
    eng = tiny_engine
    rid = eng.add_request("Hello there, how are you today?", il.SamplingParams(max_tokens=50))
    other = eng.add_request([5, 6, 7], il.SamplingParams(max_tokens=3))
    eng.step()
    eng.step()
    assert eng.stats().kv_blocks_used > 0
    assert eng.abort(rid)
    assert not eng.abort(rid)
    while eng.has_unfinished_requests():
        eng.step()
    st = eng.stats()
    assert st.kv_blocks_used == 0 and st.num_running == 0
    assert eng.kv.pool.ref_cnt == [0] * eng.num_blocks
    assert other not in eng.scheduler.requests


def test_the_default_dtype_comes_from_inferlab_dtype(monkeypatch):
    """float32 unless INFERLAB_DTYPE names another (a Binder pod in bf16); an explicit dtype
    wins; a bad value is named with the variable it came from."""
    monkeypatch.delenv("INFERLAB_DTYPE", raising=False)
    assert EngineConfig().dtype == "float32"
    monkeypatch.setenv("INFERLAB_DTYPE", "bfloat16")
    assert EngineConfig().dtype == "bfloat16"
    assert EngineConfig(dtype="float32").dtype == "float32"
    monkeypatch.setenv("INFERLAB_DTYPE", "fp8")
    with pytest.raises(InvalidInputError, match="INFERLAB_DTYPE='fp8'"):
        EngineConfig()
