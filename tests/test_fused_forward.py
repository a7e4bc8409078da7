"""The fast forward (model/fused.py: one decoding sequence as one numba call, more rows with
the small ops fused) against the op-by-op forward it replaces (model/llama.py), on the same
weights and the same paged cache: logits, the K/V each writes, and greedy tokens against
transformers."""
import contextlib
import itertools

import pytest
import torch

import inferlab as il
from inferlab.core.shapes import cdiv
from inferlab.model.fused import FusedForward
from inferlab.model import weights
from inferlab.model.llama import AttentionMetadata, LlamaForward, attention

from test_parity import check_parity


def _meta(tables, starts, counts, bs):
    slots = [t[p // bs] * bs + p % bs for t, s, n in zip(tables, starts, counts)
             for p in range(s, s + n)]
    width = max(len(t) for t in tables)
    return AttentionMetadata(
        slot_mapping=torch.tensor(slots),
        block_tables=torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int32),
        seq_lens=torch.tensor([s + n for s, n in zip(starts, counts)], dtype=torch.int32),
        query_start_loc=torch.tensor([0] + list(itertools.accumulate(counts)), dtype=torch.int32),
        decode_only=all(n == 1 for n in counts), backend="numba-cpu")


def fused_vs_per_op(fwd: LlamaForward, seqs, block_size=16):
    """Each (ids, cached) of ``seqs``: its first ``cached`` tokens go into the paged cache first
    (op by op), then one step runs the rest of every sequence together, fused and op by op.
    Returns (logits of each sequence's last token, K and V written by the step) of each way."""
    need = [cdiv(len(ids), block_size) for ids, _ in seqs]
    nb = sum(need) + 2
    shape = (fwd.num_layers, nb, block_size, fwd.num_kv_heads, fwd.head_dim)
    kc, vc = torch.zeros(shape), torch.zeros(shape)
    free = list(range(nb - 1, 0, -1))                        # not in block order
    tables = [[free.pop() if i % 2 else free.pop(0) for i in range(n)] for n in need]
    for (ids, cached), table in zip(seqs, tables):
        if cached:
            fwd.forward(torch.tensor(ids[:cached]), torch.arange(cached),
                        _meta([table], [0], [cached], block_size), kc, vc, torch.tensor([0]))
    ids = torch.tensor([t for s, c in seqs for t in s[c:]])
    pos = torch.tensor([p for s, c in seqs for p in range(c, len(s))])
    meta = _meta(tables, [c for _, c in seqs], [len(s) - c for s, c in seqs], block_size)
    last = meta.query_start_loc[1:].long() - 1
    written = meta.slot_mapping
    results = []
    for forward in (FusedForward(fwd), fwd.forward):
        logits = forward(ids, pos, meta, kc, vc, last)
        k = kc.transpose(0, 1).reshape(nb * block_size, fwd.num_layers, -1)[written].clone()
        v = vc.transpose(0, 1).reshape(nb * block_size, fwd.num_layers, -1)[written].clone()
        results.append((logits, k, v))
    return results


def assert_close(results, tol):
    (lf, kf, vf), (lr, kr, vr) = results
    assert lf.shape == lr.shape
    assert (lf - lr).abs().max().item() < tol
    assert (kf - kr).abs().max().item() < tol and kf.abs().max() > 0    # rotary on k as well
    assert (vf - vr).abs().max().item() < tol and vf.abs().max() > 0
    assert torch.equal(lf.argmax(-1), lr.argmax(-1))


@pytest.mark.parametrize("n, block_size", [(1, 16), (5, 3), (16, 16), (17, 16), (40, 3)])
def test_tiny_llama_fused_matches_per_op(n, block_size):
    eng = il.Engine("tiny", num_blocks=8, linear_backend="numba+onednn")
    ids = [(7 * i + 3) % eng.vocab_size for i in range(n)]
    assert_close(fused_vs_per_op(eng.runner.model, [(ids, n - 1)], block_size), 1e-4)


@pytest.mark.parametrize("block_size", [16, 3])
@pytest.mark.parametrize("lens", [
    [(20, 0)], [(20, 0), (7, 0), (33, 0)],              # prefill: one prompt, three prompts
    [(13, 12), (31, 30), (5, 4), (41, 40)],              # four sequences decoding
    [(40, 39), (21, 0), (35, 20)],                       # mixed: decoding, a prompt, a 2nd chunk
    [(300, 0), (40, 39), (400, 100), (9, 0)],            # a chunk >= SDPA_MIN_TOKENS: torch SDPA
], ids=["prefill", "prefill-3", "decode-4", "mixed", "long-chunks"])
def test_tiny_llama_fused_rows_match_per_op(block_size, lens):
    eng = il.Engine("tiny", num_blocks=8, linear_backend="numba+onednn")
    seqs = [([(11 * i + 7 * s) % eng.vocab_size for i in range(n)], c)
            for s, (n, c) in enumerate(lens)]
    assert_close(fused_vs_per_op(eng.runner.model, seqs, block_size), 1e-4)


def test_long_chunks_take_torchs_sdpa_and_short_ones_do_not(monkeypatch):
    from inferlab import kernels
    calls = []
    real = kernels.paged_attention_sdpa
    monkeypatch.setattr(kernels, "paged_attention_sdpa",
                        lambda *a: calls.append(1) or real(*a))
    eng = il.Engine("tiny", num_blocks=64, linear_backend="numba+onednn")
    eng.runner.prompt_logits(list(range(3, 3 + kernels.SDPA_MIN_TOKENS - 1)))
    assert not calls
    eng.runner.prompt_logits(list(range(3, 3 + kernels.SDPA_MIN_TOKENS)))
    assert len(calls) == eng.runner.model.num_layers


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
    fwd = LlamaForward(weights.from_hf(hf), "numba+onednn")
    assert fwd.layers[0].bqkv is not None
    assert_close(fused_vs_per_op(fwd, [(list(range(10, 50)), 39)], 4), 1e-4)
    assert_close(fused_vs_per_op(fwd, [(list(range(10, 50)), 30), (list(range(60, 70)), 0)], 4),
                 1e-4)


def test_fused_only_where_it_applies():
    """The op-by-op path runs for the other linear backends and for reference attention."""
    for linear, fusable in (("numba", True), ("numba+onednn", True), ("onednn", False),
                            ("torch", False)):
        eng = il.Engine("tiny", num_blocks=8, linear_backend=linear)
        assert eng.runner.plan.fused is fusable and eng.runner.plan.path == (
            "fused" if fusable else "reference")
    eng = il.Engine("tiny", num_blocks=8, attention_backend="reference",
                    linear_backend="numba+onednn")
    eng.generate([[5, 6, 7]], il.SamplingParams(max_tokens=4), use_tqdm=False)
    assert not eng.runner.plan.fused_available               # reference attention: not fused
    with pytest.raises(il.InvalidInputError, match="fused forward needs"):
        eng.runner.use_path("fused")


def test_the_path_is_chosen_once_and_switches_only_on_request():
    eng = il.Engine("tiny", num_blocks=64, linear_backend="numba")
    meta = AttentionMetadata(torch.zeros(300, dtype=torch.int64),
                             torch.zeros((1, 19), dtype=torch.int32),
                             torch.tensor([300], dtype=torch.int32),
                             torch.tensor([0, 300], dtype=torch.int32), False, "numba-cpu")
    assert eng.runner.attention_for(meta) is not attention          # SDPA for a long chunk
    eng.runner.use_path("reference")
    assert eng.runner.plan.path == "reference" and eng.runner.attention_for(meta) is attention
    ref = eng.generate([[5, 6, 7]], il.SamplingParams(max_tokens=6), use_tqdm=False)[0]
    eng.runner.use_path("fused")
    assert eng.generate([[5, 6, 7]], il.SamplingParams(max_tokens=6),
                        use_tqdm=False)[0].token_ids == ref.token_ids


@pytest.mark.parametrize("block_size", [16, 3])
def test_tiny_one_at_a_time_greedy_matches_transformers(block_size):
    eng = il.Engine("tiny", block_size=block_size, num_blocks=256, max_num_seqs=1,
                    linear_backend="numba+onednn")
    parts = []
    with eng.runner.timing(lambda part: parts.append(part) or contextlib.nullcontext()):
        check_parity(eng, eng.loaded.hf_model, n=16)
    assert "one-call decode" in parts                         # decode steps ran as one call


@pytest.mark.slow
def test_smollm2_long_context_fused_matches_per_op(smollm2):
    """~800 cached tokens: attention runs over both cores inside the fused call."""
    eng = il.Engine(block_size=16, linear_backend="numba+onednn")
    ids = eng.tokenizer.encode("The quick brown fox jumps over the lazy dog. " * 80)[:800]
    assert_close(fused_vs_per_op(eng.runner.model, [(ids, 799)]), 1e-3)
    assert_close(fused_vs_per_op(eng.runner.model, [(ids, 700), (ids[:300], 299)]), 1e-3)


@pytest.mark.slow
def test_smollm2_one_at_a_time_greedy_matches_transformers(smollm2):
    eng = il.Engine(block_size=16, max_num_seqs=1, linear_backend="numba+onednn-packed")
    assert eng.runner.plan.fused
    check_parity(eng, smollm2.hf_model)


@pytest.mark.full("tests/test_engine_files.py::"
                   "test_a_new_cpu_says_it_compiles_once_then_every_kernel_is_cached[float32]")
@pytest.mark.slow
def test_fused_kernels_load_from_numbas_cache_in_a_new_process(tmp_path):
    """The second process finds every compiled kernel on disk (a jitted closure that calls
    another misses numba's cache and recompiles in every process: +10 s per Engine())."""
    import os
    import subprocess
    import sys
    code = ("import inferlab as il\n"
            "e = il.Engine('tiny', num_blocks=64, linear_backend='numba+onednn')\n"
            "e.generate([[5, 6, 7], [9]], il.SamplingParams(max_tokens=3), use_tqdm=False)\n"
            "e = il.Engine('tiny', num_blocks=64, max_num_seqs=1, linear_backend='numba+onednn')\n"
            "e.generate([[5, 6, 7]], il.SamplingParams(max_tokens=3), use_tqdm=False)\n")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), "NUMBA_DEBUG_CACHE": "1"}
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                           timeout=600) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-2000:]
    saved = lambda r: sorted({line.split("'")[1].rsplit("/", 1)[-1].split(".py")[0]
                              for line in r.stdout.splitlines() if "data saved" in line})
    # the first process compiles them (in its precompile workers: model/precompile.py) into
    # the cache directory; the second one finds every kernel there and compiles nothing
    first = " ".join(sorted(p.name for p in tmp_path.rglob("*.nbi")))
    assert "decode_cpu._decode_pass" in first and "rows_cpu._add_rms_rows" in first, first
    assert saved(runs[1]) == [], saved(runs[1])                   # nothing compiled again
