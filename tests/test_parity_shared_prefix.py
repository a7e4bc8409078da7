"""Requests admitted in the same step share their common full blocks (as vLLM's allocate_slots
indexes them ahead), and the tokens stay exactly transformers' on every forward path.

The first request of a step fills the shared blocks; the others attend over them in the same
forward. That is correct only because every path writes the whole step's K/V into the cache
before attention reads it (reference, fused numba, SDPA for long chunks; the numba-CUDA
kernels are checked the same way in the simulator: tests/test_kernels_cudasim.py).
"""
import pytest
import torch

import inferlab as il
from test_parity import hf_greedy

PREFIX = list(range(100, 140))                        # 40 tokens: 2 full blocks of 16


def prompts(prefix):
    return [prefix + [7, 8, 9], prefix + [11], prefix + [12, 13, 14, 15, 16, 17],
            prefix[:32], prefix[:32]]                # the last two: identical, block-aligned


def run(eng, ps, n):
    recs = []
    eng.subscribe(recs.append)
    outs = eng.generate(ps, il.SamplingParams(max_tokens=n, ignore_eos=True), use_tqdm=False)
    return outs, recs


def check(eng, ps, n=8, same_step=True):
    outs, recs = run(eng, ps, n)
    hf = eng.loaded.hf_model
    for o in outs:
        assert o.token_ids == hf_greedy(hf, o.prompt_token_ids, n), o.prompt_token_ids
    assert eng.stats().kv_blocks_used == 0
    first = recs[0].batch
    if same_step:                                    # all admitted in step 0, the later ones
        assert len(first) == len(ps)                 # computing only their own tails
        assert first[0].num_cached == 0 and all(c.num_cached > 0 for c in first[1:])
    return outs, recs


@pytest.mark.parametrize("block_size", [16, 3])
@pytest.mark.parametrize("backend, linear", [("reference", "torch"), ("numba-cpu", "torch"),
                                             ("numba-cpu", "numba"), ("reference", "numba")])
def test_same_step_sharing_matches_transformers(block_size, backend, linear):
    eng = il.Engine("tiny", block_size=block_size, num_blocks=256, attention_backend=backend,
                    linear_backend=linear)
    outs, _ = check(eng, prompts(PREFIX))
    bs = block_size                  # whole blocks of the prefix, never the last prompt token
    assert [o.metrics.num_cached_tokens for o in outs] == \
        [0] + [min(40 // bs, (len(o.prompt_token_ids) - 1) // bs) * bs for o in outs[1:]]


def test_sharing_removed_computes_every_copy():
    """The effect, removed: with prefix caching off the same step computes 5 full prompts."""
    on = il.Engine("tiny", block_size=16, num_blocks=256)
    off = il.Engine("tiny", block_size=16, num_blocks=256, enable_prefix_caching=False)
    (_, r_on), (outs, r_off) = run(on, prompts(PREFIX), 2), run(off, prompts(PREFIX), 2)
    assert r_off[0].num_batched_tokens == sum(len(o.prompt_token_ids) for o in outs) == 194
    assert r_on[0].num_batched_tokens == 194 - (32 + 32 + 16 + 16) == 98


def test_long_shared_prefix_through_the_fused_sdpa_path():
    """A 300-token first chunk sends the whole step through SDPA over K/V gathered from the
    cache, including the blocks the first request writes in that step."""
    prefix = list(range(50, 350))
    eng = il.Engine("tiny", block_size=16, num_blocks=256, attention_backend="numba-cpu",
                    linear_backend="numba", max_model_len=512)
    assert eng.runner.plan.fused
    check(eng, prompts(prefix), n=4)


def test_chunked_prefill_shares_the_blocks_of_each_chunk():
    """A token budget of 24: the first request's prefix arrives in chunks, the others join
    once it is indexed (blocks full after a step are found in that step)."""
    eng = il.Engine("tiny", block_size=8, num_blocks=256, max_num_batched_tokens=24,
                    enable_chunked_prefill=True)
    outs, recs = check(eng, prompts(PREFIX), same_step=False)
    first = recs[0].batch
    assert [(c.request_id, c.start, c.num_tokens, c.num_cached) for c in first][:1] == \
        [(outs[0].request_id, 0, 24, 0)]
    assert sum(o.metrics.num_cached_tokens for o in outs) > 0


def test_preemption_and_recompute_with_shared_blocks():
    """Too few blocks: requests are preempted and recomputed, some of them while their
    blocks are shared; every answer still equals transformers'."""
    eng = il.Engine("tiny", block_size=4, num_blocks=24, max_model_len=64)
    outs, _ = check(eng, prompts(PREFIX[:20]), n=16, same_step=False)
    assert eng.scheduler.num_preemptions > 0
    assert sum(o.metrics.num_cached_tokens for o in outs) > 0


@pytest.mark.slow
def test_smollm2_shared_system_prompt_admitted_together(smollm2):
    system = {"role": "system", "content": "You are a concise assistant for a museum of "
              "science. Answer in one sentence, plainly, without lists."}
    questions = ["What is a black hole?", "Why is the sky blue?", "What is DNA?"]
    eng = il.Engine(block_size=16)
    outs, recs = run(eng, [[system, {"role": "user", "content": q}] for q in questions], 24)
    for o in outs:
        assert o.token_ids == hf_greedy(smollm2.hf_model, o.prompt_token_ids, 24)
    assert [c.num_cached > 0 for c in recs[0].batch] == [False, True, True]
    assert eng.stats().kv_blocks_used == 0
    with torch.no_grad():
        assert len({o.text for o in outs}) == 3
