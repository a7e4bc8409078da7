"""A profile of *this* machine, measured at run time: ``clock="this-cpu"``.

The GPU profiles in ``gpus.py`` are datasheet numbers times efficiencies that nothing here
can check. This one is measured, so the cost model's prediction can be compared with the
engine's own step times on the same machine (``inferlab bench clock``):

- compute: sgemm FLOP/s of ``torch.mm`` on layer-sized fp32 shapes, all of torch's threads
  (on a CPU fp32, bf16 and "tf32" matmuls all get this one number);
- memory: streaming bandwidth of a tensor far larger than the last-level cache (a copy,
  counted as read + write, and a sum, read only; the faster of the two);
- overheads: the dispatch latency of one small torch op, times the ops the forward pass
  issues per layer and per step (counted from ``model/llama.py`` and ``model/runner.py``).

Each number is the median of a few repeats (the typical rate, as the engine's steps will
see it on a shared machine), and it is what the engine can reach, so the efficiencies are
1.0: the calibration is the measurement. Nothing is fitted to the engine's step times. Measured once per process
(a second or two) and cached; ``this_cpu_profile(refresh=True)`` measures again.
"""
from __future__ import annotations

import os
import statistics
import threading
import time

from ..core.shapes import norm_name
from .gpus import GPUProfile

NAME = "this-cpu"
# How far the cost model misses this CPU's measured steps when given this profile (the last
# `inferlab bench clock --repeats 5 --out docs/figures`, 2026-11-30; BENCHMARKS.md): the
# this-cpu profile's error only (the GPU profiles' is measured against published runs,
# sim/published.py); tests/test_sim_validation.py checks it equals
# docs/figures/clock_validation.json, so a new run cannot leave it stale.
VALIDATED_ERROR = {"median": 0.28, "worst": 0.47}
# fp32 [tokens, in] x [in, out] products of the size small decoders run (SmolLM2-135M's
# 576/1536, and 1-2k wide layers), at a prefill-sized batch of rows.
SGEMM_SHAPES = ((512, 576, 1536), (512, 1536, 576), (512, 1024, 1024), (256, 2048, 2048))
STREAM_BYTES = 256 * 2**20          # 8x a 32 MB L3: the stream comes from DRAM
# Torch/numba calls the forward issues per layer. The engine's default path on this CPU is the
# fused forward (model/fused.py): the qkv/o/gate_up/down linears, two output buffers,
# the rotary + KV write kernel, attention, two residual-add + norm kernels, the SiLU-gate
# kernel and a reshape (12; its ~10 zero-copy .numpy() views are cheaper than a torch op).
# The op-by-op reference forward in model/llama.py issues ~24.
OPS_PER_LAYER = 12
# Per step outside the layers: input tensors built by the runner (~6), embedding, rotary
# tables (~8), final norm (~6), LM head, and greedy sampling (~10).
OPS_PER_STEP = 32

_lock = threading.Lock()
_cached: GPUProfile | None = None


def is_this_cpu(name) -> bool:
    return isinstance(name, str) and norm_name(name) == norm_name(NAME)


def timed(fn, repeats: int) -> list[float]:
    """Seconds of ``repeats`` calls of ``fn`` after one untimed warm-up call."""
    fn()                                                      # warm up (allocation, threads)
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def measure_sgemm_flops(shapes=SGEMM_SHAPES, repeats: int = 5) -> float:
    """fp32 matmul FLOP/s: per shape the median of ``repeats`` through torch's ``mm`` and
    through oneDNN with prepacked weights, the faster of the two; median over shapes. (The
    engine's own numba GEMM, kernels/gemm_cpu.py, is level with oneDNN at these prefill-sized
    shapes, within 1-6%, and faster at decode's 8-64 rows; sim/ does not import model/.)"""
    import torch
    dnn = torch.backends.mkldnn.is_available()
    rates = []
    for m, k, n in shapes:
        a, b = torch.randn(m, k), torch.randn(k, n)              # [m, k] x [k, n]
        dt = statistics.median(timed(lambda: torch.mm(a, b), repeats))
        if dnn:
            w = torch.ops.mkldnn._reorder_linear_weight(b.t().contiguous(), m)   # [n, k]
            dt = min(dt, statistics.median(timed(
                lambda: torch.ops.mkldnn._linear_pointwise(a, w, None, "none", [], ""), repeats)))
        rates.append(2.0 * m * k * n / dt)
    return statistics.median(rates)


def measure_bandwidth(nbytes: int = STREAM_BYTES, repeats: int = 5) -> dict[str, float]:
    """DRAM bandwidth (bytes/s) of a large copy (read + write) and a sum (read), each the
    median of ``repeats``; "bandwidth" is the faster of the two."""
    import torch
    x = torch.ones(nbytes // 4)                               # [n] fp32
    y = torch.empty_like(x)
    copy = 2.0 * nbytes / statistics.median(timed(lambda: y.copy_(x), repeats))
    read = 1.0 * nbytes / statistics.median(timed(lambda: x.sum(), repeats))
    return {"copy": copy, "read": read, "bandwidth": max(copy, read)}


def measure_op_latency(ops: int = 2000, repeats: int = 5) -> float:
    """Seconds one small torch op costs (dispatch, allocation), median of ``repeats`` loops."""
    import torch
    x = torch.ones(1, 64)

    def loop():
        for _ in range(ops):
            torch.add(x, 1.0)
    return statistics.median(timed(loop, repeats)) / ops


def memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):   # pragma: no cover - not POSIX
        return 0


def measure(sgemm_shapes=SGEMM_SHAPES, stream_bytes: int = STREAM_BYTES,
            repeats: int = 5) -> GPUProfile:
    """A fresh profile of this machine (not cached); small arguments make it quick (tests)."""
    import torch
    flops = measure_sgemm_flops(sgemm_shapes, repeats)
    bw = measure_bandwidth(stream_bytes, repeats)
    op = measure_op_latency(repeats=repeats)
    threads = torch.get_num_threads()
    return GPUProfile(
        NAME, bw["bandwidth"], flops, flops, flops, memory_bytes(),
        # one socket: "tensor parallel" would share the same memory bus
        bw["bandwidth"], "shared memory",
        flops_efficiency=1.0, bandwidth_efficiency=1.0,
        step_overhead_s=OPS_PER_STEP * op, layer_overhead_s=OPS_PER_LAYER * op,
        note=(f"measured here: sgemm {flops / 1e9:.0f} GFLOP/s fp32 on {threads} threads, "
              f"stream {bw['bandwidth'] / 1e9:.1f} GB/s (copy {bw['copy'] / 1e9:.1f}, "
              f"read {bw['read'] / 1e9:.1f}), {op * 1e6:.1f} us per small op"))


def this_cpu_profile(refresh: bool = False) -> GPUProfile:
    """This machine's profile, measured on first use in this process and then cached."""
    global _cached
    with _lock:
        if _cached is None or refresh:
            _cached = measure()
        return _cached
