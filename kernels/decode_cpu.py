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
rows of the weights), or over the numba GEMM's panels of 32 rows in a bfloat16 engine that
has them (see ``dot_unit``); attention is the numba CPU kernel's own ``attend_rows``. The readable
reference of the same step is ``LlamaForward.forward`` (inferlab/model/llama.py);
tests/test_fused_forward.py checks this pass against it and against transformers.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange
from numba.extending import overload

from .gemm_cpu import row_panel
from .half_cpu import f32, stored
from .numba_cpu import FASTMATH, LOCK, PARALLEL_MIN_BYTES, attend_rows
from .rows_cpu import rms_row


# Inside the one call a parallel region costs ~1 us (no Python, no dispatch), so attention goes
# over both cores from far less K/V than a kernel launched on its own (numba_cpu.py): the whole
# pass, A/B in one process (2026-12-04, AMD EPYC, 2 cores), parallel/serial at 10, 30, 100 and
# 300 tokens of context: bf16 0.99, 1.00, 0.97, 0.93; fp32 1.01, 0.99, 0.99, 0.97.
ONE_CALL_PARALLEL_MIN_BYTES = PARALLEL_MIN_BYTES // 8          # 32 KB with OpenMP


# ---- one matrix-vector product, a unit at a time: ``for p in prange(w.shape[0])`` ---------------
# A matrix comes as its plain rows [N, K] (float32, or bfloat16 bits widened as they stream in)
# or, from a bfloat16 engine on the numba GEMM, as that GEMM's panels [ceil(N / 32), K / 2, 64]
# (gemm_cpu.py): then x is rounded to bf16 once and each unit is a panel of 32 outputs through
# the GEMM's AVX512-BF16 one-row tile, and the plain weights are never read (nor kept resident).

def in_features(w):
    """K of a matrix given as plain rows or as bf16 panels. numba only."""
    raise NotImplementedError("in_features runs only inside numba-compiled code")


@overload(in_features)
def _in_features(w):
    if w.ndim == 2:
        return lambda w: w.shape[1]
    return lambda w: 2 * w.shape[1]


def rounded_for(w, x, xb):
    """``x`` rounded into the bf16 bits ``xb`` when ``w`` is panels (else nothing). numba only."""
    raise NotImplementedError("rounded_for runs only inside numba-compiled code")


@overload(rounded_for)
def _rounded_for(w, x, xb):
    if w.ndim == 2:
        return lambda w, x, xb: None

    def to_bf16(w, x, xb):
        for j in range(x.shape[0]):
            xb[j] = stored(x[j], xb)
    return to_bf16


def dot_unit(w, p, x, xb, out):
    """Unit ``p`` of ``out = w @ x``: row p (plain) or panel p, 32 outputs (panels, read
    with ``xb``, x's bf16 bits). numba only."""
    raise NotImplementedError("dot_unit runs only inside numba-compiled code")


@overload(dot_unit, jit_options={"fastmath": FASTMATH})
def _dot_unit(w, p, x, xb, out):
    if w.ndim == 2:
        def row(w, p, x, xb, out):
            acc = np.float32(0.0)
            for j in range(x.shape[0]):
                acc += f32(w[p, j]) * x[j]
            out[p] = acc
        return row

    def panel(w, p, x, xb, out):
        row_panel(xb, w, p, out)
    return panel


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def _decode_pass(token, pos, table, embed, in_norm, wqkv, bqkv, wo, post_norm, wgu, wdown,
                 final_norm, lm_head, inv_freq, rope_scale, eps, scale, num_heads,
                 k_cache, v_cache, attend_parallel, logits):
    hidden = embed.shape[1]
    bs, kvh_n, d_n = k_cache.shape[2], k_cache.shape[3], k_cache.shape[4]
    group = num_heads // kvh_n
    n_qkv = (num_heads + 2 * kvh_n) * d_n
    inter = in_features(wdown[0])
    half = d_n // 2
    x = np.empty(hidden, np.float32)                         # [hidden] the residual stream
    for j in range(hidden):
        x[j] = f32(embed[token, j])
    h = np.empty(hidden, np.float32)                         # [hidden] normed input
    y = np.empty(hidden, np.float32)                         # [hidden] a projection's output
    qkv = np.empty(n_qkv, np.float32)                        # [(H + 2 KVH) * D]
    q = np.empty((1, num_heads, d_n), np.float32)            # [1, H, D]
    o = np.empty((1, num_heads, d_n), np.float32)            # [1, H, D]
    gu = np.empty(2 * inter, np.float32)                     # [gate | up]
    act = np.empty(inter, np.float32)                        # [intermediate]
    xb = np.empty(max(hidden, num_heads * d_n, inter), np.uint16)   # an input's bf16 bits
    cos = np.empty(half, np.float32)
    sin = np.empty(half, np.float32)
    for j in range(half):
        f = np.float32(pos) * inv_freq[j]
        cos[j] = np.cos(f) * rope_scale
        sin[j] = np.sin(f) * rope_scale
    blk, off = table[pos // bs], pos % bs
    hb = xb[:hidden]
    for li in range(len(wqkv)):
        rms_row(x, in_norm[li], eps, h)
        w = wqkv[li]
        rounded_for(w, h, hb)
        for p in prange(w.shape[0]):
            dot_unit(w, p, h, hb, qkv)
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
        ob = xb[:of.shape[0]]
        w = wo[li]
        rounded_for(w, of, ob)
        for p in prange(w.shape[0]):
            dot_unit(w, p, of, ob, y)
        for i in range(hidden):
            x[i] += y[i]
        rms_row(x, post_norm[li], eps, h)
        w = wgu[li]                                           # [gate; up] rows
        rounded_for(w, h, hb)
        for p in prange(w.shape[0]):
            dot_unit(w, p, h, hb, gu)
        for i in prange(inter):
            g = gu[i]
            act[i] = g / (np.float32(1.0) + np.exp(-g)) * gu[inter + i]
        ab = xb[:inter]
        w = wdown[li]
        rounded_for(w, act, ab)
        for p in prange(w.shape[0]):
            dot_unit(w, p, act, ab, y)
        for i in range(hidden):
            x[i] += y[i]
    rms_row(x, final_norm, eps, h)
    rounded_for(lm_head, h, hb)
    for p in prange(lm_head.shape[0]):
        dot_unit(lm_head, p, h, hb, logits)


def decode_pass(token: int, pos: int, table, weights: tuple, k_cache, v_cache, logits) -> None:
    """Logits of ``token`` at position ``pos`` into ``logits`` [vocab], its K/V into the caches
    [layers, blocks, bs, KVH, D] at the slot ``table`` [max_blocks] int32 gives ``pos``.

    ``weights`` = (embed [V, hidden], then per layer as tuples of arrays: input norms, fused
    qkv [(H + 2 KVH) D, hidden], qkv biases (empty without), o, post norms, fused gate|up,
    down; then the final norm, lm_head [V, hidden], rotary inv_freq [D/2], rotary scaling,
    rms eps, attention scale, num_heads), float32 numpy; or in bfloat16: the matrices (embed,
    qkv, o, gate|up, down, lm_head) and the caches as their uint16 bits, widened to float32
    as they are read (a step streams half the bytes), norms, biases and inv_freq float32;
    activations and sums stay float32, K and V are rounded to bfloat16 as stored. A bfloat16
    engine on the numba GEMM passes its matrices (not the embedding) as that GEMM's panels
    instead: each input is rounded to bf16 and multiplied by AVX512-BF16 dot products."""
    kv_bytes = (pos + 1) * 2 * k_cache.shape[-2] * k_cache.shape[-1] * k_cache.itemsize
    (embed, in_norm, wqkv, bqkv, wo, post_norm, wgu, wdown, norm, lm_head, inv_freq,
     rope, eps, scale, heads) = weights
    with LOCK:                                            # one parallel launch at a time
        _decode_pass(token, pos, table, embed, in_norm, wqkv, bqkv, wo, post_norm, wgu, wdown,
                     norm, lm_head, inv_freq, np.float32(rope), np.float32(eps),
                     np.float32(scale), heads, k_cache, v_cache,
                     kv_bytes >= ONE_CALL_PARALLEL_MIN_BYTES, logits)
