"""The fused one-token forward (model/fused_decode.py) against the op-by-op forward it replaces
(model/llama.py), on the same weights and the same paged cache: logits, the K/V it writes, and
greedy tokens against transformers when every decode step runs fused (one sequence at a time)."""
import pytest
import torch

import inferlab as il
from inferlab.core.shapes import cdiv
from inferlab.model.llama import AttentionMetadata, LlamaForward

from test_parity import check_parity


def _meta(table, start, n, bs):
    return AttentionMetadata(
        slot_mapping=torch.tensor([table[p // bs] * bs + p % bs for p in range(start, start + n)]),
        block_tables=torch.tensor([table], dtype=torch.int32),
        seq_lens=torch.tensor([start + n], dtype=torch.int32),
        query_start_loc=torch.tensor([0, n], dtype=torch.int32),
        decode_only=n == 1, backend="numba-cpu")


def fused_vs_per_op(fwd: LlamaForward, ids, block_size=16):
    """Prefill ids[:-1], then decode ids[-1] both ways; (logits, K, V) of each way."""
    n = len(ids)
    shape = (fwd.num_layers, cdiv(n, block_size) + 2, block_size, fwd.num_kv_heads, fwd.head_dim)
    kc, vc = torch.zeros(shape), torch.zeros(shape)
    table = list(range(shape[1] - 1, 0, -1))[: cdiv(n, block_size)]   # not in block order
    if n > 1:
        fwd.forward(torch.tensor(ids[:-1]), torch.arange(n - 1), _meta(table, 0, n - 1, block_size),
                    kc, vc, torch.tensor([n - 2]))
    slot = table[(n - 1) // block_size], (n - 1) % block_size
    results = []
    for fused in (True, False):
        fwd.fusable = fused
        logits = fwd.forward(torch.tensor(ids[-1:]), torch.tensor([n - 1]),
                             _meta(table, n - 1, 1, block_size), kc, vc, torch.tensor([0]))
        results.append((logits, kc[:, slot[0], slot[1]].clone(), vc[:, slot[0], slot[1]].clone()))
        kc[:, slot[0], slot[1]] = 0.0
        vc[:, slot[0], slot[1]] = 0.0
    fwd.fusable = True
    return results


def assert_close(results, tol):
    (lf, kf, vf), (lr, kr, vr) = results
    assert lf.shape == lr.shape == (1, lr.shape[1])
    assert (lf - lr).abs().max().item() < tol
    assert (kf - kr).abs().max().item() < tol and kf.abs().max() > 0    # rotary on k as well
    assert (vf - vr).abs().max().item() < tol and vf.abs().max() > 0
    assert lf.argmax() == lr.argmax()


@pytest.mark.parametrize("n, block_size", [(1, 16), (5, 3), (16, 16), (17, 16), (40, 3)])
def test_tiny_llama_fused_matches_per_op(n, block_size):
    eng = il.Engine("tiny", num_blocks=8, linear_backend="numba+onednn")
    ids = [(7 * i + 3) % eng.vocab_size for i in range(n)]
    assert_close(fused_vs_per_op(eng.runner.model, ids, block_size), 1e-4)


def test_qwen2_biases_and_tied_shapes_fused_match_per_op():
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=256)
    hf = Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():                        # random biases (transformers starts them at 0)
        for layer in hf.model.layers:
            for p in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                p.bias.normal_(0, 0.5)
    fwd = LlamaForward(hf, "numba+onednn")
    assert fwd.layers[0].bqkv is not None
    assert_close(fused_vs_per_op(fwd, list(range(10, 50)), 4), 1e-4)


def test_fused_only_where_it_applies():
    """The op-by-op path runs for other linear/attention backends and for more than one row."""
    for linear, fusable in (("numba+onednn", True), ("onednn", False), ("torch", False)):
        assert il.Engine("tiny", num_blocks=8, linear_backend=linear).runner.model.fusable is fusable
    eng = il.Engine("tiny", num_blocks=8, attention_backend="reference",
                    linear_backend="numba+onednn")
    eng.generate([[5, 6, 7]], il.SamplingParams(max_tokens=4), use_tqdm=False)
    assert eng.runner.model._fused is None                   # reference attention: not fused


@pytest.mark.parametrize("block_size", [16, 3])
def test_tiny_one_at_a_time_greedy_matches_transformers(block_size):
    eng = il.Engine("tiny", block_size=block_size, num_blocks=256, max_num_seqs=1,
                    linear_backend="numba+onednn")
    check_parity(eng, eng.loaded.hf_model, n=16)
    assert eng.runner.model._fused is not None                 # every decode step ran fused


@pytest.mark.slow
def test_smollm2_long_context_fused_matches_per_op(smollm2):
    """~800 cached tokens: attention runs over both cores inside the fused call."""
    eng = il.Engine(block_size=16, linear_backend="numba+onednn")
    ids = eng.tokenizer.encode("The quick brown fox jumps over the lazy dog. " * 80)[:800]
    assert_close(fused_vs_per_op(eng.runner.model, ids), 1e-3)


@pytest.mark.slow
def test_smollm2_one_at_a_time_greedy_matches_transformers(smollm2):
    eng = il.Engine(block_size=16, max_num_seqs=1, linear_backend="numba+onednn-packed")
    check_parity(eng, smollm2.hf_model)
    assert eng.runner.model._fused is not None
