"""One sequence decoding one token: the whole forward pass as a single numba call.

At batch 1 a step reads every weight once (~0.54 GB for SmolLM2 in fp32) and does almost no
arithmetic, so its floor is weight bytes / memory bandwidth. Run op by op from Python, the
~20 small tensor ops per layer (norms, rotary, residual adds, SiLU, KV write, dispatch of each
GEMV) cost ~5 ms on top of that floor (``inferlab bench roofline``'s "other forward"). Here
the same formulas run inside one compiled function:

    for each layer:  h = rms_norm(x)            qkv = Wqkv @ h (+ b)     rotary on q and k
                     write k, v into the step's cache slot               o = attention(q)
                     x += Wo @ o                 h = rms_norm(x)
                     a = silu(Wgate @ h) * (Wup @ h)                     x += Wdown @ a
    logits = lm_head @ rms_norm(x)

Each matrix-vector product is a ``prange`` over output rows (every core streams its own
rows of the weights); attention is the numba CPU kernel's own ``attend_rows``. The readable
reference of the same step is ``LlamaForward.forward`` (model/llama.py);
tests/test_fused_forward.py checks this path against it and against transformers.

Used when the linear backend is a numba one (``numba``, ``numba+...``), the attention
backend is ``numba-cpu``, the model is float32 on the CPU, and the step is one sequence
decoding one token.
"""
from __future__ import annotations

import numpy as np
import torch
from numba import njit, prange

from inferlab.kernels.numba_cpu import FASTMATH, LOCK, PARALLEL_MIN_BYTES, attend_rows

from .fused_ops import rms_row


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def forward(token, pos, table, embed, in_norm, wqkv, bqkv, wo, post_norm, wgu, wdown,
            final_norm, lm_head, inv_freq, rope_scale, eps, scale, num_heads,
            k_cache, v_cache, attend_parallel, logits):
    hidden = embed.shape[1]
    bs, kvh_n, d_n = k_cache.shape[2], k_cache.shape[3], k_cache.shape[4]
    group = num_heads // kvh_n
    n_qkv = (num_heads + 2 * kvh_n) * d_n
    inter = wdown[0].shape[1]
    half = d_n // 2
    x = embed[token].copy()                                  # [hidden] the residual stream
    h = np.empty(hidden, np.float32)                         # [hidden] normed input
    qkv = np.empty(n_qkv, np.float32)                        # [(H + 2 KVH) * D]
    q = np.empty((1, num_heads, d_n), np.float32)            # [1, H, D]
    o = np.empty((1, num_heads, d_n), np.float32)            # [1, H, D]
    act = np.empty(inter, np.float32)                        # [intermediate]
    cos = np.empty(half, np.float32)
    sin = np.empty(half, np.float32)
    for j in range(half):
        f = np.float32(pos) * inv_freq[j]
        cos[j] = np.cos(f) * rope_scale
        sin[j] = np.sin(f) * rope_scale
    blk, off = table[pos // bs], pos % bs
    for li in range(len(wqkv)):
        rms_row(x, in_norm[li], eps, h)
        w = wqkv[li]
        for i in prange(n_qkv):
            acc = np.float32(0.0)
            for j in range(hidden):
                acc += w[i, j] * h[j]
            qkv[i] = acc
        b = bqkv[li]
        for i in range(b.shape[0]):
            qkv[i] += b[i]
        for head in range(num_heads + kvh_n):                 # rotary on q and k heads
            base = head * d_n
            for j in range(half):
                a, c = qkv[base + j], qkv[base + half + j]
                qkv[base + j] = a * cos[j] - c * sin[j]
                qkv[base + half + j] = c * cos[j] + a * sin[j]
        for head in range(num_heads):
            for j in range(d_n):
                q[0, head, j] = qkv[head * d_n + j]
        kc, vc = k_cache[li], v_cache[li]                     # [blocks, bs, KVH, D]
        for head in range(kvh_n):
            for j in range(d_n):
                kc[blk, off, head, j] = qkv[(num_heads + head) * d_n + j]
                vc[blk, off, head, j] = qkv[(num_heads + kvh_n + head) * d_n + j]
        if attend_parallel:
            for head in prange(kvh_n):
                attend_rows(q, kc, vc, table, 0, 1, pos, head, group, scale, o)
        else:
            for head in range(kvh_n):
                attend_rows(q, kc, vc, table, 0, 1, pos, head, group, scale, o)
        of = o.reshape(num_heads * d_n)
        w = wo[li]
        for i in prange(hidden):
            acc = np.float32(0.0)
            for j in range(of.shape[0]):
                acc += w[i, j] * of[j]
            x[i] += acc
        rms_row(x, post_norm[li], eps, h)
        w = wgu[li]                                           # [gate; up] rows
        for i in prange(inter):
            g = np.float32(0.0)
            u = np.float32(0.0)
            for j in range(hidden):
                g += w[i, j] * h[j]
                u += w[inter + i, j] * h[j]
            act[i] = g / (np.float32(1.0) + np.exp(-g)) * u
        w = wdown[li]
        for i in prange(hidden):
            acc = np.float32(0.0)
            for j in range(inter):
                acc += w[i, j] * act[j]
            x[i] += acc
    rms_row(x, final_norm, eps, h)
    for i in prange(lm_head.shape[0]):
        acc = np.float32(0.0)
        for j in range(hidden):
            acc += lm_head[i, j] * h[j]
        logits[i] = acc


class FusedDecode:
    """The fused one-token forward over a LlamaForward's own weights (no copies)."""

    def __init__(self, fwd):
        def stack(tensors):   # a tuple of arrays: numba types it once (a typed List would
            return tuple(t.detach().contiguous().numpy() for t in tensors)   # not cache)

        layers = fwd.layers
        no_bias = torch.zeros(0, dtype=torch.float32)
        self._args = (fwd.embed.numpy(), stack(w.input_norm for w in layers),
                      stack(w.wqkv for w in layers),
                      stack(w.bqkv if w.bqkv is not None else no_bias for w in layers),
                      stack(w.wo for w in layers), stack(w.post_norm for w in layers),
                      stack(w.w_gate_up for w in layers), stack(w.w_down for w in layers),
                      fwd.norm.numpy(), fwd.lm_head.numpy(), fwd.inv_freq.numpy(),
                      np.float32(fwd.rope_scaling), np.float32(fwd.eps),
                      np.float32(fwd.scale), fwd.num_heads)
        self.vocab = fwd.lm_head.shape[0]

    def __call__(self, token: int, pos: int, table, k_cache, v_cache) -> torch.Tensor:
        """Logits [1, vocab] of ``token`` at position ``pos`` of the sequence whose block table
        is ``table`` [max_blocks] int32; writes its K/V into the caches [L, blocks, bs, KVH, D]."""
        (embed, in_norm, wqkv, bqkv, wo, post_norm, wgu, wdown, norm, lm_head, inv_freq,
         rope, eps, scale, heads) = self._args
        logits = torch.empty((1, self.vocab), dtype=torch.float32)
        kv_bytes = (pos + 1) * 2 * k_cache.shape[-2] * k_cache.shape[-1] * 4     # K+V read
        with LOCK:
            forward(token, pos, table, embed, in_norm, wqkv, bqkv, wo, post_norm, wgu, wdown,
                      norm, lm_head, inv_freq, rope, eps, scale, heads,
                      k_cache.numpy(), v_cache.numpy(), kv_bytes >= PARALLEL_MIN_BYTES,
                      logits[0].numpy())
        return logits
