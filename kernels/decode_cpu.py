"""One sequence decoding one token: the whole forward pass of a Llama-family model as one
numba call.

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
reference of the same step is ``LlamaForward.forward`` (inferlab/model/llama.py);
tests/test_fused_forward.py checks this pass against it and against transformers.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .half_cpu import f32, stored
from .numba_cpu import FASTMATH, LOCK, PARALLEL_MIN_BYTES, attend_rows
from .rows_cpu import rms_row


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def _decode_pass(token, pos, table, embed, in_norm, wqkv, bqkv, wo, post_norm, wgu, wdown,
            final_norm, lm_head, inv_freq, rope_scale, eps, scale, num_heads,
            k_cache, v_cache, attend_parallel, logits):
    hidden = embed.shape[1]
    bs, kvh_n, d_n = k_cache.shape[2], k_cache.shape[3], k_cache.shape[4]
    group = num_heads // kvh_n
    n_qkv = (num_heads + 2 * kvh_n) * d_n
    inter = wdown[0].shape[1]
    half = d_n // 2
    x = np.empty(hidden, np.float32)                         # [hidden] the residual stream
    for j in range(hidden):
        x[j] = f32(embed[token, j])
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
                acc += f32(w[i, j]) * h[j]
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
                kc[blk, off, head, j] = stored(qkv[(num_heads + head) * d_n + j], kc)
                vc[blk, off, head, j] = stored(qkv[(num_heads + kvh_n + head) * d_n + j], vc)
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
                acc += f32(w[i, j]) * of[j]
            x[i] += acc
        rms_row(x, post_norm[li], eps, h)
        w = wgu[li]                                           # [gate; up] rows
        for i in prange(inter):
            g = np.float32(0.0)
            u = np.float32(0.0)
            for j in range(hidden):
                g += f32(w[i, j]) * h[j]
                u += f32(w[inter + i, j]) * h[j]
            act[i] = g / (np.float32(1.0) + np.exp(-g)) * u
        w = wdown[li]
        for i in prange(hidden):
            acc = np.float32(0.0)
            for j in range(inter):
                acc += f32(w[i, j]) * act[j]
            x[i] += acc
    rms_row(x, final_norm, eps, h)
    for i in prange(lm_head.shape[0]):
        acc = np.float32(0.0)
        for j in range(hidden):
            acc += f32(lm_head[i, j]) * h[j]
        logits[i] = acc


def decode_pass(token: int, pos: int, table, weights: tuple, k_cache, v_cache, logits) -> None:
    """Logits of ``token`` at position ``pos`` into ``logits`` [vocab], its K/V into the caches
    [layers, blocks, bs, KVH, D] at the slot ``table`` [max_blocks] int32 gives ``pos``.

    ``weights`` = (embed [V, hidden], then per layer as tuples of arrays: input norms, fused
    qkv [(H + 2 KVH) D, hidden], qkv biases (empty without), o, post norms, fused gate|up,
    down; then the final norm, lm_head [V, hidden], rotary inv_freq [D/2], rotary scaling,
    rms eps, attention scale, num_heads), float32 numpy; or in bfloat16: the matrices (embed,
    qkv, o, gate|up, down, lm_head) and the caches as their uint16 bits, widened to float32
    as they are read (a step streams half the bytes), norms, biases and inv_freq float32;
    activations and sums stay float32, K and V are rounded to bfloat16 as stored."""
    kv_bytes = (pos + 1) * 2 * k_cache.shape[-2] * k_cache.shape[-1] * k_cache.itemsize
    (embed, in_norm, wqkv, bqkv, wo, post_norm, wgu, wdown, norm, lm_head, inv_freq,
     rope, eps, scale, heads) = weights
    with LOCK:                                            # one parallel launch at a time
        _decode_pass(token, pos, table, embed, in_norm, wqkv, bqkv, wo, post_norm, wgu, wdown,
                     norm, lm_head, inv_freq, np.float32(rope), np.float32(eps),
                     np.float32(scale), heads, k_cache, v_cache,
                     kv_bytes >= PARALLEL_MIN_BYTES, logits)
