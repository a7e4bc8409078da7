"""Numba CUDA paged attention (flash-decoding style): write_kv, decode, packed prefill.

Grid of the attention kernel: x = (query row, kv head), y = partition of the context.
- A query row is one decode sequence, or one new token of a prefill (its causal context is its
  own position + 1 keys), so one kernel serves both; prefill rows find their sequence by a
  binary search over query_start_loc on the device (no host copy of any index array).
- Each thread block (WARPS warps) walks one partition of the row's context. Every warp takes
  every WARPS-th token and keeps its own online softmax (running max m, sum l, accumulator)
  for the ``group`` query heads that share the kv head (GQA: each K/V row is loaded once for
  all of them). Lane i holds dims i, i+32, ... of a row, so a warp loads a row coalesced and a
  butterfly of shuffles gives every lane the full dot product. The next token's K/V rows are
  loaded before the current one is used (software pipelining keeps loads in flight).
- The warps' states merge in shared memory; with several partitions (long context, few rows:
  split-K so enough blocks fill the GPU) a second small kernel merges the partitions with the
  same max/sum rescaling.
Partition count comes from block_tables.shape (an upper bound of the context), not from
seq_lens, so nothing is read back to the host. head_dim a multiple of 32, <= 128.

Element types: float32, float16 and bfloat16 (q, k_cache, v_cache in one of them; write_kv's
k, v may be any of the three and are converted to the caches' type). Every kernel is one
source built per element type (the factories below are cached per type): loads go through
``LOAD[dtype]`` to float32, stores through ``STORE[dtype]`` from float32. All arithmetic is
float32 (scores, the online softmax's m and l, the accumulator, the partition merge); only the
output is rounded to q's type, to nearest even. float16 is numba's own float16 (the array's
setitem rounds); bfloat16, which numba's arrays, its CUDA simulator and torch's
``__cuda_array_interface__`` do not take, travels as its int16 bits (cuda_launch.py) and is
converted with integer ops and ``libdevice.int_as_float`` / ``float_as_int`` (in the
simulator: numpy views, cuda_launch.install_simulator_extras). The conversions: cuda_types.py.
"""
from __future__ import annotations

import functools
import math

import numpy as np
from numba import config, cuda, float32

from inferlab.core.shapes import cdiv
from inferlab.kernels.cuda_launch import DTYPES, Launch, dtype_name, host_view, \
    install_simulator_extras
from inferlab.kernels.cuda_types import LOAD, STORE, converter

WARPS = 4                 # warps per thread block
THREADS = WARPS * 32
MAX_GROUP = 8             # query heads per kv head (GQA ratio) held in registers
MAX_DIM = 128             # head_dim limit: at most 4 values per lane
TARGET_BLOCKS = 1024      # split the context until about this many thread blocks
MIN_PARTITION = 128       # ... but never into partitions shorter than this (merge cost)
FULL_MASK = 0xFFFFFFFF


if config.ENABLE_CUDASIM:
    install_simulator_extras()


@cuda.jit(device=True, inline=True)
def _row_context(row, seq_lens, query_start_loc, is_prefill):
    """(sequence, number of keys visible) of query row ``row``."""
    if not is_prefill:
        return row, seq_lens[row]
    lo, hi = 0, query_start_loc.shape[0] - 1            # largest s with qsl[s] <= row
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if query_start_loc[mid] <= row:
            lo = mid
        else:
            hi = mid
    n_new = query_start_loc[lo + 1] - query_start_loc[lo]
    return lo, seq_lens[lo] - n_new + (row - query_start_loc[lo]) + 1


@functools.cache
def _attention_kernel(G: int, J: int, dtype: str = "float32"):
    """The kernel for G query heads per kv head, head_dim = 32 * J, and q, caches and output
    of element type ``dtype``. G and J are compile-time constants: every small loop unrolls
    and the per-lane arrays stay in registers (a generic build with guards to the maxima
    needed 158 registers/thread; this one, far fewer)."""
    load, store = LOAD[dtype], STORE[dtype]
    D = 32 * J
    GD = G * D                       # array shapes must be plain constants, not expressions

    @cuda.jit
    def kernel(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, is_prefill, scale,
               part_size, out, part_m, part_l, part_acc):
        # q, out [R, H, D]; caches [NB, bs, KVH, D]; part_m, part_l [R, H, P]; part_acc [R,H,P,D]
        num_kv_heads = k_cache.shape[2]
        bs = k_cache.shape[1]
        row = cuda.blockIdx.x // num_kv_heads
        kvh = cuda.blockIdx.x % num_kv_heads
        part = cuda.blockIdx.y
        nparts = cuda.gridDim.y
        tid = cuda.threadIdx.x
        warp = tid // 32
        lane = tid % 32

        seq, length = _row_context(row, seq_lens, query_start_loc, is_prefill)
        t_begin = part * part_size
        t_end = min(length, t_begin + part_size)
        if t_begin >= t_end:                             # partition past this row's context
            if nparts > 1 and tid < G:
                part_m[row, kvh * G + tid, part] = -math.inf
                part_l[row, kvh * G + tid, part] = 0.0
            return                                       # uniform across the block

        q_sh = cuda.shared.array(GD, float32)            # [G*D] scaled queries
        m_sh = cuda.shared.array((WARPS, G), float32)
        l_sh = cuda.shared.array((WARPS, G), float32)
        acc_sh = cuda.shared.array((WARPS, G, D), float32)
        for i in range(tid, G * D, THREADS):
            q_sh[i] = load(q[row, kvh * G + i // D, i % D]) * scale
        cuda.syncthreads()

        m = cuda.local.array(G, float32)                 # running max per head
        l = cuda.local.array(G, float32)                 # running sum of exp per head
        dot = cuda.local.array(G, float32)
        acc = cuda.local.array((G, J), float32)          # this lane's dims lane + 32*j
        k_reg = cuda.local.array(J, float32)
        v_reg = cuda.local.array(J, float32)
        k_nxt = cuda.local.array(J, float32)
        v_nxt = cuda.local.array(J, float32)
        for g in range(G):
            m[g] = -math.inf
            l[g] = 0.0
            for j in range(J):
                acc[g, j] = 0.0

        t = t_begin + warp
        if t < t_end:                                    # prefetch this warp's first token
            blk = block_tables[seq, t // bs]
            for j in range(J):
                k_nxt[j] = load(k_cache[blk, t % bs, kvh, lane + 32 * j])
                v_nxt[j] = load(v_cache[blk, t % bs, kvh, lane + 32 * j])
        while t < t_end:
            for j in range(J):
                k_reg[j] = k_nxt[j]
                v_reg[j] = v_nxt[j]
            t_next = t + WARPS
            if t_next < t_end:                           # issue the next loads now
                blk = block_tables[seq, t_next // bs]
                for j in range(J):
                    k_nxt[j] = load(k_cache[blk, t_next % bs, kvh, lane + 32 * j])
                    v_nxt[j] = load(v_cache[blk, t_next % bs, kvh, lane + 32 * j])
            for g in range(G):
                d = float32(0.0)
                for j in range(J):
                    d += q_sh[g * D + lane + 32 * j] * k_reg[j]
                dot[g] = d
            offset = 16
            while offset > 0:                            # the G butterflies interleave
                for g in range(G):
                    dot[g] += cuda.shfl_xor_sync(FULL_MASK, dot[g], offset)
                offset //= 2
            for g in range(G):                           # online softmax, one token
                m_new = max(m[g], dot[g])
                alpha = math.exp(m[g] - m_new)           # 0 on the first token (m = -inf)
                p = math.exp(dot[g] - m_new)
                l[g] = l[g] * alpha + p
                for j in range(J):
                    acc[g, j] = acc[g, j] * alpha + p * v_reg[j]
                m[g] = m_new
            t = t_next

        # merge the warps of this block (a warp that got no token has m = -inf, l = 0)
        for g in range(G):
            for j in range(J):
                acc_sh[warp, g, lane + 32 * j] = acc[g, j]
            if lane == 0:
                m_sh[warp, g] = m[g]
                l_sh[warp, g] = l[g]
        cuda.syncthreads()
        for i in range(tid, G * D, THREADS):
            g = i // D
            d = i % D
            m_all = m_sh[0, g]                           # warp 0 always has a token
            for w in range(1, WARPS):
                m_all = max(m_all, m_sh[w, g])
            l_all = float32(0.0)
            a_all = float32(0.0)
            for w in range(WARPS):
                if l_sh[w, g] > 0:
                    c = math.exp(m_sh[w, g] - m_all)
                    l_all += l_sh[w, g] * c
                    a_all += acc_sh[w, g, d] * c
            h = kvh * G + g
            if nparts == 1:
                out[row, h, d] = store(a_all / l_all)
            else:
                part_acc[row, h, part, d] = a_all
                if d == 0:
                    part_m[row, h, part] = m_all
                    part_l[row, h, part] = l_all

    return kernel


@functools.cache
def _merge_partitions_kernel(dtype: str = "float32"):
    """The merge of the float32 partitions into an output of element type ``dtype``."""
    store = STORE[dtype]

    @cuda.jit
    def kernel(part_m, part_l, part_acc, out):
        # one block per (row, head), one thread per dim; empty partitions have l = 0
        row = cuda.blockIdx.x // out.shape[1]
        h = cuda.blockIdx.x % out.shape[1]
        d = cuda.threadIdx.x
        m_all = float32(-math.inf)
        for p in range(part_m.shape[2]):
            if part_l[row, h, p] > 0.0:
                m_all = max(m_all, part_m[row, h, p])
        l_all = float32(0.0)
        a_all = float32(0.0)
        for p in range(part_m.shape[2]):
            if part_l[row, h, p] > 0.0:
                c = math.exp(part_m[row, h, p] - m_all)
                l_all += part_l[row, h, p] * c
                a_all += part_acc[row, h, p, d] * c
        out[row, h, d] = store(a_all / l_all)
    return kernel


@functools.cache
def _write_kv_kernel(src: str = "float32", dst: str = "float32"):
    """write_kv for new k, v of element type ``src`` into caches of type ``dst``."""
    convert = converter(src, dst)

    @cuda.jit
    def kernel(k, v, k_cache, v_cache, slot_mapping):
        # one block per new token; threads stride over its [KVH, D] values (coalesced)
        i = cuda.blockIdx.x
        slot = slot_mapping[i]
        if slot < 0:                                     # padding slot: nothing to write
            return
        bs = k_cache.shape[1]
        head_dim = k_cache.shape[3]
        for e in range(cuda.threadIdx.x, k.shape[1] * head_dim, cuda.blockDim.x):
            k_cache[slot // bs, slot % bs, e // head_dim, e % head_dim] = convert(
                k[i, e // head_dim, e % head_dim])
            v_cache[slot // bs, slot % bs, e // head_dim, e % head_dim] = convert(
                v[i, e // head_dim, e % head_dim])
    return kernel


# ---- launchers -----------------------------------------------------------------------------

def _dtype(x, what: str) -> str:
    name = dtype_name(x)
    if name not in DTYPES:
        raise TypeError(f"numba-cuda kernels take {', '.join(DTYPES)}; got {what} of {x.dtype}")
    return name


def _check(q, k_cache, v_cache) -> str:
    """q's element type, after checking the shapes and that the caches share it."""
    head_dim, num_kv_heads = k_cache.shape[3], k_cache.shape[2]
    group = q.shape[1] // num_kv_heads
    if head_dim % 32 or head_dim > MAX_DIM or group > MAX_GROUP:
        raise ValueError(f"numba-cuda supports head_dim in 32..{MAX_DIM} step 32 and at most "
                         f"{MAX_GROUP} query heads per kv head; got head_dim={head_dim}, "
                         f"group={group}")
    dtype = _dtype(q, "q")
    if _dtype(k_cache, "k_cache") != dtype or _dtype(v_cache, "v_cache") != dtype:
        raise TypeError(f"q, k_cache and v_cache must have one dtype; got {q.dtype}, "
                        f"{k_cache.dtype}, {v_cache.dtype}")
    return dtype


def _attention(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, is_prefill, scale,
               partition_size):
    dtype = _check(q, k_cache, v_cache)
    L = Launch(q)
    num_rows, num_heads, head_dim = q.shape
    num_kv_heads, bs = k_cache.shape[2], k_cache.shape[1]
    if num_rows == 0:
        return q[:0] * 0
    max_len = block_tables.shape[1] * bs                 # upper bound, known without a sync
    if partition_size is None:                           # split-K only when rows are few
        want = max(1, cdiv(TARGET_BLOCKS, num_rows * num_kv_heads))
        partition_size = max(MIN_PARTITION, cdiv(max_len, want))
    nparts = max(1, cdiv(max_len, partition_size))
    i32 = np.int32
    args = [L.dev(q), L.dev(k_cache), L.dev(v_cache), L.dev(block_tables, i32),
            L.dev(seq_lens, i32), L.dev(query_start_loc, i32)]
    out_handle, out = L.empty((num_rows, num_heads, head_dim), dtype)
    shape = (num_rows, num_heads, nparts) if nparts > 1 else (1, 1, 1)
    _, pm = L.empty(shape)                               # the partitions stay float32
    _, pl = L.empty(shape)
    _, pa = L.empty(shape + (head_dim,))
    grid = (num_rows * num_kv_heads, nparts)
    kernel = _attention_kernel(num_heads // num_kv_heads, head_dim // 32, dtype)
    kernel[grid, THREADS, L.stream](*args, is_prefill, np.float32(scale), partition_size, out,
                                    pm, pl, pa)
    if nparts > 1:
        _merge_partitions_kernel(dtype)[num_rows * num_heads, head_dim, L.stream](pm, pl, pa,
                                                                                   out)
    return L.result(out_handle, q)


def paged_attention_decode(q, k_cache, v_cache, block_tables, seq_lens, scale,
                           partition_size=None):
    # query_start_loc is unused in decode; seq_lens stands in for it to keep one signature
    return _attention(q, k_cache, v_cache, block_tables, seq_lens, seq_lens, False, scale,
                      partition_size)


def paged_attention_prefill(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale,
                            partition_size=None):
    return _attention(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, True, scale,
                      partition_size)


def write_kv(k, v, k_cache, v_cache, slot_mapping) -> None:
    """k, v of any of DTYPES into caches of one of them (float32 into a half cache: rounded
    to nearest even; the same type: copied bit for bit)."""
    src, dst = _dtype(k, "k"), _dtype(k_cache, "k_cache")
    if _dtype(v, "v") != src or _dtype(v_cache, "v_cache") != dst:
        raise TypeError(f"k and v, and k_cache and v_cache, must have one dtype each; got "
                        f"{k.dtype}, {v.dtype}, {k_cache.dtype}, {v_cache.dtype}")
    L = Launch(k_cache)
    if k.shape[0] == 0:
        return
    kc, vc = L.dev(k_cache, inplace=True), L.dev(v_cache, inplace=True)
    _write_kv_kernel(src, dst)[k.shape[0], 128, L.stream](L.dev(k), L.dev(v), kc, vc,
                                                           L.dev(slot_mapping, np.int64))
    if L.host:                                           # host caches: copy the update back
        kc.copy_to_host(host_view(k_cache), stream=L.stream)
        vc.copy_to_host(host_view(v_cache), stream=L.stream)
        L.stream.synchronize()
