"""The forward pass over many rows with its small ops fused into numba kernels.

At 32 decoding sequences a step spends ~55 ms in the linear layers and, op by op through
torch, another ~14 ms in what sits between them (norms, rotary, the KV write, SiLU, residual
adds: ~20 tensor ops per layer, each a dispatch and a pass over memory). Here each group of
those becomes one numba call over all rows, its rows split over the cores (SiLU uses the
attention kernels' vectorised ``exp_inplace``: numba's scalar exp is ~5x slower than torch's):

    h = rms_norm(x)                                    (once, before the first layer)
    per layer:  qkv = linear(h)                        numba GEMM / oneDNN / torch (linear backend)
                q = rotary_write(qkv)                  rotary on q and k, K and V into the cache
                o = attention(q)                       the numba paged-attention kernels
                                                       (torch's SDPA for long prompt chunks)
                h = add_rms_norm(x, linear(o))         x += Wo o;  h = rms_norm(x)
                a = silu_mul(linear(h))            silu(gate) * up, [gate | up] = Wgate_up h
                h = add_rms_norm(x, linear(a))         x += Wdown a;  h = the next layer's norm
    logits = linear(h[rows that sample])               (the last norm is the model's final one)

With OpenMP's threads a parallel launch costs microseconds, so even 32 rows split over the
cores; a 2048-token prefill gains most (A B A B in one process: its step 2.38 -> 2.31 s; the
decode steps of the same run unchanged, BENCHMARKS.md "Speed, round 3"). The readable
reference of the same pass is ``LlamaForward``'s op-by-op forward (model/llama.py);
tests/test_fused_forward.py checks one against the other.
The kernels are module-level functions so that numba's on-disk cache finds them again in a
new process (a jitted closure calling another misses it: it recompiled every time). llama.py
imports this module only when the fast path runs, so ``import inferlab`` stays free of numba.
"""
from __future__ import annotations

import numpy as np
import torch
from numba import njit, prange

from inferlab.kernels.numba_cpu import FASTMATH, LOCK, exp_inplace

from ..core.shapes import cdiv
from .llama import attention


@njit(cache=True, fastmath=FASTMATH)
def rms_row(x, w, eps, out):
    ss = np.float32(0.0)
    for i in range(x.shape[0]):
        ss += x[i] * x[i]
    inv = np.float32(1.0) / np.sqrt(ss / np.float32(x.shape[0]) + np.float32(eps))
    for i in range(x.shape[0]):
        out[i] = x[i] * inv * w[i]


@njit(cache=True, fastmath=FASTMATH)
def rms_rows(x, w, eps, out):
    for t in range(x.shape[0]):
        rms_row(x[t], w, eps, out[t])


@njit(cache=True, fastmath=FASTMATH, parallel=True)
def add_rms_rows(x, y, w, eps, out):
    for t in prange(x.shape[0]):
        for i in range(x.shape[1]):
            x[t, i] += y[t, i]
        rms_row(x[t], w, eps, out[t])


@njit(cache=True, fastmath=FASTMATH, parallel=True)
def silu_mul(gate_up, act):
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
def rotary_write(qkv, cos, sin, k_cache, v_cache, slot_mapping, q):
    # qkv [T, (H + 2 KVH) * D]; cos, sin [T, D/2]; q [T, H, D] out; caches [NB, bs, KVH, D]
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
                k_cache[blk, off, head, j] = a * cos[t, j] - c * sin[t, j]
                k_cache[blk, off, head, half + j] = c * cos[t, j] + a * sin[t, j]
            for j in range(d_n):
                v_cache[blk, off, head, j] = qkv[t, vbase + j]


# From this many new tokens of one sequence in a step, its attention runs through torch's
# scaled_dot_product_attention on K/V gathered out of the paged cache: 512 new tokens 5.3 ms
# per layer against 13.9 for the numba prefill kernel, 2048: 48-80 vs 156 ms; at 64 tokens
# both take ~0.12 ms a sequence (BENCHMARKS.md, "Speed, round 2").
SDPA_MIN_TOKENS = 256


def attention_sdpa(q, k_cache, v_cache, meta, scale: float):
    """The attention of a step, one sequence at a time through torch's SDPA: its K/V
    gathered from its blocks, the causal mask aligned to its last key (a chunk that starts
    after cached tokens sees them all)."""
    out = torch.empty_like(q)                                      # [T, H, D]
    bs = k_cache.shape[1]
    starts, lens = meta.query_start_loc.tolist(), meta.seq_lens.tolist()
    for s, n in enumerate(lens):
        q0, q1 = starts[s], starts[s + 1]
        blocks = meta.block_tables[s, :cdiv(n, bs)].long()
        # [1, heads, tokens, D], contiguous: what SDPA's fused CPU kernel takes
        k = k_cache[blocks].flatten(0, 1)[:n].transpose(0, 1).unsqueeze(0).contiguous()
        v = v_cache[blocks].flatten(0, 1)[:n].transpose(0, 1).unsqueeze(0).contiguous()
        rows = q1 - q0
        causal = rows == n                          # the whole sequence is new: plain causal
        mask = None if causal or rows == 1 else (
            torch.arange(n)[None, :] <= torch.arange(n - rows, n)[:, None])   # [rows, n]
        o = torch.nn.functional.scaled_dot_product_attention(
            q[q0:q1].transpose(0, 1).unsqueeze(0).contiguous(), k, v, attn_mask=mask,
            is_causal=causal and rows > 1, scale=scale, enable_gqa=True)   # [1, H, rows, D]
        out[q0:q1] = o[0].transpose(0, 1)
    return out


def attention_for(meta):
    """The attention this forward runs for a step: ``attention_sdpa`` when a sequence brings
    >= SDPA_MIN_TOKENS new tokens, else the numba kernels (``llama.attention``)."""
    if not meta.decode_only:                        # a decode step has one new token a sequence
        new_tokens = meta.query_start_loc[1:] - meta.query_start_loc[:-1]
        if int(new_tokens.max()) >= SDPA_MIN_TOKENS:
            return attention_sdpa
    return attention


def forward(fwd, input_ids, positions, meta, k_caches, v_caches, logits_indices):
    """``LlamaForward.forward`` with the small ops fused (same arguments, same result)."""
    T = input_ids.shape[0]
    attend = attention_for(meta)
    H, D = fwd.num_heads, fwd.head_dim
    layers = fwd.layers
    eps = np.float32(fwd.eps)
    x = fwd.embed[input_ids]                                       # [T, hidden], ours to update
    freqs = positions.float()[:, None] * fwd.inv_freq[None, :]       # [T, D/2]
    cos = (freqs.cos() * fwd.rope_scaling).numpy()
    sin = (freqs.sin() * fwd.rope_scaling).numpy()
    slots = meta.slot_mapping.numpy()
    h = torch.empty_like(x)
    xn, hn = x.numpy(), h.numpy()
    rms_rows(xn, layers[0].input_norm.numpy(), eps, hn)
    for li, w in enumerate(layers):
        qkv = fwd.linear(h, w.wqkv, w.bqkv)                        # [T, (H+2KVH)*D]
        q = torch.empty((T, H, D), dtype=x.dtype)
        kc, vc = k_caches[li], v_caches[li]                        # [blocks, bs, KVH, D]
        with LOCK:                                                 # one parallel launch at a time
            rotary_write(qkv.numpy(), cos, sin, kc.numpy(), vc.numpy(), slots, q.numpy())
        o = attend(q, kc, vc, meta, fwd.scale)                      # [T, H, D]
        y = fwd.linear(o.reshape(T, H * D), w.wo).numpy()
        with LOCK:
            add_rms_rows(xn, y, w.post_norm.numpy(), eps, hn)
        gate_up = fwd.linear(h, w.w_gate_up)                        # [T, 2 intermediate]
        act = torch.empty((T, gate_up.shape[1] // 2), dtype=x.dtype)
        with LOCK:
            silu_mul(gate_up.numpy(), act.numpy())
        nxt = layers[li + 1].input_norm if li + 1 < len(layers) else fwd.norm
        y = fwd.linear(act, w.w_down).numpy()
        with LOCK:
            add_rms_rows(xn, y, nxt.numpy(), eps, hn)
    return fwd.linear(h[logits_indices], fwd.lm_head).float()      # [R, vocab]
