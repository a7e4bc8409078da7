"""Greedy parity with transformers, token for token, on real SmolLM2 and a tiny random Llama."""
import weakref

import numpy as np
import pytest
import torch

import inferlab as il

PROMPTS = [
    "What is the capital of France?",
    [{"role": "user", "content": "Write a haiku about the sea."}],     # chat messages
    "The quick brown fox jumps over the lazy dog. " * 6,               # > 3 blocks of 16
    [42],                                                              # a single token
    "Once upon a time",
    "1, 2, 3, 4,",
    "def fibonacci(n):",
    "Paris is the city of",
]


# One reference per model and prompt: each backend's parity test (here, test_fused_forward,
# test_parity_shared_prefix) reads transformers' answer computed once per session.
_REFERENCE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def reference(hf, key, compute):
    """transformers' answer for ``key`` on the model ``hf``, computed once while ``hf`` lives."""
    done = _REFERENCE.setdefault(hf, {})
    if key not in done:
        done[key] = compute()
    return done[key]


def hf_greedy(hf, prompt_ids, n):
    def compute():
        ids = torch.tensor([prompt_ids])
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                          do_sample=False, eos_token_id=None, pad_token_id=0)
        return out[0, ids.shape[1]:].tolist()
    return list(reference(hf, ("greedy", tuple(prompt_ids), n), compute))


def check_parity(engine, hf, n=32):
    outs = engine.generate(PROMPTS, il.SamplingParams(max_tokens=n, ignore_eos=True),
                           use_tqdm=False)
    assert len({len(o.prompt_token_ids) for o in outs}) == len(PROMPTS)   # all lengths differ
    for o in outs:
        assert o.token_ids == hf_greedy(hf, o.prompt_token_ids, n), o.prompt
    assert engine.stats().kv_blocks_used == 0
    return outs


@pytest.mark.slow
@pytest.mark.parametrize("block_size, backend, linear", [
    (16, "auto", "numba"), (16, "auto", "numba+onednn-packed"), (16, "auto", "numba+onednn"),
    (16, "auto", "onednn"),
    (7, "reference", "torch")])
def test_smollm2_greedy_matches_transformers(smollm2, block_size, backend, linear):
    eng = il.Engine(block_size=block_size, attention_backend=backend, linear_backend=linear)
    assert eng.runner.linear_backend == linear
    outs = check_parity(eng, smollm2.hf_model)
    # a raw prompt (no chat template): the model answers, then runs on (ignore_eos)
    assert outs[0].text == ("\nassistant\nThe capital of France is Paris.\nsystem\n\nuser\n"
                            "I'm planning to launch a new product")


@pytest.mark.slow
@pytest.mark.parametrize("linear", ["torch", "onednn", "onednn-packed", "numba",
                                    "numba+onednn-packed"])
def test_smollm2_prefill_logits_match(smollm2, linear):
    eng = il.Engine(block_size=16, linear_backend=linear)
    ids = eng.tokenizer.encode("The quick brown fox jumps over the lazy dog. " * 6)
    with torch.no_grad():
        ref = reference(smollm2.hf_model, ("logits", tuple(ids)),
                        lambda: smollm2.hf_model(torch.tensor([ids])).logits[0])
    ours = eng.runner.prompt_logits(ids)
    assert (ref - ours).abs().max().item() < 1e-3


@pytest.mark.slow
def test_chat_answer_is_paris():
    eng = il.Engine()
    out = eng.generate([[{"role": "user", "content": "What is the capital of France?"}]],
                       il.SamplingParams(max_tokens=16), use_tqdm=False)[0]
    assert out.text == "The capital of France is Paris."
    assert out.finish_reason == "stop"


@pytest.mark.parametrize("backend", ["reference", "numba-cpu"])
@pytest.mark.parametrize("block_size", [16, 3])
@pytest.mark.parametrize("linear", ["torch", "onednn", "onednn-packed", "numba",
                                    "numba+onednn", "numba+onednn-packed"])
def test_tiny_greedy_matches_transformers(block_size, backend, linear):
    eng = il.Engine("tiny", block_size=block_size, num_blocks=256, attention_backend=backend,
                    linear_backend=linear)
    check_parity(eng, eng.loaded.hf_model, n=16)


@pytest.mark.parametrize("linear", ["torch", "onednn", "onednn-packed", "numba",
                                    "numba+onednn"])
def test_tiny_prefill_logits_match(linear):
    eng = il.Engine("tiny", num_blocks=64, linear_backend=linear)
    ids = list(range(100, 160))
    with torch.no_grad():
        ref = eng.loaded.hf_model(torch.tensor([ids])).logits[0]
    assert (ref - eng.runner.prompt_logits(ids)).abs().max().item() < 1e-4


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the numba-cuda "
                    "kernels are checked in the CUDA simulator by tests/test_kernels_cudasim.py)")
@pytest.mark.parametrize("backend", ["numba-cuda", "reference"])
def test_tiny_greedy_matches_transformers_on_gpu(backend):
    # tiny-d32: the numba-CUDA kernels take head_dim 32..128 ("tiny" has 16)
    eng = il.Engine("tiny-d32", device="cuda", block_size=16, num_blocks=256,
                    attention_backend=backend)
    outs = eng.generate([[5, 6, 7, 8], list(range(100, 150)), [42]],
                        il.SamplingParams(max_tokens=16, ignore_eos=True), use_tqdm=False)
    for o in outs:
        ids = torch.tensor([o.prompt_token_ids], device="cuda")
        ref = eng.loaded.hf_model.generate(ids, attention_mask=torch.ones_like(ids),
                                           max_new_tokens=16, do_sample=False,
                                           eos_token_id=None, pad_token_id=0)
        assert o.token_ids == ref[0, ids.shape[1]:].tolist()


def test_linear_backends_choose_and_refuse_clearly():
    from inferlab.model import linear, linear_choice
    gb = 1 << 30
    assert linear_choice.resolve("auto", "cpu", torch.float32, gb, 4 * gb) == "numba"
    assert linear_choice.resolve("auto", "cpu", torch.float32, gb, 2 * gb) == "numba+onednn"
    assert linear_choice.resolve("auto", "cpu", torch.bfloat16, gb, 4 * gb) in ("numba",
                                                                                "onednn-packed")
    assert linear_choice.resolve("auto", "cpu", torch.bfloat16, gb, 2 * gb) == "onednn"
    assert linear_choice.resolve("auto", "cuda", torch.float32, gb, 4 * gb) == "torch"
    assert linear_choice.resolve("auto", "cpu", torch.float16, gb, 4 * gb) == "torch"
    with pytest.raises(ValueError, match="CPU only"):
        linear_choice.resolve("onednn", "cuda", torch.float32, gb, 4 * gb)
    with pytest.raises(ValueError, match="float32"):
        linear_choice.resolve("numba+onednn", "cpu", torch.bfloat16, gb, 4 * gb)
    # the GEMV against F.linear, with a bias and a non-contiguous row
    w, b, x = torch.randn(300, 70), torch.randn(300), torch.randn(70, 2)[:, 0][None]
    assert torch.allclose(linear.gemv(x, w, b), torch.nn.functional.linear(x, w, b), atol=1e-5)
    with pytest.raises(il.InvalidInputError, match="linear_backend must be"):
        il.Engine("tiny", linear_backend="mkl")
    # engines sharing one cached model share one packed copy of each weight
    a = il.Engine("tiny", num_blocks=16, linear_backend="onednn-packed")
    b = il.Engine("tiny", num_blocks=16, linear_backend="onednn-packed")
    ma, mb = a.runner.model, b.runner.model
    for w in ("wqkv", "wo", "w_gate_up", "w_down"):
        pa = ma.linear.packed(getattr(ma.layers[0], w))
        assert pa is mb.linear.packed(getattr(mb.layers[0], w)) and pa.is_mkldnn
    assert ma.linear.packed(ma.lm_head) is mb.linear.packed(mb.lm_head) is not None
    # ... and the numba GEMM's panels likewise, apart from oneDNN's
    mc, md = (il.Engine("tiny", num_blocks=16, linear_backend="numba").runner.model
              for _ in range(2))
    pc = mc.linear.packed(mc.layers[0].wo)
    assert pc is md.linear.packed(md.layers[0].wo)
    assert isinstance(pc, np.ndarray) and pc is not ma.linear.packed(ma.layers[0].wo)


def test_a_shaped_random_model_is_built_in_its_dtype_and_matches_transformers():
    """Engine("random:<shape>") (what kernels/gpu_check.sh runs at 8B on a GPU): the shape
    of inferlab.core.shapes, made in the asked dtype, token ids only, greedy tokens equal to
    transformers' on the same weights; an unknown shape is named in the error."""
    from inferlab.core.shapes import ModelShape, model_shape
    eng = il.Engine("random:smollm2-135m", dtype="bfloat16", max_num_seqs=2, num_blocks=64)
    hf = eng.loaded.hf_model
    assert ModelShape.from_hf_config(hf.config, name="smollm2-135m") == \
        model_shape("smollm2-135m")
    assert {p.dtype for p in hf.parameters()} == {torch.bfloat16}
    assert eng.tokenizer is None
    prompt = list(range(300, 340))
    out = eng.generate([prompt], il.SamplingParams(max_tokens=8, ignore_eos=True),
                       use_tqdm=False)[0]
    assert out.token_ids == hf_greedy(hf, prompt, 8)
    with pytest.raises(il.InvalidInputError, match="unknown model shape 'no-such-model'"):
        il.Engine("random:no-such-model")


def test_building_a_random_model_leaves_the_callers_random_state_alone():
    """Its weights come from its own seed; the caller's CPU (and GPU) generators are as they
    were, and the same seed gives the same weights twice."""
    from inferlab.model import random_models
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    gpu_before = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    a = random_models.build("tiny", torch.float32, "cpu", seed=7)
    b = random_models.build("random:smollm2-135m", torch.bfloat16, "cpu", seed=7)
    assert torch.equal(torch.random.get_rng_state(), before)
    if gpu_before is not None:
        assert all(torch.equal(x, y) for x, y in zip(torch.cuda.get_rng_state_all(), gpu_before))
    again = random_models.build("tiny", torch.float32, "cpu", seed=7)
    assert torch.equal(a.model.embed_tokens.weight, again.model.embed_tokens.weight)
    assert b.model.embed_tokens.weight.dtype == torch.bfloat16
