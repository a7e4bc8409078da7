"""Chapter 9: the decode attention kernel, readable reference vs numba.

Decode attention reads every K and V of a sequence's context for each new token, through the
block table of the paged cache. The reference (torch) gathers the blocks into one tensor and
then runs softmax attention: two passes over memory. The numba kernel walks the block table
and does an online softmax in one pass. Here both run on the same shuffled caches at
SmolLM2-135M's attention shape; times are measured now, on this machine.

GPU numbers: the numba-CUDA kernels are tested in numba's CUDA simulator, but no GPU
measurement has been recorded (BENCHMARKS.md says so); this chapter reports that rather
than a guess, and marks what the bandwidth roof of a GPU would allow, labelled as an
estimate (the figures: ``_ch09_figures``).
"""
from __future__ import annotations

import os
import re
import statistics

from .. import measure_cache, protocol
from . import _ch09_decode_step as decode_step
from ._ch09_figures import bound_figure, kernel_figure  # noqa: F401 - notebooks: ch.bound_figure
from ..verdicts import (AFTER, FAILS, HOLDS, HOLDS_SMALLER, LABS_OWN, MQA, PAGED, UNMEASURABLE,
                       Claim, Verdict, clock_note, on_wall, wall_warning, worst, x)

TITLE = "The decode attention kernel: reference vs numba"
CLAIM = ("Decode attention is memory-bound: a kernel that reads the paged K/V once, in place, "
         "beats one that gathers the blocks first and then computes attention.")

GPU_FOR_ROOF = "H200"
# Decode attention's arithmetic per byte of K/V read, whatever the batch or context: each
# (token, kv head) brings 2 x 64 floats (512 bytes) and meets 3 query heads with a 64-long dot
# product and a 64-long weighted add each (3 x 4 x 64 = 768 FLOPs): 1.5 FLOPs per byte.
MEMORY_BOUND_SHARE = 0.5    # reading K/V at half the measured bandwidth or more: memory-bound
DRAM_MIN_MB = 64            # K/V this large comes from memory, not from the CPU's caches


def intensity(heads: int | None = None, kv_heads: int | None = None) -> float:
    """FLOPs per byte of fp32 K/V that decode attention does: 1.5 at SmolLM2's 9 query heads
    on 3 kv heads; 0.5 with one query head per kv head (multi-head attention)."""
    from . import _kernel_timing as bench
    heads, kv_heads = heads or bench.HEADS, kv_heads or bench.KV_HEADS
    return 4 * bench.HEAD_DIM * heads / (2 * kv_heads * bench.HEAD_DIM * 4)


def _probe_contexts(smoke: bool) -> list[int]:
    return [16384] if smoke else [16384, 65536]


def mha_probe(context: int, repeats: int) -> dict:
    """The numba kernel at batch 1 on a long context with one query head per kv head (9 and
    9, as in multi-head attention): a third of the arithmetic per byte of SmolLM2's shape,
    the most bytes per FLOP decode attention gets. Returns its time and K/V bandwidth."""
    import numpy as np

    from inferlab.core.shapes import cdiv
    from inferlab.kernels import numba_cpu
    from . import _kernel_timing as bench
    heads = kvh = bench.HEADS
    rng = np.random.default_rng(0)
    nblk = cdiv(context, bench.BLOCK)
    shape = (nblk, bench.BLOCK, kvh, bench.HEAD_DIM)
    kc = rng.standard_normal(shape, dtype=np.float32)
    vc = rng.standard_normal(shape, dtype=np.float32)
    q = rng.standard_normal((1, heads, bench.HEAD_DIM), dtype=np.float32)
    tables = rng.permutation(nblk).astype(np.int32).reshape(1, nblk)
    lens = np.full(1, context, np.int32)
    t = bench.median_time(lambda: numba_cpu.paged_attention_decode(
        q, kc, vc, tables, lens, bench.HEAD_DIM ** -0.5), repeats)
    kv_bytes = 2 * context * kvh * bench.HEAD_DIM * 4
    return {"context": context, "heads": heads, "kv_heads": kvh, "ms": t * 1e3,
            "gbs": kv_bytes / t / 1e9, "intensity": intensity(heads, kvh),
            "kv_mb": kv_bytes / 2 ** 20}


def matmul_gflops(n: int = 1024, repeats: int = 5) -> float:
    """This machine's fp32 arithmetic rate at its best: a large square matmul (torch)."""
    import torch

    from . import _kernel_timing as bench
    a, b = torch.randn(n, n), torch.randn(n, n)
    return 2 * n ** 3 / bench.median_time(lambda: a @ b, repeats) / 1e9


def _cases(smoke: bool) -> list[tuple[int, int]]:
    if smoke:
        return [(1, 512), (4, 512), (16, 512)]
    return [(b, c) for b in (1, 4, 16, 64) for c in (128, 512, 2048)]


def recorded_gpu_numbers(path: str | None = None) -> dict:
    """What BENCHMARKS.md records for the GPU kernels: {"recorded": bool, "note": str}."""
    path = path or os.path.join(os.path.dirname(__file__), "..", "..", "..", "BENCHMARKS.md")
    try:
        text = open(path, encoding="utf-8").read()
    except OSError:
        return {"recorded": False, "note": "BENCHMARKS.md is not next to this install"}
    m = re.search(r"^###? GPU[^\n]*$", text, re.M)
    if not m:
        return {"recorded": False, "note": "BENCHMARKS.md has no GPU section"}
    heading = m.group(0).lstrip("# ").strip()
    recorded = "not measured" not in heading.lower()
    return {"recorded": recorded, "note": heading}


@measure_cache.shared
def measure(smoke: bool = False, repeats: int | None = None, rounds: int | None = None,
            against: str = "reference") -> dict:
    """Each shape's benchmark (median of ``repeats`` calls per kernel) runs ``rounds`` times,
    the shapes interleaved (S1 S2 S3 S1 S2 S3 ...), under a busy check: every row holds the
    median over the rounds and the range of its speedup (``speedup_lo`` / ``speedup_hi``).
    ``against="numba"``: the kernel against itself (09-kernel's falsification)."""
    from inferlab.sim.gpus import BANDWIDTH_EFFICIENCY
    from inferlab.sim.profiles import get_gpu
    from . import _kernel_timing as bench
    repeats = repeats or (3 if smoke else 7)
    rounds = rounds or (2 if smoke else 3)
    res = protocol.compare({f"{b} x {c}": (lambda b=b, c=c: bench.bench_one(b, c, repeats,
                                                                          against))
                            for b, c in _cases(smoke)}, rounds)
    rows = []
    for reps in res.runs.values():
        row = dict(reps[0])
        for key in ("numba_ms", "ref_ms", "numba_gbs", "ref_gbs", "max_err"):
            row[key] = protocol.spread(r[key] for r in reps).median
        sp = protocol.spread(r["speedup"] for r in reps)
        row.update(speedup=sp.median, speedup_lo=sp.lo, speedup_hi=sp.hi)
        rows.append(row)
    gpu = get_gpu(GPU_FOR_ROOF)
    for r in rows:
        kv_bytes = 2 * r["batch"] * r["context"] * bench.KV_HEADS * bench.HEAD_DIM * 4
        # not a measurement: the time a kernel at 80% of the GPU's HBM bandwidth would need
        r["gpu_roof_ms"] = kv_bytes / (gpu.hbm_bandwidth * BANDWIDTH_EFFICIENCY) * 1e3
    machine = _machine(smoke, repeats)
    decode = decode_step.measure(machine, smoke, rounds)
    for r in rows:
        r["numba_gflops"] = intensity() * r["numba_gbs"]      # GB/s x FLOPs per byte
        r["kv_mb"] = 2 * r["batch"] * r["context"] * bench.KV_HEADS * bench.HEAD_DIM * 4 / 2 ** 20
        r["share_of_bandwidth"] = r["numba_gbs"] / machine["read_gbs"]
    return {"rows": rows, "repeats": repeats, "rounds": rounds, "gpu": recorded_gpu_numbers(),
            "clock": "wall (this machine's CPU)", "roof_gpu": GPU_FOR_ROOF, "wall": res.meta(),
            "machine": machine, "intensity": intensity(), "decode_step": decode,
            "gpu_ridge": gpu.peak_flops(2) / gpu.hbm_bandwidth}


def _machine(smoke: bool, repeats: int) -> dict:
    """This machine's memory bandwidth (a parallel read of a buffer far larger than the
    caches) and arithmetic rate (a large matmul), so its ridge point (FLOPs per byte above
    which arithmetic, not memory, is the limit); and the kernel where decode attention has the
    most bytes per FLOP. Under a busy check of its own."""
    from . import _kernel_timing as bench
    with protocol.BusyCheck() as chk:
        bw = bench.memory_bandwidth(128 if smoke else 256)
        peak = matmul_gflops()
        probes = [mha_probe(c, repeats) for c in _probe_contexts(smoke)]
    for r in probes:
        r["share_of_bandwidth"] = r["gbs"] / bw["read_gbs"]
    return {"read_gbs": bw["read_gbs"], "copy_gbs": bw["copy_gbs"], "matmul_gflops": peak,
            "ridge": peak / bw["read_gbs"], "probes": probes, "warning": chk.warning}


def from_memory(data: dict) -> list[dict]:
    """The measurements whose K/V is too large for the caches, as (label, GB/s, share of the
    memory bandwidth, FLOPs per byte): only these say whether memory is the limit."""
    out = [{"label": f"{r['batch']}x{r['context']}", "gbs": r["numba_gbs"],
            "share": r["share_of_bandwidth"], "intensity": data["intensity"]}
           for r in data["rows"] if r["kv_mb"] >= DRAM_MIN_MB]
    out += [{"label": f"1x{r['context']}, one q head per kv head", "gbs": r["gbs"],
             "share": r["share_of_bandwidth"], "intensity": r["intensity"]}
            for r in data["machine"]["probes"] if r["kv_mb"] >= DRAM_MIN_MB]
    return out


def bound_text(data: dict) -> str:
    """Is decode attention memory-bound on this machine? In this run's numbers."""
    m, rows = data["machine"], data["rows"]
    i = data["intensity"]
    cached = [r for r in rows if r["kv_mb"] < DRAM_MIN_MB]
    above = i > m["ridge"]
    text = (f"decode attention does {i:.1f} FLOPs per byte of K/V at SmolLM2's shape, at "
            f"every batch and context (no K/V is shared between sequences). An "
            f"{data['roof_gpu']} turns compute-bound only above {data['gpu_ridge']:.0f} FLOPs "
            f"per byte (datasheet), so there decode attention is memory-bound by a wide margin. "
            f"This CPU, measured now: {m['read_gbs']:.0f} GB/s from memory and "
            f"{m['matmul_gflops']:.0f} GFLOP/s in a large matmul, a ridge of "
            f"{m['ridge']:.2f} FLOPs per byte: {i:.1f} is "
            + (f"above it, so even at the matmul's rate the arithmetic outlasts the reading; "
               if above else f"below it, so it is memory-bound only if the arithmetic keeps "
               f"up, at {i * m['read_gbs']:.0f} GFLOP/s; ")
            + "the numba kernel's scalar loop (three exp calls and six 64-long loops per token "
            "and kv head) does ")
    if cached:
        best = max(cached, key=lambda r: r["numba_gflops"])
        text += (f"{best['numba_gflops']:.0f} GFLOP/s at best ({best['batch']}x"
                 f"{best['context']}, K/V in the caches). ")
    parts = []
    for r in from_memory(data):
        parts.append(f"{r['label']} ({r['intensity']:.1f} FLOPs per byte) reads K/V from "
                     f"memory at {r['gbs']:.1f} GB/s, {r['share']:.0%} of the bandwidth: "
                     + ("memory-bound" if r["share"] >= MEMORY_BOUND_SHARE else
                        "its arithmetic, not memory, is the limit"))
    text += "; ".join(parts) if parts else (f"No shape here has K/V over {DRAM_MIN_MB} MB, "
                                            "so none reads from memory")
    return text + (". Reading the paged blocks in place wins by skipping the reference's "
                   "extra copy of the K/V")


def figure(data: dict):
    """Reference vs numba per batch x context, and the speedup (``_ch09_figures``)."""
    return kernel_figure(data)


def summary(data: dict) -> str:
    rows = data["rows"]
    sp = [r["speedup"] for r in rows]
    gpu = "recorded" if data["gpu"]["recorded"] else "none recorded yet"
    per = ", ".join(f"{r['batch']}x{r['context']} {r['speedup']:.1f}x"
                    + (f" [{r['speedup_lo']:.1f}-{r['speedup_hi']:.1f}]" if "speedup_lo" in r
                       else "") for r in rows)
    how = (f"median of {data['repeats']} calls, {data['rounds']} interleaved rounds"
           if "rounds" in data else f"median of {data['repeats']} calls")
    return (f"numba-cpu vs reference: {min(sp):.1f}x to {max(sp):.1f}x faster over "
            f"{len(sp)} shapes ({how}): {per}; GPU numbers: {gpu} "
            f"[clock: {protocol.label(data['clock'])}]" + protocol.warning_line(data.get("wall"))
            + ("\n" + bound_text(data) + protocol.warning_line(data["machine"])
               if "machine" in data else ""))


# --- the chapter's claims: how each is measured and judged --------------------------------------
def measure_for_claims(smoke: bool) -> dict:
    """The measurement every claim below is judged on (``claims.run_all``)."""
    return measure(smoke=smoke)          # wall clock, protocol


def judge_kernel(d: dict) -> Verdict:
    rows = d["rows"]
    sp = [r["speedup"] for r in rows]
    med, wins, warning = statistics.median(sp), sum(s > 1 for s in sp), wall_warning(d)
    every = HOLDS if wins == len(sp) else HOLDS_SMALLER if 2 * wins > len(sp) else FAILS
    v = worst(on_wall(med, clear=1.2), every)
    slower = ", ".join(f"{r['batch']}x{r['context']} {x(r['speedup'])}" for r in rows
                       if r["speedup"] <= 1)
    if warning and 0.8 < med < 1.25:        # a busy machine's noise is as big as the effect
        v = UNMEASURABLE
    gpu = "" if d["gpu"]["recorded"] else "; no GPU kernel numbers recorded (CPU only)"
    return Verdict(v, f"numba reading the paged K/V in place vs torch gathering it first: "
                   f"median {x(med)} faster over {len(sp)} shapes ({min(sp):.2f}-{max(sp):.2f}x; "
                   f"faster in {wins} of {len(sp)}"
                   + (f"; slower at batch x context {slower}" if slower else "")
                   + f"){gpu} {clock_note(d['clock'])}",
                   measured=f"{x(med)} (median)", warning=warning,
                   points=tuple((f"{r['batch']}x{r['context']}", r["speedup"]) for r in rows),
                   unit="speedup, numba / reference (x), per batch x context",
                   clock=d["clock"])


def judge_memory_bound(d: dict) -> Verdict:
    """The whole decode step (``_ch09_decode_step.judge``); the attention kernel's own share
    of the bandwidth, where its K/V comes from memory, is a clause of the reason."""
    shares = [r["share"] for r in from_memory(d)]
    attention = (f"the attention kernel alone reads K/V from memory at up to "
                 f"{max(shares):.0%} of the bandwidth" if shares else
                 f"no attention shape here has K/V over {DRAM_MIN_MB} MB (none reads memory)")
    return decode_step.judge(d.get("decode_step"), attention, d["clock"],
                             d["machine"].get("warning") or wall_warning(d))


CLAIMS = (
    Claim("09-kernel", "A decode attention kernel that reads the paged K/V once, in place, "
          "beats gathering the blocks into one tensor first.",
          f"the in-place kernel: {PAGED}; the comparison with a gather: {LABS_OWN}", "ch09_kernels",
          measure_for_claims, judge_kernel),
    Claim("09-memory-bound", "Decoding is limited by memory traffic: each step reads every "
          "weight (and the K/V) to make one token per sequence, little arithmetic per byte, so "
          "at small batches reading memory sets its time; a large batch turns it around.",
          f"{AFTER} (decode \"can be dominated by memory movement\"); {MQA}", "ch09_kernels",
          measure_for_claims, judge_memory_bound),
)
