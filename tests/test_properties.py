"""Property tests of the scheduling core on the tiny random Llama (its exact engine-level
cases are in test_engine_cases.py).

Random workloads x random small KV caches x block sizes x both schedulers x both layouts x
chunked prefill on/off x prefix caching on/off x small batch limits x fcfs/priority x a
per-request prefill cap. Whatever the policy: every request finishes, greedy tokens equal a
run with a big cache, no KV block leaks, no step exceeds the token budget, a preempted
request never rejoins in the step it yielded, recomputation stays bounded, and the
bookkeeping (ref counts, used <= allocated <= total, stats) holds after every step.
"""
from __future__ import annotations

import functools

import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

import inferlab as il
from inferlab.core.shapes import cdiv
from inferlab.errors import CapacityError

MAX_MODEL_LEN = 64          # > longest prompt (40) + most new tokens (12): never a length cap
MAX_NEW = 12
BIG = dict(num_blocks=256, block_size=16, max_num_seqs=16, enable_prefix_caching=False,
           max_model_len=MAX_MODEL_LEN)



@functools.lru_cache(maxsize=None)
def _reference_engine():
    return il.Engine("tiny", **BIG)


_REF: dict[tuple, list[int]] = {}


def reference(prompts):
    """Greedy MAX_NEW tokens of each prompt with an unconstrained cache (memoized)."""
    todo = sorted({tuple(p) for p in prompts} - _REF.keys())
    if todo:
        outs = _reference_engine().generate([list(p) for p in todo],
                                            il.SamplingParams(max_tokens=MAX_NEW, ignore_eos=True),
                                            use_tqdm=False)
        for p, o in zip(todo, outs):
            _REF[p] = list(o.token_ids)
    return [_REF[tuple(p)] for p in prompts]


# --- invariants ---------------------------------------------------------------------------
def check_invariants(eng, max_num_seqs):
    s, kv = eng.stats(), eng.kv
    assert 0 <= s.kv_blocks_used <= s.kv_blocks_total == eng.num_blocks
    assert 0 <= s.kv_tokens_used <= s.kv_token_slots_allocated <= s.kv_blocks_total * s.block_size
    assert s.kv_token_slots_allocated == s.kv_blocks_used * s.block_size
    assert 0.0 <= s.kv_waste <= 1.0
    assert s.num_running <= max_num_seqs
    assert s.num_running == len(eng.scheduler.running)
    assert 0 <= s.prefix_cache_hits <= s.prefix_cache_queries
    refs = kv.block_ref_counts()
    assert min(refs) >= 0
    if kv.layout == "paged":
        # a block's ref count is exactly the number of block tables holding it
        held = [0] * eng.num_blocks
        for table in kv.tables.values():
            for b in table:
                held[b] += 1
        assert held == refs
        pool = kv.pool
        assert set(pool.free_queue) == {b for b, r in enumerate(refs) if r == 0}
        # the prefix index names exactly the blocks holding a hash, each under its own hash
        assert all(pool.block_hash[b] == h for h, ids in pool.cached.items() for b in ids)
        assert kv.cached_block_ids() == {b for b, h in enumerate(pool.block_hash) if h}
        # hashless free blocks are handed out first; cached ones wait in their own LRU queue
        assert all(pool.block_hash[b] is None for b in pool.free_uncached)
        assert all(pool.block_hash[b] is not None for b in pool.free_cached)
        # every running request's table covers its computed tokens
        for r in eng.scheduler.running:
            assert len(kv.block_table(r.request_id)) * kv.block_size >= r.num_computed_tokens
    else:
        # contiguous regions never overlap and stay inside the arena
        spans = sorted(kv.regions.values())
        for (s0, n0), (s1, _) in zip(spans, spans[1:]):
            assert s0 + n0 <= s1
        assert all(0 <= a and a + n <= eng.num_blocks for a, n in spans)


def check_drained(eng):
    s = eng.stats()
    assert s.num_running == 0 and s.num_waiting == 0
    assert s.kv_blocks_used == 0 and s.kv_tokens_used == 0 and s.kv_token_slots_allocated == 0
    assert all(r == 0 for r in eng.kv.block_ref_counts())
    assert not eng.scheduler.requests
    if eng.kv.layout == "paged":
        assert not eng.kv.tables and eng.kv.pool.num_free == eng.num_blocks
        assert not eng.kv._hashes and not eng.kv._num_stored
    else:
        assert not eng.kv.regions


# --- the random workload -------------------------------------------------------------------
@st.composite
def workloads(draw):
    vocab = _reference_engine().vocab_size
    base = draw(st.lists(st.integers(3, vocab - 1), min_size=40, max_size=40))
    n = draw(st.integers(1, 7))
    reqs = []
    for _ in range(n):
        length = draw(st.integers(1, 40))
        shared = draw(st.sampled_from([0, length // 2, length, length]))   # prefix hits happen
        tail = draw(st.lists(st.integers(3, vocab - 1), min_size=length - shared,
                             max_size=length - shared))
        # arrival: the engine step at which the request is added (later ones can hit the
        # prefix cache filled by earlier ones)
        reqs.append((base[:shared] + tail, draw(st.integers(1, MAX_NEW)),
                     draw(st.sampled_from([0, 0, 1, 3, 8, 20])), draw(st.integers(0, 2))))
    return sorted(reqs, key=lambda r: r[2])


@st.composite
def configs(draw):
    bs = draw(st.sampled_from([1, 2, 4, 8, 16]))
    full = cdiv(MAX_MODEL_LEN, bs)                  # blocks for one max-length sequence
    scheduler = draw(st.sampled_from(["continuous", "static"]))
    chunked = draw(st.booleans())
    return dict(
        scheduler=scheduler,
        kv_layout=draw(st.sampled_from(["paged", "contiguous"])),
        block_size=bs,
        # from "refuses the longest requests" through "preempts often" to "never short"
        num_blocks=max(1, int(full * draw(st.sampled_from([0.4, 0.7, 0.9, 1.0, 1.5, 3.0])))),
        max_num_seqs=draw(st.integers(1, 4)),
        # without chunking the budget must hold max_model_len (refused otherwise)
        max_num_batched_tokens=draw(st.sampled_from([1, 5, 16, 64] if chunked else [64, 80])),
        enable_chunked_prefill=chunked,
        enable_prefix_caching=draw(st.booleans()),
        scheduling_policy=draw(st.sampled_from(["fcfs", "priority"]))
        if scheduler == "continuous" else "fcfs",
        long_prefill_token_threshold=draw(st.sampled_from([0, 0, 3, 8])) if chunked else 0,
        max_model_len=MAX_MODEL_LEN,
    )


@settings(max_examples=25, deadline=None, phases=[Phase.explicit, Phase.generate, Phase.shrink],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(work=workloads(), cfg=configs())
def test_any_policy_finishes_everything_with_the_same_tokens_and_no_leak(work, cfg):
    run_and_check(work, cfg)


@st.composite
def pressure_configs(draw):
    """Paged with prefix caching, a cache of about one long sequence, several long requests
    arriving together: preemption and prefix hits are the rule here, not the exception."""
    cfg = draw(configs())
    full = cdiv(MAX_MODEL_LEN, cfg["block_size"])
    cfg.update(kv_layout="paged", enable_prefix_caching=True, max_num_seqs=4,
               num_blocks=max(1, int(full * draw(st.sampled_from([0.9, 1.0, 1.2])))))
    return cfg


@st.composite
def pressure_workloads(draw):
    vocab = _reference_engine().vocab_size
    base = draw(st.lists(st.integers(3, vocab - 1), min_size=40, max_size=40))
    reqs = []
    for _ in range(draw(st.integers(3, 6))):
        length = draw(st.integers(20, 40))
        shared = draw(st.sampled_from([0, 16, length]))
        tail = draw(st.lists(st.integers(3, vocab - 1), min_size=length - shared,
                             max_size=length - shared))
        reqs.append((base[:shared] + tail, draw(st.integers(4, MAX_NEW)),
                     draw(st.sampled_from([0, 0, 2, 10])), draw(st.integers(0, 2))))
    return sorted(reqs, key=lambda r: r[2])


@settings(max_examples=12, deadline=None, phases=[Phase.explicit, Phase.generate, Phase.shrink],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(work=pressure_workloads(), cfg=pressure_configs())
def test_under_memory_pressure_preemption_and_prefix_hits_change_no_token(work, cfg):
    run_and_check(work, cfg)


def run_and_check(work, cfg):
    eng = il.Engine("tiny", **cfg)
    bs, nb = cfg["block_size"], cfg["num_blocks"]
    ids, expect, refused = [], [], 0
    recs = []
    eng.subscribe(recs.append)
    done, steps, ticks, batch = {}, 0, 0, 0
    pending = list(work)
    limit = 50 * sum(len(p) + m for p, m, *_ in work) + 30   # progress guarantee
    by_priority = cfg.get("scheduling_policy") == "priority"
    cap = cfg.get("long_prefill_token_threshold") or 0
    while pending or eng.has_unfinished_requests():
        while pending and pending[0][2] <= steps + ticks:
            prompt, max_tokens, _, prio = pending.pop(0)
            prio = prio if by_priority else 0
            sp = il.SamplingParams(max_tokens=max_tokens, ignore_eos=True)
            need = (cdiv(MAX_MODEL_LEN, bs) if cfg["kv_layout"] == "contiguous"
                    else cdiv(len(prompt) + max_tokens, bs))
            if need > nb:                                # can never fit: refused up front
                with pytest.raises(CapacityError):
                    eng.add_request(prompt, sp, priority=prio)
                refused += 1
                continue
            ids.append(eng.add_request(prompt, sp, priority=prio))
            expect.append((prompt, max_tokens))
        check_invariants(eng, cfg["max_num_seqs"])
        if not eng.has_unfinished_requests():           # idle until the next arrival
            ticks += 1
            continue
        running = list(eng.scheduler.running)
        busy = any(r.output_token_ids for r in running)
        for out in eng.step():
            if out.finished:
                assert out.request_id not in done
                done[out.request_id] = out
        check_invariants(eng, cfg["max_num_seqs"])
        admitted = [e.request_id for e in recs[-1].request_events if e.kind == "admitted"]
        preempted = {e.request_id for e in recs[-1].request_events if e.kind == "preempted"}
        assert recs[-1].num_batched_tokens <= cfg["max_num_batched_tokens"]   # a real budget
        assert not preempted & set(admitted)             # no rejoining in the step it yielded
        if preempted and not by_priority:
            assert not admitted                          # a step that preempted admits nobody
        if cap:
            assert all(c.num_tokens <= cap for c in recs[-1].batch)
        if cfg["scheduler"] == "static":
            # naive batching: nobody joins a batch that is decoding, nor takes a finished
            # member's seat; a new batch forms only in an empty engine
            assert not (admitted and busy)
            batch = len(admitted) if not running else batch + len(admitted)
            assert batch <= cfg["max_num_seqs"]
        steps += 1
        assert steps <= limit, "engine made no progress"
    event(f"preempted={eng.stats().num_preemptions > 0}")
    event(f"prefix hits={eng.stats().prefix_cache_hits > 0}")
    event(f"refused={refused > 0}")
    event(f"policy={cfg.get('scheduling_policy')}, prefill cap={cap > 0}")

    assert set(done) == set(ids)                         # every request finished
    refs = reference([p for p, _ in expect])
    for rid, (prompt, max_tokens), ref in zip(ids, expect, refs):
        out = done[rid]
        assert out.finish_reason == "length"
        assert out.prompt_token_ids == prompt
        assert out.token_ids == ref[:max_tokens]          # greedy = unconstrained run
        m = out.metrics
        assert m.num_output_tokens == max_tokens and len(m.itl) == max_tokens - 1
        assert 0 <= m.num_cached_tokens < len(prompt)
        assert m.num_cached_tokens % bs == 0
        if not cfg["enable_prefix_caching"] or cfg["kv_layout"] == "contiguous":
            assert m.num_cached_tokens == 0
    check_drained(eng)
    s = eng.stats()
    assert s.num_steps == steps
    assert s.num_preemptions == sum(done[r].metrics.num_preemptions for r in ids)
    # churn is bounded: each preemption costs at most one recompute of a max-length sequence
    assert s.num_recomputed_tokens <= s.num_preemptions * MAX_MODEL_LEN
    assert s.max_preemptions_per_request == max(
        [done[r].metrics.num_preemptions for r in ids], default=0)
    if not s.num_preemptions:
        assert s.num_recomputed_tokens == 0
    assert s.prefix_cache_hits == sum(done[r].metrics.num_cached_tokens for r in ids)
    assert s.max_concurrent_requests <= cfg["max_num_seqs"]
    assert s.peak_kv_blocks_used <= nb
    assert 0.0 <= s.peak_kv_waste <= 1.0
    if cfg["kv_layout"] == "contiguous" and cfg.get("scheduling_policy", "fcfs") == "fcfs":
        # a reservation covers the whole life: only a higher-priority arrival displaces one
        assert s.num_preemptions == 0


@settings(max_examples=10, deadline=None)
@given(bs=st.sampled_from([2, 4, 8]), short=st.integers(0, 3))
def test_contiguous_refuses_requests_that_can_never_fit(bs, short):
    full = cdiv(MAX_MODEL_LEN, bs)
    eng = il.Engine("tiny", kv_layout="contiguous", block_size=bs, num_blocks=full - 1 - short,
                    max_model_len=MAX_MODEL_LEN)
    with pytest.raises(CapacityError, match="contiguous"):
        eng.add_request([5, 6, 7], il.SamplingParams(max_tokens=1))
    assert not eng.has_unfinished_requests()
    paged = il.Engine("tiny", block_size=bs, num_blocks=1, max_model_len=MAX_MODEL_LEN)
    with pytest.raises(CapacityError):
        paged.add_request(list(range(3, 3 + bs + 1)), il.SamplingParams(max_tokens=1))
    paged.add_request(list(range(3, 3 + bs - 1)), il.SamplingParams(max_tokens=1))   # fits


# --- min_tokens, stop tokens and priorities in any batch --------------------------------------
_ALONE: dict[tuple, list[int]] = {}


def alone(prompt, sp):
    """The tokens of one request run by itself in the big engine (memoized)."""
    key = (tuple(prompt), sp.max_tokens, sp.min_tokens, tuple(sp.stop_token_ids))
    if key not in _ALONE:
        _ALONE[key] = list(_reference_engine().generate([prompt], sp, use_tqdm=False)[0].token_ids)
    return _ALONE[key]


@st.composite
def stop_workloads(draw):
    """Requests whose stop token is one their greedy run would produce (so it matters),
    with min_tokens from 0 to max_tokens and a priority."""
    vocab = _reference_engine().vocab_size
    reqs = []
    for _ in range(draw(st.integers(1, 5))):
        prompt = draw(st.lists(st.integers(3, vocab - 1), min_size=1, max_size=30))
        max_tokens = draw(st.integers(1, MAX_NEW))
        stop = reference([prompt])[0][draw(st.integers(0, MAX_NEW - 1))]
        reqs.append((prompt, il.SamplingParams(max_tokens=max_tokens, ignore_eos=True,
                                               stop_token_ids=[stop],
                                               min_tokens=draw(st.integers(0, max_tokens))),
                     draw(st.integers(0, 2))))
    return reqs


@settings(max_examples=10, deadline=None, phases=[Phase.explicit, Phase.generate, Phase.shrink],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(work=stop_workloads(), cfg=configs())
def test_min_tokens_and_stop_tokens_give_the_same_tokens_in_any_batch(work, cfg):
    eng = il.Engine("tiny", **cfg)
    bs, nb = cfg["block_size"], cfg["num_blocks"]
    by_priority = cfg["scheduling_policy"] == "priority"
    ids = {}
    for prompt, sp, prio in work:
        need = (cdiv(MAX_MODEL_LEN, bs) if cfg["kv_layout"] == "contiguous"
                else cdiv(len(prompt) + sp.max_tokens, bs))
        if need <= nb:
            ids[eng.add_request(prompt, sp, priority=prio if by_priority else 0)] = (prompt, sp)
    done, steps = {}, 0
    while eng.has_unfinished_requests():
        done.update({o.request_id: o for o in eng.step() if o.finished})
        check_invariants(eng, cfg["max_num_seqs"])
        steps += 1
        assert steps <= 2000, "engine made no progress"
    assert set(done) == set(ids)
    for rid, (prompt, sp) in ids.items():
        out, stop = done[rid], sp.stop_token_ids[0]
        assert out.token_ids == alone(prompt, sp)          # the batch changes no token
        assert len(out.token_ids) >= sp.min_tokens
        assert stop not in out.token_ids[:sp.min_tokens]   # masked until min_tokens
        if out.finish_reason == "stop":
            assert out.token_ids[-1] == stop and len(out.token_ids) > sp.min_tokens
            assert stop not in out.token_ids[:-1]
        else:
            assert len(out.token_ids) == sp.max_tokens and stop not in out.token_ids
    check_drained(eng)
    s = eng.stats()
    assert s.num_recomputed_tokens <= s.num_preemptions * MAX_MODEL_LEN
