"""Chapter 9: the decode attention kernel, readable reference vs numba.

Decode attention reads every K and V of a sequence's context for each new token, through the
block table of the paged cache. The reference (torch) gathers the blocks into one tensor and
then runs softmax attention: two passes over memory. The numba kernel walks the block table
and does an online softmax in one pass. Here both run on the same shuffled caches at
SmolLM2-135M's attention shape; times are measured now, on this machine.

GPU numbers: the numba-CUDA kernels are tested in numba's CUDA simulator, but no GPU
measurement has been recorded (BENCHMARKS.md says so); this chapter reports that rather
than a guess, and shows what the bandwidth roof of a GPU would allow, labelled as such.
"""
from __future__ import annotations

import os
import re

from .. import palette, protocol

TITLE = "The decode attention kernel: reference vs numba"
CLAIM = ("Decode attention is memory-bound: a kernel that reads the paged K/V once, in place, "
         "beats one that gathers the blocks first and then computes attention.")

GPU_FOR_ROOF = "H200"


def _cases(smoke: bool) -> list[tuple[int, int]]:
    if smoke:
        return [(1, 512), (4, 512), (16, 512)]
    return [(b, c) for b in (1, 4, 16, 64) for c in (128, 512, 2048)]


def recorded_gpu_numbers(path: str | None = None) -> dict:
    """What BENCHMARKS.md records for the GPU kernels: {"recorded": bool, "note": str}."""
    path = path or os.path.join(os.path.dirname(__file__), "..", "..", "BENCHMARKS.md")
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


def measure(smoke: bool = False, repeats: int | None = None, rounds: int | None = None) -> dict:
    """Each shape's benchmark (median of ``repeats`` calls per kernel) runs ``rounds`` times,
    the shapes interleaved (S1 S2 S3 S1 S2 S3 ...), under a busy check: every row holds the
    median over the rounds and the range of its speedup (``speedup_lo`` / ``speedup_hi``)."""
    from inferlab.sim.gpus import BANDWIDTH_EFFICIENCY, get_gpu
    from inferlab.kernels import bench
    repeats = repeats or (3 if smoke else 7)
    rounds = rounds or (2 if smoke else 3)
    res = protocol.compare({f"{b} x {c}": (lambda b=b, c=c: bench.bench_one(b, c, repeats))
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
    return {"rows": rows, "repeats": repeats, "rounds": rounds, "gpu": recorded_gpu_numbers(),
            "clock": "wall (this machine's CPU)", "roof_gpu": GPU_FOR_ROOF, "wall": res.meta()}


def figure(data: dict):
    import plotly.graph_objects as go

    from .. import figures as ilf
    from . import _kit
    rows = data["rows"]
    x = [f"{r['batch']} x {r['context']}" for r in rows]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=x, y=[r["ref_ms"] for r in rows], name="reference (torch gather)",
                         marker_color=ilf.PALETTE[5]))
    fig.add_trace(go.Bar(x=x, y=[r["numba_ms"] for r in rows], name="numba-cpu (in place)",
                         marker_color=ilf.PALETTE[0],
                         text=[f"{r['speedup']:.1f}x" for r in rows], textposition="outside"))
    fig.add_trace(go.Scatter(x=x, y=[r["gpu_roof_ms"] for r in rows], mode="markers",
                             marker=dict(symbol="line-ew-open", size=18, color=palette.MUTED),
                             name=f"{data['roof_gpu']} bandwidth roof (estimate, not measured)"))
    fig.update_yaxes(type="log", title_text="ms per decode step (log)")
    fig.update_xaxes(title_text="batch x context tokens (SmolLM2-135M attention, fp32)")
    gpu = data["gpu"]
    note = ("GPU kernel numbers recorded: see BENCHMARKS.md" if gpu["recorded"] else
            f"No GPU kernel numbers recorded yet ({gpu['note']})")
    fig.update_layout(barmode="group")
    _kit.style(fig, "Paged decode attention: reference vs numba kernel", data["clock"])
    fig.add_annotation(text=note, xref="paper", yref="paper", x=0, y=1.0, yanchor="bottom",
                       showarrow=False, xanchor="left", font=dict(size=11, color=palette.MUTED_TEXT))
    return fig


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
            f"[clock: {protocol.label(data['clock'])}]" + protocol.warning_line(data.get("wall")))
