"""Paged attention through torch's ``scaled_dot_product_attention``, one sequence at a time:
its K/V gathered out of the paged cache, the causal mask aligned to its last key (a chunk that
starts after cached tokens sees them all).

For long prompt chunks it beats the numba prefill kernel: 512 new tokens 5.3 ms per layer
against 13.9, 2048: 48-80 vs 156 ms; at 64 tokens both take ~0.12 ms a sequence (BENCHMARKS.md,
"Speed, round 2"). The fast forward (inferlab/model/fused.py) uses it from
``inferlab.kernels.SDPA_MIN_TOKENS`` new tokens of one sequence in a step. Same arguments and result as the other backends'
``paged_attention_prefill`` (reference.py documents the shapes).
"""
from __future__ import annotations

import torch

from inferlab.core.shapes import cdiv


def paged_attention_sdpa(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc,
                         scale: float):
    """q [T, H, D] packed new tokens -> [T, H, D]; caches [blocks, bs, KVH, D]."""
    out = torch.empty_like(q)                                      # [T, H, D]
    bs = k_cache.shape[1]
    starts, lens = query_start_loc.tolist(), seq_lens.tolist()
    for s, n in enumerate(lens):
        q0, q1 = starts[s], starts[s + 1]
        blocks = block_tables[s, :cdiv(n, bs)].long()
        # [1, heads, tokens, D], contiguous: what SDPA's fused CPU kernel takes
        # (in q's dtype: a bf16 cache under float32 activations is widened, exactly)
        k = k_cache[blocks].flatten(0, 1)[:n].transpose(0, 1).unsqueeze(0).to(q.dtype).contiguous()
        v = v_cache[blocks].flatten(0, 1)[:n].transpose(0, 1).unsqueeze(0).to(q.dtype).contiguous()
        rows = q1 - q0
        causal = rows == n                          # the whole sequence is new: plain causal
        mask = None if causal or rows == 1 else (
            torch.arange(n)[None, :] <= torch.arange(n - rows, n)[:, None])   # [rows, n]
        o = torch.nn.functional.scaled_dot_product_attention(
            q[q0:q1].transpose(0, 1).unsqueeze(0).contiguous(), k, v, attn_mask=mask,
            is_causal=causal and rows > 1, scale=scale, enable_gqa=True)   # [1, H, rows, D]
        out[q0:q1] = o[0].transpose(0, 1)
    return out
