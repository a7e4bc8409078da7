"""Numba CPU kernels for the small ops between a layer's GEMMs, each over all rows at once.

At 32 decoding sequences a step spent ~14 ms (beside ~55 ms of GEMMs) in ~20 small torch ops
per layer: norms, rotary, the KV write, SiLU, residual adds, each a dispatch and a pass over
memory. Here each group is one numba call over all rows, its rows split over the cores (SiLU
uses the attention kernels' vectorised ``exp_inplace``: numba's scalar exp is ~5x slower than
torch's). With OpenMP's threads a parallel launch costs microseconds, so even 32 rows split.

    rms_rows(x, w, eps, out)                 out[t] = rms_norm(x[t]) * w
    add_rms_rows(x, y, w, eps, out)          x[t] += y[t]; out[t] = rms_norm(x[t]) * w
    silu_mul(gate_up, act)                   act[t] = silu(gate[t]) * up[t], [gate | up]
    rotary_write(qkv, cos, sin, k_cache, v_cache, slot_mapping, q)
                                             rotary on q and k; K and V into the paged cache

The references are the torch ops of ``LlamaForward.forward`` (inferlab/model/llama.py);
tests/test_fused_forward.py checks the forward built from these against it. Kernels are
module-level functions so numba's on-disk cache finds them in a new process.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .half_cpu import stored
from .numba_cpu import FASTMATH, LOCK, exp_inplace


@njit(cache=True, fastmath=FASTMATH)
def rms_row(x, w, eps, out):
    ss = np.float32(0.0)
    for i in range(x.shape[0]):
        ss += x[i] * x[i]
    inv = np.float32(1.0) / np.sqrt(ss / np.float32(x.shape[0]) + np.float32(eps))
    for i in range(x.shape[0]):
        out[i] = x[i] * inv * w[i]


@njit(cache=True, fastmath=FASTMATH)
def _rms_rows(x, w, eps, out):
    for t in range(x.shape[0]):
        rms_row(x[t], w, eps, out[t])


@njit(cache=True, fastmath=FASTMATH, parallel=True)
def _add_rms_rows(x, y, w, eps, out):
    for t in prange(x.shape[0]):
        for i in range(x.shape[1]):
            x[t, i] += y[t, i]
        rms_row(x[t], w, eps, out[t])


@njit(cache=True, fastmath=FASTMATH, parallel=True)
def _silu_mul(gate_up, act):
    # act[t] = silu(gate[t]) * up[t], gate_up [T, 2 I] = [gate | up], act [T, I]
    inter = act.shape[1]
    for t in prange(act.shape[0]):
        row = act[t]
        for i in range(inter):
            row[i] = -gate_up[t, i]
        exp_inplace(row, row.view(np.int32), np.empty(inter, np.int32), inter)
        for i in range(inter):
            row[i] = gate_up[t, i] / (np.float32(1.0) + row[i]) * gate_up[t, inter + i]


@njit(cache=True, fastmath=FASTMATH, parallel=True)
def _rotary_write(qkv, cos, sin, k_cache, v_cache, slot_mapping, q):
    # qkv [T, (H + 2 KVH) * D]; cos, sin [T, D/2]; q [T, H, D] out; caches [NB, bs, KVH, D]
    # (float32, or bfloat16 bits: K and V rounded as stored)
    num_heads, d_n = q.shape[1], q.shape[2]
    bs, kvh_n = k_cache.shape[1], k_cache.shape[2]
    half = d_n // 2
    for t in prange(qkv.shape[0]):
        for head in range(num_heads):
            base = head * d_n
            for j in range(half):
                a, c = qkv[t, base + j], qkv[t, base + half + j]
                q[t, head, j] = a * cos[t, j] - c * sin[t, j]
                q[t, head, half + j] = c * cos[t, j] + a * sin[t, j]
        slot = slot_mapping[t]
        if slot < 0:                              # padding: nothing to cache
            continue
        blk, off = slot // bs, slot % bs
        for head in range(kvh_n):
            base = (num_heads + head) * d_n
            vbase = (num_heads + kvh_n + head) * d_n
            for j in range(half):
                a, c = qkv[t, base + j], qkv[t, base + half + j]
                k_cache[blk, off, head, j] = stored(a * cos[t, j] - c * sin[t, j], k_cache)
                k_cache[blk, off, head, half + j] = stored(c * cos[t, j] + a * sin[t, j],
                                                           k_cache)
            for j in range(d_n):
                v_cache[blk, off, head, j] = stored(qkv[t, vbase + j], v_cache)


# The launchers: numpy float32 arrays in, results written in place; one parallel launch at a
# time (LOCK: numba's thread pools are not safe from two threads at once).
def rms_rows(x, w, eps, out) -> None:
    _rms_rows(x, w, np.float32(eps), out)


def add_rms_rows(x, y, w, eps, out) -> None:
    with LOCK:
        _add_rms_rows(x, y, w, np.float32(eps), out)


def silu_mul(gate_up, act) -> None:
    with LOCK:
        _silu_mul(gate_up, act)


def rotary_write(qkv, cos, sin, k_cache, v_cache, slot_mapping, q) -> None:
    with LOCK:
        _rotary_write(qkv, cos, sin, k_cache, v_cache, slot_mapping, q)
