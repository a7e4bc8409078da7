"""Chapter 15's figures, one point each (``ch15_memory_and_price.figures``):

* ``price_figure`` (the main one): what a generated token costs over a prompt token, measured
  here at batch 1 and at a full batch, beside the output / input ratio of public list prices
  (markers, never bars beside the measurement);
* ``capacity_figure``: one KV budget, long and short requests: the slots the running
  requests hold in it, and how many run at once;
* ``memory_figure``: where the memory goes, the process measured here (MB) and, on its own
  axis, the projection for an 8B model on an 80 GB GPU (GB).

Every number written in them is read from the measurement; a measurement wears a neutral
grey, the model's parts their palette colours (``palette.PART``), the KV cache its blocks'.
"""
from __future__ import annotations

from .. import palette
from . import _kit
from ._ch15_price import published_ratios

# the model's parts (palette.PART), the KV cache by its blocks' states, the rest in greys;
# the weights' copy packed for the engine's GEMM is the weights' colour, hatched
PART_COLORS = {"weights": palette.PART["weights"],
               "weights: the engine's packed copy for its GEMM": palette.PART["weights"],
               "KV cache, holding tokens": palette.CACHE["used"],
               "KV cache, reserved and free": palette.CACHE["free"],
               "activations and workspace": palette.PART["activations"],
               "everything else": palette.SERIES["baseline"],
               "GPU memory left free": palette.SERIES["band"]}
PACKED = "weights: the engine's packed copy for its GEMM"
PAGE = palette.NEUTRAL["light"]["bg"]   # the page: gaps between segments, the packed hatch
SEGMENT_TEXT = 14          # px: a segment's size is written in it only when it fits at this


def _ratio(v: float) -> str:
    return f"{v:.0f}x" if v == int(v) else f"{v:.1f}x"


def _frame(fig, title: str, clock: str, height: int, margin: dict | None = None):
    """The house style, the legend at the foot of the canvas under the axis title (where
    the article profile puts it too)."""
    _kit.style(fig, title, clock)
    fig.update_layout(height=height, margin={**dict(t=80, b=120, l=70, r=30), **(margin or {})},
                      legend=dict(orientation="h", x=0, xanchor="left", y=0, yanchor="bottom",
                                  yref="container"))
    return fig


def price_figure(data: dict):
    """The cost ratio of a generated token to a prompt token: measured here (dots with the
    range of the repeats) and in public list prices (open diamonds), one row each."""
    import plotly.graph_objects as go
    p = data["price"]
    rows, pub = p["rows"], published_ratios()
    here = [f"here, {r['arm']}<br>{r['decode'] * 1e3:.1f} ms vs {r['prefill'] * 1e3:.2f} ms"
            for r in rows]
    fig = go.Figure()
    fig.add_trace(go.Scatter(
        x=[r["ratio"] for r in rows], y=here, mode="markers+text",
        text=[_ratio(r["ratio"]) for r in rows], textposition="top center",
        name=f"measured here, {p['model']} (generated / prompt token, ms each)",
        marker=dict(size=13, color=palette.SERIES["main"]),
        error_x=dict(type="data", symmetric=False, color=palette.MUTED, thickness=1.5, width=4,
                     array=[r["ratio_hi"] - r["ratio"] for r in rows],
                     arrayminus=[r["ratio"] - r["ratio_lo"] for r in rows])))
    fig.add_trace(go.Scatter(
        x=[v for _, v in pub], y=[m for m, _ in pub], mode="markers+text",
        text=[_ratio(v) for _, v in pub], textposition="middle right",
        name="published list prices (output / input, $ per token)",
        marker=dict(size=13, symbol="diamond-open", color=palette.INK,
                    line=dict(width=1.5, color=palette.INK))))
    fig.add_vline(x=1, line=dict(color=palette.MUTED, dash="dot", width=1.5),
                  annotation_text="same cost", annotation_position="bottom right")
    top = max([r["ratio_hi"] for r in rows] + [v for _, v in pub])
    fig.update_xaxes(title_text="a generated token's cost over a prompt token's (x)",
                     range=[0, top * 1.12], rangemode="tozero")
    # rows top down, with room above the first for its label
    fig.update_yaxes(range=[len(rows) + len(pub) - 0.5, -0.9], automargin=True, showgrid=False)
    one, full = rows[0], rows[-1]
    title = (f"A generated token costs {_ratio(one['ratio'])} a prompt token here at "
             f"{one['arm']}, {_ratio(full['ratio'])} at {full['arm']}")
    return _frame(fig, title, f"{p['label']} · {p['prompt_len']}-token prompts, "
                  f"{p['decode_tokens']} generated each · list prices: OpenAI and Anthropic "
                  "pricing pages", 500)


def capacity_figure(data: dict):
    """One KV budget, two workloads: each running request's slots in it (context and answer,
    whole blocks), what is left free, and how many of the requests ran at once."""
    import plotly.graph_objects as go
    c = data["capacity"]
    lo, sh = c["long"], c["short"]
    block = lo["budget_tokens"] // lo["budget_blocks"]
    fig = go.Figure()
    labels = []
    for i, r in enumerate((sh, lo)):
        wait = r["requests"] - r["max_running"]
        label = (f"{r['context']:,}-token requests:<br>{r['max_running']} of {r['requests']} "
                 "at once" + (f", {wait} wait" if wait else ""))
        labels.append(label)
        slots = -(-(r["context"] + r["decode"]) // block) * block
        fig.add_trace(go.Bar(
            x=[slots] * r["max_running"], y=[label] * r["max_running"],
            base=[k * slots for k in range(r["max_running"])], orientation="h",
            name="KV cache, holding a running request's tokens", showlegend=i == 0,
            legendgroup="used", width=0.6, hovertemplate="%{x:,} slots<extra></extra>",
            marker=dict(color=palette.CACHE["used"], line=dict(color=PAGE, width=1.5))))
        used = slots * r["max_running"]
        if used < r["budget_tokens"]:
            fig.add_trace(go.Bar(
                x=[r["budget_tokens"] - used], y=[label], base=[used], orientation="h",
                name="KV cache, reserved and free", legendgroup="free", width=0.6,
                marker=dict(color=palette.CACHE["free"], line=dict(color=palette.MUTED,
                                                                     width=1))))
    fig.update_layout(barmode="overlay", bargap=0.3)
    fig.update_xaxes(title_text=f"token slots of the KV budget ({lo['budget_tokens']:,} slots, "
                     f"{lo['kv_budget_bytes'] / 2 ** 20:.0f} MiB)", range=[0, lo["budget_tokens"]],
                     showgrid=False)
    fig.update_yaxes(autorange="reversed", automargin=True, categoryorder="array",
                     categoryarray=labels)
    p8 = next((p for p in c["projection"] if p["model"] == "llama-3-8b"), None)
    note = ""
    if p8:
        n, k = max(p8["fit"].items(), key=lambda kv: int(kv[0]))
        note = (f" · projection: llama-3-8b in bf16 on an 80 GB GPU holds {k} contexts of "
                f"{int(n):,} tokens beside its weights")
    title = (f"One KV budget: {sh['max_running']} of {sh['requests']} short requests at once, "
             f"{lo['max_running']} of {lo['requests']} long ones")
    return _frame(fig, title, f"none: block counts from the engine's allocator ({lo['model']}, "
                  f"fp32, blocks of {block} tokens){note}", 400, dict(l=90))


def memory_bars(m: dict) -> dict:
    """The memory figure's bars: {label: {part: bytes}}, the KV cache split by use and the
    weights' packed copy apart where the measurement has it."""
    p = m["projection"]

    def split(parts, used, packed=0):
        out = {}
        for k, v in parts.items():
            if k == "weights":
                out["weights"] = v - packed
                if packed:
                    out[PACKED] = packed
            elif k == "KV cache":
                out["KV cache, holding tokens"] = used
                out["KV cache, reserved and free"] = v - used
            else:
                out[k] = v
        return out
    packed = m.get("weights_packed", 0)
    peak = f"at its peak,<br>{m['load']['requests']} requests"
    return {"idle": split(m["parts_idle"], 0, packed),
            peak: split(m["parts_load"], m["kv_peak_used"], packed),
            f"{p['model']},<br>bf16": {**split(p["parts"], 0), "GPU memory left free": p["free"]}}


def memory_figure(data: dict):
    """Where the memory goes: the process measured here (MB, idle and at its peak) and, on
    an axis of its own, the projection for an 8B model on an 80 GB GPU (GB)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots
    m = data["memory"]
    p = m["projection"]
    bars = memory_bars(m)
    labels = list(bars)
    load = m["parts_load"]
    share = (load["weights"] + load["KV cache"]) / sum(load.values())
    pshare = (p["parts"]["weights"] + p["parts"]["KV cache"]) / p["gpu_bytes"]
    fig = make_subplots(rows=2, cols=1, row_heights=[0.62, 0.38], vertical_spacing=0.22,
                        subplot_titles=(
                            f"measured: {m['model']} in a process of its own",
                            f"projection: an {p['gpu_bytes'] / 1e9:.0f} GB GPU, weights and "
                            f"KV cache {pshare:.0%} of it"))
    shown = set()
    for row, unit, scale, group in ((1, "MB", 1e6, labels[:2]), (2, "GB", 1e9, labels[2:])):
        for part, color in PART_COLORS.items():
            ys = [g for g in group if bars[g].get(part, 0) > 0]
            if not ys:
                continue
            xs = [bars[g][part] / scale for g in ys]
            starts = [sum(v for k, v in bars[g].items() if list(PART_COLORS).index(k)
                          < list(PART_COLORS).index(part)) / scale for g in ys]
            fig.add_trace(go.Bar(
                x=xs, y=ys, base=starts, orientation="h", name=part, legendgroup=part,
                showlegend=part not in shown, text=[f"{v:,.0f} {unit}" for v in xs],
                textposition="inside", insidetextanchor="middle", textangle=0,
                textfont=dict(size=SEGMENT_TEXT), width=0.7,
                marker=dict(color=color, line=dict(color=palette.MUTED, width=1),
                            pattern=dict(shape="/", fgcolor=PAGE, fgopacity=0.5,
                                         fillmode="overlay")
                            if part == PACKED else None)), row, 1)
            shown.add(part)
    fig.update_layout(barmode="overlay", uniformtext=dict(mode="hide", minsize=SEGMENT_TEXT))
    # the units on the ticks: two axes, two units, no axis title to crowd the legend
    fig.update_xaxes(ticksuffix=" MB", rangemode="tozero", row=1, col=1)
    fig.update_xaxes(ticksuffix=" GB", range=[0, p["gpu_bytes"] / 1e9], row=2, col=1)
    fig.update_yaxes(autorange="reversed", automargin=True, showgrid=False)
    title = (f"Where the memory goes: weights and KV cache are {share:.0%} of the process at "
             "its peak")
    return _frame(fig, title, f"none: bytes resident ({m['peak_from']}), split by the engine's "
                  f"tensor sizes · weights twice: the tensors and their copy packed for the "
                  f"{m['linear_backend']} GEMM", 560, dict(l=110))
