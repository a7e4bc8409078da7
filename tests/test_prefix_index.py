"""Prefix-cache index and free queues, exactly (issue 11): block ids, queue order, hit counts.

* every block holding a hash stays findable while any does (duplicate copies of a prefix);
* hashless free blocks are handed out before cached ones (cached ones in LRU order);
* reset_prefix_cache drops every cached block, refused while a request holds blocks.
"""
from __future__ import annotations

import functools

import pytest

import inferlab as il
from inferlab.core.block_pool import ROOT_HASH, BlockPool, hash_block
from inferlab.core.kv_manager import ContiguousKVManager, PagedKVManager
from inferlab.core.params import SamplingParams
from inferlab.core.request import Request

H0 = hash_block(ROOT_HASH, [1, 2])
H1 = hash_block(H0, [3, 4])


def req(rid, n_prompt, max_tokens=4, start=100):
    return Request(rid, list(range(start, start + n_prompt)), SamplingParams(max_tokens=max_tokens))


def kinds(events):
    return [(e.kind, e.block_ids) for e in events]


def index_agrees(kv):
    """cached_block_ids(), the index and lookups tell the same story."""
    pool = kv.pool
    assert kv.cached_block_ids() == {b for b, h in enumerate(pool.block_hash) if h is not None}
    for h, ids in pool.cached.items():
        assert ids and all(pool.block_hash[b] == h for b in ids)
        assert pool.lookup(h) in ids
    assert pool.num_cached_blocks == len(kv.cached_block_ids())


# --- BlockPool -------------------------------------------------------------------------------
def test_hashless_blocks_are_handed_out_before_cached_ones():
    pool = BlockPool(6)
    assert pool.allocate(4, "x") == [0, 1, 2, 3]
    pool.cache(0, H0)
    pool.cache(1, H1)
    pool.free([1, 0], "x")                    # a request whose two blocks hold a prefix
    pool.free([3, 2], "y")                    # one whose blocks hold nothing reusable
    assert list(pool.free_uncached) == [4, 5, 3, 2] and list(pool.free_cached) == [1, 0]
    assert pool.free_queue == [4, 5, 3, 2, 1, 0]
    pool.drain_events()
    assert pool.allocate(4, "z") == [4, 5, 3, 2]          # no prefix lost
    assert kinds(pool.drain_events()) == [("allocated", [4, 5, 3, 2])]
    assert pool.allocate(1, "z") == [1]                   # then LRU among the cached
    assert kinds(pool.drain_events()) == [("evicted", [1]), ("allocated", [1])]
    assert pool.lookup(H0) == 0 and pool.lookup(H1) is None
    assert pool.free_queue == [0] and pool.block_hash[1] is None


def test_old_single_queue_policy_evicts_in_free_order():
    pool = BlockPool(6, evict_cached_last=False)
    pool.allocate(4)
    pool.cache(0, H0)
    pool.cache(1, H1)
    pool.free([1, 0])
    pool.free([3, 2])
    assert pool.free_queue == [4, 5, 1, 0, 3, 2] and not pool.free_cached
    pool.drain_events()
    assert pool.allocate(3) == [4, 5, 1]
    assert kinds(pool.drain_events()) == [("evicted", [1]), ("allocated", [4, 5, 1])]


def test_a_hit_and_a_refree_move_a_cached_block_to_the_lru_tail():
    pool = BlockPool(4)
    pool.allocate(2)
    pool.cache(0, H0)
    pool.cache(1, H1)
    pool.free([1, 0])
    assert pool.free_queue == [2, 3, 1, 0]
    pool.touch([pool.lookup(H0), pool.lookup(H1)], "hit")      # [0, 1]
    assert pool.ref_cnt[:2] == [1, 1] and pool.free_queue == [2, 3]
    pool.free([1], "hit")
    pool.free([0], "hit")
    assert list(pool.free_cached) == [1, 0]


def test_duplicate_copies_stay_findable_until_the_last_is_evicted():
    for policy in (True, False):                 # the index does not depend on the queues
        pool = BlockPool(4, evict_cached_last=policy)
        assert pool.allocate(4) == [0, 1, 2, 3]
        pool.cache(0, H0)
        pool.cache(2, H0)                        # a second request computed the same block
        assert pool.cached == {H0: {0: None, 2: None}}
        assert pool.lookup(H0) == 0              # both in use: the first indexed
        pool.free([1, 0])
        assert pool.lookup(H0) == 2              # the copy still in use wins
        pool.free([3, 2])
        assert pool.lookup(H0) == 0              # none in use: the first indexed
        pool.drain_events()
        got = pool.allocate(3)                   # hands out block 0 (and 1, 3), not block 2
        assert 0 in got and 2 not in got
        assert ("evicted", [0]) in kinds(pool.drain_events())
        assert pool.cached == {H0: {2: None}} and pool.lookup(H0) == 2
        assert pool.cached_block_ids() == {2} and pool.num_cached_blocks == 1
        pool.allocate(1)
        assert pool.cached == {} and pool.lookup(H0) is None


def test_reset_prefix_cache_on_the_pool():
    pool = BlockPool(4)
    pool.allocate(3)
    pool.cache(0, H0)
    pool.cache(1, H1)
    pool.free([2, 1], "x")
    before = (pool.free_queue, dict(pool.cached), list(pool.block_hash))
    pool.drain_events()
    assert pool.reset_prefix_cache() is False    # block 0 still in use: nothing changes
    assert (pool.free_queue, dict(pool.cached), list(pool.block_hash)) == before
    assert pool.drain_events() == []
    pool.free([0], "x")
    assert pool.free_queue == [3, 2, 1, 0]
    pool.drain_events()
    assert pool.reset_prefix_cache() is True
    assert kinds(pool.drain_events()) == [("evicted", [1, 0])]
    assert pool.cached == {} and pool.block_hash == [None] * 4 and pool.lookup(H0) is None
    assert list(pool.free_uncached) == [3, 2, 1, 0] and not pool.free_cached
    assert pool.reset_prefix_cache() is True and pool.drain_events() == []


# --- PagedKVManager ----------------------------------------------------------------------------
@pytest.mark.parametrize("evict_cached_last", [True, False])
def test_two_identical_prompts_then_evict_one_copy(evict_cached_last):
    kv = PagedKVManager(6, block_size=8, evict_cached_last=evict_cached_last)
    a, b = req("a", 16), req("b", 16)             # the same two full blocks
    assert kv.get_computed_blocks(a) == [] and kv.allocate_slots(a, 16)
    hits = kv.get_computed_blocks(b)              # same step: a's blocks are indexed already,
    assert hits == [0]                            # but a hit never covers the last token,
    assert kv.allocate_slots(b, 8, hits)          # so b computes its own copy of block 1
    assert kv.block_table("a") == [0, 1] and kv.block_table("b") == [0, 2]
    for r in (a, b):
        r.num_computed_tokens = 16
        kv.commit(r)
    assert kv.cached_block_ids() == {0, 1, 2}
    assert kv.pool.cached[kv._hashes["a"][1]] == {1: None, 2: None}    # two copies
    kv.free(a)
    kv.free(b)
    assert kv.pool.free_queue == [3, 4, 5, 1, 2, 0]
    assert kv.get_computed_blocks(req("c", 17)) == [0, 1]                # first indexed
    kv.drain_events()
    d = req("d", 32, start=500)                   # memory pressure: 4 of the 6 blocks
    assert kv.allocate_slots(d, 32)
    assert kv.block_table("d") == [3, 4, 5, 1]
    assert [e.block_ids for e in kv.drain_events() if e.kind == "evicted"] == [[1]]
    index_agrees(kv)
    c = req("c", 17)
    assert kv.get_computed_blocks(c) == [0, 2]    # the surviving copy is still found
    d.num_computed_tokens = 32
    kv.commit(d)
    kv.free(d)
    assert kv.allocate_slots(c, 1, [0, 2]) and kv.block_table("c")[:2] == [0, 2]
    index_agrees(kv)


def test_contiguous_and_uncached_paged_reset_is_a_no_op():
    kv = ContiguousKVManager(8, block_size=4, max_model_len=16)
    assert kv.allocate_slots(req("a", 4), 4)
    assert kv.reset_prefix_cache() is True and kv.cached_block_ids() == set()
    paged = PagedKVManager(4, block_size=4, enable_prefix_caching=False)
    assert paged.allocate_slots(req("a", 4), 4)
    assert paged.reset_prefix_cache() is True


# --- through the real engine (tiny random Llama) ---------------------------------------------
SP2 = il.SamplingParams(max_tokens=2, ignore_eos=True)


@functools.lru_cache(maxsize=None)
def reference(prompt: tuple, n: int) -> list[int]:
    big = il.Engine("tiny", block_size=8, num_blocks=64, max_model_len=64,
                    enable_prefix_caching=False)
    return big.generate([list(prompt)], il.SamplingParams(max_tokens=n, ignore_eos=True),
                        use_tqdm=False)[0].token_ids


def _engine(num_blocks, block_size=8):
    eng = il.Engine("tiny", block_size=block_size, num_blocks=num_blocks, max_model_len=48)
    recs = []
    eng.subscribe(recs.append)
    return eng, recs


def _events(recs, kind):
    return [e.block_ids for r in recs for e in r.kv_events if e.kind == kind]


def test_engine_two_identical_prompts_then_evict_keeps_the_survivor_findable():
    eng, recs = _engine(6)
    p = list(range(10, 26))                                       # 16 tokens: 2 full blocks
    first = eng.generate([p, p], SP2, use_tqdm=False)
    # same step: the second shares block 0 at once; block 1 holds the last prompt token,
    # which a hit never covers, so it computes a second copy of it (block 2)
    assert [o.metrics.num_cached_tokens for o in first] == [0, 8]
    assert _events(recs, "allocated") == [[0, 1], [2], [3], [4]]  # then a decode block each
    assert _events(recs, "shared")[0] == [0]
    assert eng.kv.cached_block_ids() == {0, 1, 2}
    assert eng.kv.pool.free_queue == [5, 3, 4, 1, 2, 0]

    recs.clear()
    eng.generate([list(range(200, 232))], il.SamplingParams(max_tokens=1, ignore_eos=True),
                 use_tqdm=False)                                  # 32 tokens: 4 blocks
    assert _events(recs, "allocated") == [[5, 3, 4, 1]]
    assert _events(recs, "evicted") == [[1]]                      # one copy of the prefix
    assert eng.kv.cached_block_ids() == {0, 2, 5, 3, 4, 1}
    index_agrees(eng.kv)

    recs.clear()
    third = eng.generate([p + [99]], SP2, use_tqdm=False)[0]
    assert third.metrics.num_cached_tokens == 16                  # found the surviving copy
    assert _events(recs, "shared") == [[0, 2]]
    assert first[0].token_ids == first[1].token_ids == reference(tuple(p), 2)
    assert third.token_ids == reference(tuple(p + [99]), 2)
    st = eng.stats()
    assert (st.prefix_cache_queries, st.prefix_cache_hits) == (16 + 16 + 32 + 17, 8 + 16)
    index_agrees(eng.kv)


def test_engine_shared_system_prompt_while_a_copy_holder_still_runs():
    eng, recs = _engine(12)
    system = list(range(30, 46))                                  # 16 tokens = 2 blocks
    x = eng.add_request(system, il.SamplingParams(max_tokens=1, ignore_eos=True))
    y = eng.add_request(system, il.SamplingParams(max_tokens=8, ignore_eos=True))
    eng.step()                    # y shares block 0 and computes a second copy of block 1
    assert _events(recs, "allocated") == [[0, 1], [2]]
    assert x not in eng.scheduler.requests                        # x finished, y runs on
    assert eng.kv.block_table(y) == [0, 2]
    assert eng.kv.pool.cached[eng.kv._hashes[y][1]] == {1: None, 2: None}
    assert eng.kv.pool.free_queue == [3, 4, 5, 6, 7, 8, 9, 10, 11, 1]

    recs.clear()
    b_prompt = system + [80, 81, 82, 83, 84]
    b = eng.add_request(b_prompt, il.SamplingParams(max_tokens=3, ignore_eos=True))
    eng.step()                    # y's decode takes block 3
    # b shares the copy y is running on (block 2), not the free copy indexed first (block 1):
    # a hit that takes nothing out of the free queue.
    assert eng.kv.block_table(b) == [0, 2, 4]
    assert _events(recs, "shared") == [[0, 2]]
    assert eng.kv.pool.ref_cnt[:5] == [2, 0, 2, 1, 1]
    assert eng.kv.pool.free_queue == [5, 6, 7, 8, 9, 10, 11, 1]
    index_agrees(eng.kv)
    done = {}
    while eng.has_unfinished_requests():
        done.update({o.request_id: o for o in eng.step() if o.finished})
    assert done[b].metrics.num_cached_tokens == 16
    assert done[b].token_ids == reference(tuple(b_prompt), 3)
    assert done[y].token_ids == reference(tuple(system), 8)
    st = eng.stats()
    assert (st.prefix_cache_queries, st.prefix_cache_hits) == (16 + 16 + 21, 8 + 16)
    index_agrees(eng.kv)


def test_engine_reset_prefix_cache():
    eng, recs = _engine(16, block_size=4)
    p = list(range(10, 20))                                       # 10 tokens: 2 full blocks
    eng.generate([p], SP2, use_tqdm=False)
    assert eng.generate([p], SP2, use_tqdm=False)[0].metrics.num_cached_tokens == 8

    rid = eng.add_request(list(range(300, 306)), il.SamplingParams(max_tokens=6, ignore_eos=True))
    eng.step()
    cached, queue = eng.kv.cached_block_ids(), eng.kv.pool.free_queue
    with pytest.warns(RuntimeWarning, match=r"refused: 1 running request\(s\) hold 2 KV blocks"):
        assert eng.reset_prefix_cache() is False
    assert eng.kv.cached_block_ids() == cached and eng.kv.pool.free_queue == queue
    while eng.has_unfinished_requests():
        eng.step()
    assert rid not in eng.scheduler.requests

    recs.clear()
    cached = eng.kv.cached_block_ids()
    assert cached
    assert eng.reset_prefix_cache() is True
    assert eng.kv.cached_block_ids() == set() and eng.kv.pool.cached == {}
    out = eng.generate([p], SP2, use_tqdm=False)[0]
    assert out.metrics.num_cached_tokens == 0
    assert out.token_ids == reference(tuple(p), 2)
    evicted = _events(recs, "evicted")
    assert set(evicted[0]) == cached                  # one event, reported in the next step
    assert eng.stats().kv_blocks_used == 0


# --- the prefix-reuse benchmark (core only, deterministic) ----------------------------------
def test_prefix_reuse_benchmark_is_deterministic_and_cached_last_hits_more():
    from inferlab.bench.reuse import bench_reuse, replay, workloads
    chat = workloads(0)["chat"]
    new = replay(chat, 192, evict_cached_last=True)
    assert new == replay(chat, 192, evict_cached_last=True)        # counts, not timings
    old = replay(chat, 192, evict_cached_last=False)
    assert new["queries"] == old["queries"] and new["requests"] == old["requests"] == len(chat)
    assert new["hits"] > old["hits"] and new["evicted"] < old["evicted"]
    lines = []
    res = bench_reuse(budgets=(192,), engine_check=False, out=lines.append)
    assert res["chat/192"] == {"old": old, "new": new}
    assert any("hit rate old -> new" in line for line in lines)


def test_prefix_reuse_benchmark_shows_the_same_step_effect():
    """A burst sharing a system prompt: indexing blocks as they are allocated (vLLM) computes
    the prompt once per step, not once per request; the real engine agrees on the counts."""
    from inferlab.bench.reuse import same_step
    lines = []
    r = same_step(num_requests=6, engine_check=True, out=lines.append)
    after, ahead = r["after step"], r["at allocation"]
    assert after["queries"] == ahead["queries"] and after["requests"] == ahead["requests"] == 6
    assert ahead["hits"] == 5 * 512 and after["hits"] < ahead["hits"]   # 5 copies not computed
    assert after["prefill_tokens"] - ahead["prefill_tokens"] == ahead["hits"] - after["hits"]
    assert any("prefill tokens computed" in line for line in lines)
