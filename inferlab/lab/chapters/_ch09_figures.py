"""Chapter 9's figures, drawn from its measurement (``ch09_kernels.measure``):

* ``kernel_figure`` (the chapter's figure): each shape's time per decode step for the torch
  reference (gathers the paged blocks, then attends) and the numba kernel (reads them in
  place), joined by a line, with a GPU's bandwidth estimate marked beside them; on the right,
  how many times faster numba is, with the range of the rounds;
* ``bound_figure``: the K/V bandwidth the numba kernel reaches per shape against this
  machine's measured memory bandwidth (is decode attention memory-bound here?).

Times are dots on a log axis (they span from microseconds to tens of milliseconds), the
speedup a linear one; every colour is a neutral grey (a kernel is none of the palette's
meanings). Every number written in them is read from the measurement.
"""
from __future__ import annotations

from .. import figures as ilf
from .. import palette
from . import _kit


def _label(r: dict) -> str:
    return f"{r['batch']} × {r['context']:,}"


def _x(v: float) -> str:
    return f"{v:.1f}x"


def kernel_figure(data: dict):
    """Reference vs numba per batch x context: the times (dots, log ms) and the speedup."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from inferlab.sim.gpus import BANDWIDTH_EFFICIENCY
    rows = data["rows"]
    y = [_label(r) for r in rows]
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, column_widths=[0.7, 0.3],
                        horizontal_spacing=0.03)
    # each shape's two kernels joined: the gap between the dots is what reading in place saves
    lx, ly = [], []
    for r, label in zip(rows, y):
        lx += [r["ref_ms"], r["numba_ms"], None]
        ly += [label, label, None]
    fig.add_trace(go.Scatter(x=lx, y=ly, mode="lines", showlegend=False, hoverinfo="skip",
                             line=dict(color=palette.SERIES["band"], width=4)), 1, 1)
    fig.add_trace(go.Scatter(x=[r["ref_ms"] for r in rows], y=y, mode="markers",
                             name="torch reference: gathers the blocks, then attends",
                             marker=dict(size=12, color=palette.SERIES["baseline"])), 1, 1)
    fig.add_trace(go.Scatter(x=[r["numba_ms"] for r in rows], y=y, mode="markers",
                             name="numba: reads the paged blocks in place",
                             marker=dict(size=12, color=palette.SERIES["main"])), 1, 1)
    fig.add_trace(go.Scatter(
        x=[r["gpu_roof_ms"] for r in rows], y=y, mode="markers",
        name=f"{data['roof_gpu']} reading the K/V at {BANDWIDTH_EFFICIENCY:.0%} of its "
             "datasheet bandwidth (estimate)",
        marker=dict(size=11, symbol="diamond-open", color=palette.INK,
                    line=dict(width=1.5, color=palette.INK))), 1, 1)
    ilf.log_axis(fig, "x", [v for r in rows for v in (r["ref_ms"], r["numba_ms"],
                                                      r["gpu_roof_ms"])],
                 title="ms per decode step (log scale)", row=1, col=1, pad=0.04)
    # the speedup, with the range of the interleaved rounds
    sp = [r["speedup"] for r in rows]
    hi = [r.get("speedup_hi", r["speedup"]) for r in rows]
    lo = [r.get("speedup_lo", r["speedup"]) for r in rows]
    top = max(hi) * 1.12
    fig.add_trace(go.Scatter(
        x=sp, y=y, mode="markers", name="numba's speedup (range of the rounds)",
        showlegend=False, marker=dict(size=10, color=palette.SERIES["main"]),
        error_x=dict(type="data", symmetric=False, array=[h - s for h, s in zip(hi, sp)],
                     arrayminus=[s - v for s, v in zip(sp, lo)], color=palette.MUTED,
                     thickness=1.5, width=0)), 1, 2)
    # the ratios in a column of their own, clear of the dots and their ranges
    fig.add_trace(go.Scatter(x=[top] * len(rows), y=y, mode="text", text=[_x(s) for s in sp],
                             textposition="middle right", showlegend=False, hoverinfo="skip",
                             textfont=dict(size=13, color=palette.INK)), 1, 2)
    step = 5 if top > 8 else 2
    fig.update_xaxes(title_text="times faster (x)", range=[0, top * 1.35], row=1, col=2,
                     tickvals=list(range(0, int(top) + 1, step)))
    fig.update_yaxes(autorange="reversed", title_text="batch × context tokens", row=1, col=1)
    fig.update_yaxes(automargin=True, row=1, col=1)
    fig.update_yaxes(showgrid=False, ticks="", row=1, col=2)
    fig.update_layout(height=560)
    title = (f"Reading the paged K/V in place: numba {_x(min(sp))} to {_x(max(sp))} "
             "faster than gathering it")
    gpu = data["gpu"]
    notes = ["SmolLM2-135M attention, fp32", f"The {data['roof_gpu']} mark: an estimate "
             "from its datasheet, not a measurement"]
    if gpu.get("recorded"):
        notes.append(f"GPU kernel timings: BENCHMARKS.md ({gpu['note']})")
    _kit.style(fig, title, " · ".join([data["clock"], *notes]))
    fig.update_layout(margin=dict(t=80, b=120, l=90, r=20), legend=dict(y=-0.16))
    return fig


def bound_figure(data: dict):
    """K/V bandwidth reached per shape by the numba kernel, and the machine's measured memory
    bandwidth: how far from memory-bound the kernel runs."""
    import plotly.graph_objects as go
    m, rows = data["machine"], data["rows"]
    fig = go.Figure()
    # one row per shape (horizontal bars: a dozen shape labels never crowd an x axis)
    fig.add_trace(go.Bar(y=[f"{r['batch']} × {r['context']:,}" for r in rows],
                         x=[r["numba_gbs"] for r in rows], orientation="h",
                         name=f"SmolLM2 shape (9 q / 3 kv heads, {data['intensity']:.1f} FLOP/B)",
                         marker_color=palette.SERIES["main"], textposition="outside",
                         text=[f"{r['share_of_bandwidth']:.0%}" for r in rows]))
    fig.add_trace(go.Bar(y=[f"1 × {r['context']:,}" for r in m["probes"]],
                         x=[r["gbs"] for r in m["probes"]], orientation="h",
                         name=f"one q head per kv head ({m['probes'][0]['intensity']:.1f} FLOP/B)",
                         marker_color=palette.SERIES["baseline"], textposition="outside",
                         text=[f"{r['share_of_bandwidth']:.0%}" for r in m["probes"]]))
    fig.add_vline(x=m["read_gbs"], line_dash="dot", line_color=palette.INK,
                  annotation_text=f"measured memory bandwidth {m['read_gbs']:.0f} GB/s",
                  annotation_position="bottom left")
    fig.update_xaxes(title_text="K/V read by the numba kernel (GB/s; labels: % of the "
                     "measured bandwidth)", rangemode="tozero",
                     range=[0, max([m["read_gbs"], *(r["numba_gbs"] for r in rows),
                                    *(r["gbs"] for r in m["probes"])]) * 1.18])
    fig.update_yaxes(title_text="batch × context tokens", autorange="reversed",
                     automargin=True)
    _kit.style(fig, "Is decode attention memory-bound here? K/V bandwidth reached",
               data["clock"] + f" · ridge point {m['ridge']:.1f} FLOP/B")
    fig.update_layout(height=140 + 30 * (len(rows) + len(m["probes"])))
    return fig
