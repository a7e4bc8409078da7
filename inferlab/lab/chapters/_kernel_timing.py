"""Timing the CPU attention kernels: the decode cases and the memory roof chapter 9 measures
(``inferlab bench kernels`` prints the same as a table for BENCHMARKS.md).

Both backends run side by side in one process on the same caches (shuffled block tables).
Times are medians of ``repeats`` calls after a warm-up. The reference is timed with torch's
default thread count and with 1 thread, and the faster of the two is reported (so the
comparison never flatters numba). GB/s counts the K/V bytes a decode step must read; the roof
is this machine's bandwidth, measured with a numpy copy (read + write, one thread) and a
parallel numba read of the same buffer (the roof: decode only reads).
"""
from __future__ import annotations

import statistics

import numpy as np
import torch

from inferlab.core.shapes import cdiv
from inferlab.kernels import numba_cpu, reference
from inferlab.sim.this_cpu import timed

HEADS, KV_HEADS, HEAD_DIM, BLOCK = 9, 3, 64, 16          # SmolLM2-135M attention


def median_time(fn, repeats: int) -> float:
    """Median seconds of ``repeats`` calls after a warm-up (and JIT on first use)."""
    return statistics.median(timed(fn, repeats))


def memory_bandwidth(mb: int = 512) -> dict:
    from inferlab import kernels
    src = np.ones(mb * 2 ** 20 // 4, np.float32)
    dst = np.empty_like(src)
    copy_s = median_time(lambda: np.copyto(dst, src), 5)
    read_s = median_time(lambda: kernels.read_all(src), 5)
    return {"copy_gbs": 2 * src.nbytes / copy_s / 1e9, "read_gbs": src.nbytes / read_s / 1e9}


def decode_case(batch: int, context: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    nblk = cdiv(context, BLOCK)
    num_blocks = batch * nblk
    tables = rng.permutation(num_blocks).astype(np.int32).reshape(batch, nblk)
    shape = (num_blocks, BLOCK, KV_HEADS, HEAD_DIM)
    k_cache = rng.standard_normal(shape, dtype=np.float32)
    v_cache = rng.standard_normal(shape, dtype=np.float32)
    q = rng.standard_normal((batch, HEADS, HEAD_DIM), dtype=np.float32)
    seq_lens = np.full(batch, context, np.int32)
    return q, k_cache, v_cache, tables, seq_lens


def _reference_time(args, scale: float, repeats: int) -> float:
    """The torch reference's median time, the faster of its default threads and one."""
    default_threads = torch.get_num_threads()
    t_ref = float("inf")
    with torch.inference_mode():
        for threads in sorted({default_threads, 1}):
            torch.set_num_threads(threads)
            t_ref = min(t_ref, median_time(
                lambda: reference.paged_attention_decode(*args, scale), repeats))
    torch.set_num_threads(default_threads)
    return t_ref


def bench_one(batch: int, context: int, repeats: int, against: str = "reference") -> dict:
    """The numba kernel against the torch reference (the faster of its default and one
    thread) on one shape; ``against="numba"``: against itself (the claim's falsification)."""
    q, kc, vc, tables, lens = decode_case(batch, context)
    scale = HEAD_DIM ** -0.5
    numba = lambda: numba_cpu.paged_attention_decode(q, kc, vc, tables, lens, scale)  # noqa: E731
    t_numba = median_time(numba, repeats)
    args = [torch.from_numpy(a) for a in (q, kc, vc, tables, lens)]
    if against == "numba":
        t_ref = median_time(numba, repeats)
    else:
        t_ref = _reference_time(args, scale, repeats)
    kv_bytes = 2 * batch * context * KV_HEADS * HEAD_DIM * 4
    out = numba_cpu.paged_attention_decode(q, kc, vc, tables, lens, scale)
    err = float(np.abs(out - reference.paged_attention_decode(*args, scale).numpy()).max())
    return dict(batch=batch, context=context, numba_ms=t_numba * 1e3, ref_ms=t_ref * 1e3,
                speedup=t_ref / t_numba, numba_gbs=kv_bytes / t_numba / 1e9,
                ref_gbs=kv_bytes / t_ref / 1e9, max_err=err)
