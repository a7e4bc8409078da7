"""Numba CPU paged attention: write_kv, decode and packed (chunked) prefill.

Layout of the work (why it is fast on a few cores):
- One parallel work item = one sequence x one kv head x a tile of up to Q_TILE query tokens.
  Each K/V row of the sequence is read once per work item and reused by all ``group`` query
  heads that share the kv head (GQA) and by every query token of the tile, so decode reads
  each cached byte once -- decode is bound by memory bandwidth, not by arithmetic.
- Online softmax per key block: the scores of one block live in a small [rows, block_size]
  scratch; the running max/sum/accumulator are rescaled once per block, not once per token,
  and no [context] score row is ever materialised (the torch reference gathers all of K/V).
- ``prange`` over work items; every item owns its output rows, so no locking.
- Within an item, three query rows share each pass over a K row, four V rows each pass over
  the accumulator, and the exponentials run through ``exp_inplace`` (vectorised): together
  1.2-2x faster than one row and one key at a time with numba's scalar exp (BENCHMARKS.md).
- fastmath without nnan/ninf: lets LLVM vectorise the dot products (reassociation) while the
  -inf running max of an empty row still behaves.

Arrays are numpy (inferlab.kernels views torch tensors, zero copy). q and the caches may be
float32, float16, or bfloat16 as its uint16 bits (numpy has none): half-precision rows are read
as they are and converted to float32 rows in a scratch (``load_row``, half_cpu.py), so the same
functions serve every dtype, numba compiling one specialisation per dtype (float32's loads are
the rows themselves, as before). Other float dtypes are cast to float32 copies. Scores, softmax
and sums are float32 whatever comes in; the result comes back in q's dtype, rounded to nearest
even. write_kv copies k/v into the caches as they are (half bits for half caches), in place.
"""
from __future__ import annotations

import math
import os
import threading

import numba
import numpy as np
from numba import njit, prange

from .half_cpu import bits_view, kernel_array, like_cache, load_row, result_as


def _omp_layer_loads() -> bool:
    """Whether numba's GNU OpenMP threading layer can load here (it needs libgomp)."""
    try:
        from numba.np.ufunc import omppool  # noqa: F401
    except (ImportError, OSError):
        return False
    return True


# Threading layer. Numba's own "workqueue" threads sleep on a condition variable between
# launches; on this 2-vCPU VM waking them cost 80-100 us per parallel region (an empty prange:
# 83 us), which the fused decode pays ~150 times a step. GNU OpenMP's workers spin a while
# before they sleep, so back-to-back regions start in ~1.5 us. (numba's omppool binds the
# system's libgomp, torch its own copy: two runtimes, each with a worker that spins after its
# region.) Measured A B A B in separate processes, decode step: batch 1 17.8-19.7 ms (omp) vs
# 29.2-29.5 (workqueue), batch 32 69.5-69.9 vs 83.5-84.0 (BENCHMARKS.md, "Speed"). Without
# libgomp, workqueue. Launches are not safe from two threads at once, hence LOCK.
# NUMBA_THREADING_LAYER in the environment wins.
if "NUMBA_THREADING_LAYER" in os.environ:
    OMP_LAYER = numba.config.THREADING_LAYER == "omp"
else:
    OMP_LAYER = _omp_layer_loads()
    numba.config.THREADING_LAYER = "omp" if OMP_LAYER else "workqueue"
LOCK = threading.Lock()

FASTMATH = {"reassoc", "contract", "nsz", "arcp", "afn"}
Q_TILE = 16                  # query tokens per prefill work item: K/V reuse vs. load balance
# Below this much K/V a parallel launch costs more than it saves: ~1 MB with workqueue's
# wake-ups, ~256 KB with OpenMP's (decode at 4 x 64 tokens, 393 KB: 31 us serial, 18 us
# parallel; one sequence at 256 tokens: 32 vs 30 us).
PARALLEL_MIN_BYTES = 1 << 18 if OMP_LAYER else 1 << 20


_LOG2E = np.float32(1.4426950408889634)
_LN2_HI = np.float32(0.693359375)           # ln 2 = HI + LO; k * HI is exact for |k| < 2^8
_LN2_LO = np.float32(-2.12194440e-4)


# No "reassoc" here: it would fold x - k*HI - k*LO back into x - k*ln2 and lose the digits
# the split keeps; the loops have no reductions, so they vectorise without it.
@njit(cache=True, fastmath={"contract", "nsz", "arcp"})
def exp_inplace(a, bits, ints, n):
    """a[:n] = exp(a[:n]) in two loops LLVM vectorises (numba's scalar exp does not: ~5x
    slower). exp(x) = 2^k e^f with k = round(x / ln 2), f = x - k ln 2 (|f| <= ln 2 / 2,
    ln 2 split in two so that f keeps its digits): e^f by its Taylor series to degree 7
    (relative error ~1e-7, float32's own rounding is 6e-8), 2^k added to the exponent bits.
    ``bits`` is ``a`` viewed as int32, ``ints`` int32 scratch of >= n elements. x is clamped
    to [-87, 88], where float32 stays normal: exp(-87) ~ 1.6e-38."""
    for i in range(n):
        x = min(max(a[i], np.float32(-87.0)), np.float32(88.0))
        k = np.floor(x * _LOG2E + np.float32(0.5))
        f = (x - k * _LN2_HI) - k * _LN2_LO
        a[i] = np.float32(1.0) + f * (np.float32(1.0) + f * (np.float32(0.5) + f * (
            np.float32(1.0 / 6) + f * (np.float32(1.0 / 24) + f * (np.float32(1.0 / 120) + f * (
                np.float32(1.0 / 720) + f * np.float32(1.0 / 5040)))))))
        ints[i] = np.int32(k) << 23
    for i in range(n):
        bits[i] += ints[i]


@njit(cache=True, fastmath=FASTMATH)
def attend_rows(q, k_cache, v_cache, table, row0, nrows, pos0, kvh, group, scale, out):
    """Query rows row0..row0+nrows-1 of ``q`` (token positions pos0.. in their sequence, whose
    physical blocks are ``table``) attend causally to the cached keys 0..pos, for the ``group``
    query heads of kv head ``kvh``. Writes those rows/heads of ``out``."""
    bs = k_cache.shape[1]
    head_dim = k_cache.shape[3]
    R = nrows * group                                  # (token, head) pairs of this item
    buf = np.empty((R + 4, head_dim), dtype=np.float32)   # one allocation for:
    qt = buf[:R]                                       # [R, D] scaled queries
    rows = buf[R:]                                     # [4, D] half q/K/V rows as float32
    acc = np.zeros((R, head_dim), dtype=np.float32)       # [R, D] unnormalised output
    m = np.full(R, -np.inf, dtype=np.float32)          # [R] running max score
    l = np.zeros(R, dtype=np.float32)                  # [R] running sum of exp
    last = np.empty(R, dtype=np.int64)                 # [R] last key position (causal)
    sc = np.empty((R, bs), dtype=np.float32)           # [R, bs] scores, then probs, of a block
    sc_bits = sc.view(np.int32)                        # the same memory, for exp_inplace
    ints = np.empty(bs, dtype=np.int32)
    for r in range(R):
        tok, g = r // group, r % group
        last[r] = pos0 + tok                           # non-decreasing in r
        qrow = load_row(q[row0 + tok, kvh * group + g], rows[0])
        for d in range(head_dim):
            qt[r, d] = qrow[d] * scale

    n_keys = pos0 + nrows                              # keys visible to the last row
    for b in range((n_keys + bs - 1) // bs):
        blk = table[b]
        t0 = b * bs
        tmax = min(bs, n_keys - t0)
        # scores: each K row is loaded once and used by every row that sees it, three rows
        # to a pass over the row (three dot products share each load: ~25% faster than one)
        for t in range(tmax):
            krow = load_row(k_cache[blk, t, kvh], rows[0])   # [D]
            r = 0
            while r < R and last[r] < t0 + t:          # rows before this key (causal)
                r += 1
            while r + 3 <= R:
                a0, a1, a2 = np.float32(0.0), np.float32(0.0), np.float32(0.0)
                for d in range(head_dim):
                    kd = krow[d]
                    a0 += qt[r, d] * kd
                    a1 += qt[r + 1, d] * kd
                    a2 += qt[r + 2, d] * kd
                sc[r, t], sc[r + 1, t], sc[r + 2, t] = a0, a1, a2
                r += 3
            while r < R:
                a0 = np.float32(0.0)
                for d in range(head_dim):
                    a0 += qt[r, d] * krow[d]
                sc[r, t] = a0
                r += 1
        # online softmax: fold this block into each row's running max / sum / accumulator
        for r in range(R):
            nvalid = min(tmax, last[r] + 1 - t0)
            if nvalid <= 0:
                sc[r, :tmax] = 0.0
                continue
            m_new = m[r]
            for t in range(nvalid):
                m_new = max(m_new, sc[r, t])
            alpha = math.exp(m[r] - m_new)             # 0 on the first block (m = -inf)
            if alpha != 1.0:
                l[r] *= alpha
                for d in range(head_dim):
                    acc[r, d] *= alpha
            for t in range(nvalid):
                sc[r, t] -= m_new
            exp_inplace(sc[r], sc_bits[r], ints, nvalid)
            for t in range(nvalid):
                l[r] += sc[r, t]
            sc[r, nvalid:tmax] = 0.0
            m[r] = m_new
        # weighted values: each V row loaded once, four keys to a pass over the accumulator
        t = 0
        while t + 4 <= tmax:
            v0 = load_row(v_cache[blk, t, kvh], rows[0])
            v1 = load_row(v_cache[blk, t + 1, kvh], rows[1])
            v2 = load_row(v_cache[blk, t + 2, kvh], rows[2])
            v3 = load_row(v_cache[blk, t + 3, kvh], rows[3])
            for r in range(R):
                p0, p1, p2, p3 = sc[r, t], sc[r, t + 1], sc[r, t + 2], sc[r, t + 3]
                for d in range(head_dim):
                    acc[r, d] += p0 * v0[d] + p1 * v1[d] + p2 * v2[d] + p3 * v3[d]
            t += 4
        while t < tmax:
            vrow = load_row(v_cache[blk, t, kvh], rows[0])   # [D]
            for r in range(R):
                p = sc[r, t]
                for d in range(head_dim):
                    acc[r, d] += p * vrow[d]
            t += 1

    for r in range(R):
        tok, g = r // group, r % group
        inv = np.float32(1.0) / l[r]
        for d in range(head_dim):
            out[row0 + tok, kvh * group + g, d] = acc[r, d] * inv


@njit(cache=True, fastmath=FASTMATH)
def _decode_item(i, q, k_cache, v_cache, block_tables, seq_lens, scale, out):
    # work item i = (sequence, kv head); q, out [S, H, D]
    num_kv_heads = k_cache.shape[2]
    s, kvh = i // num_kv_heads, i % num_kv_heads
    attend_rows(q, k_cache, v_cache, block_tables[s], s, 1, seq_lens[s] - 1, kvh,
                q.shape[1] // num_kv_heads, scale, out)


@njit(cache=True, fastmath=FASTMATH)
def _prefill_item(i, q, k_cache, v_cache, block_tables, work, scale, out):
    # work item i = (tile, kv head); work [W, 4] = (seq, first q row, rows, pos of first row)
    num_kv_heads = k_cache.shape[2]
    w, kvh = i // num_kv_heads, i % num_kv_heads
    attend_rows(q, k_cache, v_cache, block_tables[work[w, 0]], work[w, 1], work[w, 2],
                work[w, 3], kvh, q.shape[1] // num_kv_heads, scale, out)


# Serial and parallel twins (separate functions so their on-disk caches stay apart).
@njit(cache=True, fastmath=FASTMATH)
def _decode_serial(q, k_cache, v_cache, block_tables, seq_lens, scale, out):
    for i in range(q.shape[0] * k_cache.shape[2]):
        _decode_item(i, q, k_cache, v_cache, block_tables, seq_lens, scale, out)


@njit(cache=True, fastmath=FASTMATH, parallel=True)
def _decode_parallel(q, k_cache, v_cache, block_tables, seq_lens, scale, out):
    for i in prange(q.shape[0] * k_cache.shape[2]):
        _decode_item(i, q, k_cache, v_cache, block_tables, seq_lens, scale, out)


@njit(cache=True, fastmath=FASTMATH)
def _prefill_serial(q, k_cache, v_cache, block_tables, work, scale, out):
    for i in range(work.shape[0] * k_cache.shape[2]):
        _prefill_item(i, q, k_cache, v_cache, block_tables, work, scale, out)


@njit(cache=True, fastmath=FASTMATH, parallel=True)
def _prefill_parallel(q, k_cache, v_cache, block_tables, work, scale, out):
    for i in prange(work.shape[0] * k_cache.shape[2]):
        _prefill_item(i, q, k_cache, v_cache, block_tables, work, scale, out)


def _run(serial, parallel, kv_bytes, *args):
    if kv_bytes < PARALLEL_MIN_BYTES or numba.config.NUMBA_NUM_THREADS == 1:
        return serial(*args)
    with LOCK:
        return parallel(*args)


@njit(cache=True)
def _write_kv_kernel(k, v, k_cache, v_cache, slot_mapping):
    # k, v [T, KVH, D] -> caches [NB, bs, KVH, D]; a negative slot (padding) is skipped
    bs = k_cache.shape[1]
    for i in range(k.shape[0]):
        slot = slot_mapping[i]
        if slot < 0:
            continue
        k_cache[slot // bs, slot % bs] = k[i]
        v_cache[slot // bs, slot % bs] = v[i]


def prefill_work(seq_lens, query_start_loc, q_tile: int = Q_TILE) -> np.ndarray:
    """Split each sequence's new tokens into tiles: [W, 4] int64 (seq, row0, nrows, pos0)."""
    items = []
    for s, length in enumerate(seq_lens.tolist()):
        q0, q1 = int(query_start_loc[s]), int(query_start_loc[s + 1])
        first_pos = length - (q1 - q0)                 # new tokens are the last of the seq
        for row0 in range(q0, q1, q_tile):
            items.append((s, row0, min(q_tile, q1 - row0), first_pos + row0 - q0))
    return np.array(items, dtype=np.int64).reshape(-1, 4)


def write_kv(k, v, k_cache, v_cache, slot_mapping) -> None:
    """In place; half-precision caches get the bits of k and v (see half_cpu.py)."""
    k_cache, v_cache = bits_view(k_cache), bits_view(v_cache)
    k, v = like_cache(k, k_cache), like_cache(v, v_cache)
    _write_kv_kernel(k, v, k_cache, v_cache, np.ascontiguousarray(slot_mapping, np.int64))


def paged_attention_decode(q, k_cache, v_cache, block_tables, seq_lens, scale):
    out = np.empty(np.shape(q), np.float32)             # [S, H, D]
    seq_lens = np.ascontiguousarray(seq_lens, np.int32)
    row_bytes = 2 * k_cache.shape[2] * k_cache.shape[3] * 4   # K+V of one token, as float32
    _run(_decode_serial, _decode_parallel, int(seq_lens.sum()) * row_bytes,
         kernel_array(q), kernel_array(k_cache), kernel_array(v_cache),
         np.ascontiguousarray(block_tables, np.int32), seq_lens, float(scale), out)
    return result_as(out, q)


def paged_attention_prefill(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc,
                            scale):
    out = np.zeros(np.shape(q), np.float32)             # [T, H, D]
    work = prefill_work(np.asarray(seq_lens), np.asarray(query_start_loc))
    if len(work):
        # K/V work: each tile re-reads its sequence's keys up to its last row
        row_bytes = 2 * k_cache.shape[2] * k_cache.shape[3] * 4
        kv_bytes = int((work[:, 3] + work[:, 2]).sum()) * row_bytes
        _run(_prefill_serial, _prefill_parallel, kv_bytes, kernel_array(q),
             kernel_array(k_cache), kernel_array(v_cache),
             np.ascontiguousarray(block_tables, np.int32), work, float(scale), out)
    return result_as(out, q)
