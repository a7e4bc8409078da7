"""Exact engine-level cases of the scheduling core on the tiny random Llama: which blocks the
prefix cache reuses and evicts, that it shares nothing when off, and that static batching
never admits while a batch runs. (The random-workload properties are in test_properties.py,
whose reference run and drain check these reuse.)"""
from __future__ import annotations

import pytest

import inferlab as il
from test_properties import MAX_MODEL_LEN, check_drained, reference


def _records(eng):
    recs = []
    eng.subscribe(recs.append)
    return recs


def test_prefix_cache_reuses_then_evicts_exact_blocks():
    eng = il.Engine("tiny", block_size=4, num_blocks=6, max_model_len=32,
                    enable_prefix_caching=True)
    recs = _records(eng)
    sp = il.SamplingParams(max_tokens=1, ignore_eos=True)
    a = list(range(10, 20))                            # 10 tokens: blocks 0, 1 full, 2 partial
    eng.generate([a], sp, use_tqdm=False)
    assert recs[0].block_tables == {} and recs[0].batch[0].num_cached == 0
    allocated = [e.block_ids for r in recs for e in r.kv_events if e.kind == "allocated"]
    assert allocated == [[0, 1, 2]]
    assert eng.kv.cached_block_ids() == {0, 1}
    # freed tail first: the never-used blocks, then 2, then the prefix 1, 0 (evicted last)
    assert list(eng.kv.pool.free_queue) == [3, 4, 5, 2, 1, 0]

    # B shares A's first 8 tokens (two full blocks): it reuses physical blocks 0 and 1.
    b = a[:8] + [90, 91, 92]
    recs.clear()
    rid = eng.add_request(b, il.SamplingParams(max_tokens=3, ignore_eos=True))
    eng.step()
    assert eng.kv.block_table(rid) == [0, 1, 3]
    assert eng.kv.pool.ref_cnt[:4] == [1, 1, 0, 1]
    chunk = recs[0].batch[0]
    assert (chunk.start, chunk.num_tokens, chunk.num_cached) == (8, 3, 8)
    shared = [e.block_ids for e in recs[0].kv_events if e.kind == "shared"]
    assert shared == [[0, 1]]
    while eng.has_unfinished_requests():
        outs = eng.step()
    assert outs[0].metrics.num_cached_tokens == 8
    assert outs[0].token_ids == reference_tokens(b, 3)
    st_ = eng.stats()
    assert (st_.prefix_cache_queries, st_.prefix_cache_hits) == (10 + 11, 8)
    # B's own third block (tokens 8..11 = 90 91 92 + its first output) is now cached too;
    # its 4th block (tokens 12, 13) is partial. Freed tail first: 4, 3, then the shared 1, 0.
    assert eng.kv.block_table(rid) == []
    assert eng.kv.cached_block_ids() == {0, 1, 3}
    assert list(eng.kv.pool.free_queue) == [5, 2, 4, 3, 1, 0]

    # D (20 unrelated tokens, 5 blocks) takes the free queue from its head: 5, 2, 4, 3, 1.
    # Cached blocks 3 and 1 are evicted; block 0 (A's first block) survives.
    recs.clear()
    eng.generate([list(range(200, 220))], sp, use_tqdm=False)
    evicted = [e.block_ids for r in recs for e in r.kv_events if e.kind == "evicted"]
    assert evicted == [[3, 1]]
    assert eng.kv.cached_block_ids() == {0, 5, 2, 4, 3, 1}   # A's block 0 + D's five blocks
    # C repeats A: only A's first block can still be found.
    out = eng.generate([a], sp, use_tqdm=False)[0]
    assert out.metrics.num_cached_tokens == 4
    assert out.token_ids == reference_tokens(a, 1)
    check_drained(eng)


def reference_tokens(prompt, n):
    return reference([prompt])[0][:n]


def test_prefix_cache_off_shares_nothing():
    eng = il.Engine("tiny", block_size=4, num_blocks=8, max_model_len=32,
                    enable_prefix_caching=False)
    sp = il.SamplingParams(max_tokens=2, ignore_eos=True)
    a = list(range(10, 20))
    outs = eng.generate([a, a], sp, use_tqdm=False)
    assert [o.metrics.num_cached_tokens for o in outs] == [0, 0]
    assert eng.kv.cached_block_ids() == set()
    assert eng.stats().prefix_cache_hits == 0
    check_drained(eng)


@pytest.mark.parametrize("chunked", [True, False])
def test_static_never_admits_while_a_batch_is_running(chunked):
    budget = 8 if chunked else MAX_MODEL_LEN      # chunking off: the budget holds any prompt
    eng = il.Engine("tiny", scheduler="static", max_num_seqs=2, num_blocks=64, block_size=4,
                    max_num_batched_tokens=budget, enable_chunked_prefill=chunked,
                    max_model_len=MAX_MODEL_LEN)
    lens = [1, 5, 2, 2, 7]                        # batches (r0, r1), (r2, r3), (r4)
    ids = [eng.add_request(list(range(10 + i, 22 + i)),
                           il.SamplingParams(max_tokens=n, ignore_eos=True))
           for i, n in enumerate(lens)]
    batches, admitted_at, finished_at = [], {}, {}
    step = 0
    while eng.has_unfinished_requests():
        before = {r.request_id for r in eng.scheduler.running}
        busy = any(r.output_token_ids for r in eng.scheduler.running)
        for out in eng.step():
            if out.finished:
                finished_at[out.request_id] = step
        new = {r.request_id for r in eng.scheduler.running} - before
        new |= {rid for rid in ids if rid not in admitted_at and rid not in
                eng.scheduler.requests and rid not in before}      # admitted and finished at once
        if new:
            assert not busy, f"step {step}: admitted {new} while a batch was decoding"
            if before:                                # the batch was still forming
                batches[-1] += sorted(new, key=ids.index)
            else:
                batches.append(sorted(new, key=ids.index))
            assert len(batches[-1]) <= 2, f"static batch grew past max_num_seqs: {batches[-1]}"
        for rid in new:
            admitted_at[rid] = step
        step += 1
    # Regression: r2 finishes (2 tokens) while r3 still prefills; r4 must not take its seat.
    assert batches == [ids[0:2], ids[2:4], ids[4:5]]
    # the next batch starts the step after the last member of the previous one finished
    assert admitted_at[ids[2]] == finished_at[ids[1]] + 1 > finished_at[ids[0]] + 1
    assert admitted_at[ids[4]] == max(finished_at[ids[2]], finished_at[ids[3]]) + 1
    assert eng.stats().num_steps == step
    check_drained(eng)
    # continuous admits r2 as soon as r0 leaves
    cont = il.Engine("tiny", scheduler="continuous", max_num_seqs=2, num_blocks=64, block_size=4,
                     max_num_batched_tokens=budget, enable_chunked_prefill=chunked,
                     max_model_len=MAX_MODEL_LEN)
    assert cont.stats().num_steps == 0
    outs = cont.generate([list(range(10 + i, 22 + i)) for i in range(5)],
                         [il.SamplingParams(max_tokens=n, ignore_eos=True) for n in lens],
                         use_tqdm=False)
    assert cont.stats().num_steps < step
    assert [o.token_ids for o in outs] == [reference_tokens(list(range(10 + i, 22 + i)), n)
                                           for i, n in enumerate(lens)]
