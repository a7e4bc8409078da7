"""Two engines' frontiers over the same grid of knobs: ``inferlab serve`` and ``vllm serve``,
each point measured by vLLM's client (``inferlab.lab.sweep_vllm``), on the axes of the
sweep's frontier (``frontier.py``: output tokens/s per user, x; in total, y).

Each engine is a series of its own: its points (inferlab dark grey circles, vLLM light grey
diamonds) with their spread as error bars, and its Pareto frontier (inferlab a solid line,
vLLM a dashed one), labelled with the knobs that vary. With a carry-over (``carry_over``):
the objective's per-user floor is a dotted vertical line, each engine's best point is
ringed, and the title says what vLLM loses with the lab's best, every number computed from
the rows. Failed points are named under the title, as in the sweep's frontier.
"""
from __future__ import annotations

import plotly.graph_objects as go

from inferlab.lab import palette

from .frontier import (HEIGHT, HOVER, X, X_TITLE, Y, Y_TITLE, failed_note, frontier_points,
                       hover_text, plotted, sweep_clock, varying_knobs)
from .spec import Spec
from .timeline import ink

STYLE = {"inferlab": dict(colour="main", symbol="circle", dash="solid"),
         "vLLM": dict(colour="baseline", symbol="diamond", dash="dash")}


def _num(v) -> float | None:
    return None if v is None else float(v)


def _bars(rows, key, colour: str) -> dict:
    up, down = [], []
    for r in rows:
        v, s = _num(r["metrics"][key]), (r["metrics"].get("spread") or {}).get(key)
        up.append(max(_num(s[1]) - v, 0.0) if s else 0.0)
        down.append(max(v - _num(s[0]), 0.0) if s else 0.0)
    return dict(type="data", symmetric=False, array=up, arrayminus=down, color=colour,
                thickness=1.2, width=4, visible=any(up) or any(down))


def _xy(rows):
    return [_num(r["metrics"][X]) for r in rows], [_num(r["metrics"][Y]) for r in rows]


def headline(carry: dict | None) -> str:
    """The carry-over in one line, from ``carry_over``'s dict ('' without one)."""
    if not carry:
        return ""
    lab, vl, at = carry["best"]["inferlab"], carry["best"]["vLLM"], carry["vllm_at_lab_best"]
    if lab is None or vl is None:
        return "no point meets the objective on " + " and ".join(
            k for k in ("inferlab", "vLLM") if carry["best"][k] is None)
    if carry["same_point"]:
        return f"both engines' best is point {lab['point']}: the lab's best carries over"
    if at is None or carry["loss_pct"] is None:
        return f"vLLM did not run the lab's best, point {lab['point']}"
    return (f"vLLM with the lab's best (point {lab['point']}): {carry['loss_pct']:.0f}% "
            f"less in total than with its own (point {vl['point']})")


def spec(engines: dict[str, list[dict]], carry: dict | None = None, *,
         title: str | None = None, dark: bool = False) -> dict:
    """The figure dict: ``engines`` = {"inferlab": rows, "vLLM": rows} (the sweep's row
    shape), ``carry``: ``carry_over``'s dict or None."""
    shade = palette.on_dark if dark else (lambda c: c)
    everything = [r for rows in engines.values() for r in rows]
    names = varying_knobs(everything)
    fig = Spec()
    tops_x, tops_y = [1e-9], [1e-9]
    for engine, rows in engines.items():
        st = STYLE.get(engine, STYLE["vLLM"])
        colour = shade(palette.SERIES[st["colour"]])
        ok = [r for r in rows if plotted(r)]
        by = {r["point"]: r for r in ok}
        xs, ys = _xy(ok)
        fig.add(dict(type="scatter", mode="markers", name=f"{engine}: points",
                     x=xs, y=ys, customdata=[r["point"] for r in ok], cliponaxis=False,
                     error_x=_bars(ok, X, colour), error_y=_bars(ok, Y, colour),
                     marker=dict(color=colour, size=11, symbol=st["symbol"]),
                     hovertext=[f"<b>{engine}</b><br>" + hover_text(r, names) for r in ok],
                     hovertemplate=HOVER))
        fr = [by[p] for p in frontier_points(rows)]
        fx, fy = _xy(fr)
        fig.add(dict(type="scatter", mode="lines+markers+text", name=f"{engine}: frontier",
                     x=fx, y=fy, customdata=[r["point"] for r in fr], cliponaxis=False,
                     text=[", ".join(str((r.get("knobs") or {}).get(k, "")) for k in names)
                           for r in fr], textposition="top right",
                     textfont=dict(size=13, color=ink(dark)),
                     line=dict(color=colour, width=2.5, dash=st["dash"]),
                     marker=dict(color=colour, size=12, symbol=st["symbol"]),
                     hovertext=[f"<b>{engine}</b><br>" + hover_text(r, names) for r in fr],
                     hovertemplate=HOVER))
        for r in ok:
            s = r["metrics"].get("spread") or {}
            tops_x.append(_num((s.get(X) or [None, None])[1]) or _num(r["metrics"][X]))
            tops_y.append(_num((s.get(Y) or [None, None])[1]) or _num(r["metrics"][Y]))
    rings = []
    if carry:
        for engine in engines:
            b = carry["best"].get(engine)
            if b and b.get(X) is not None:
                rings.append((engine, b))
    fig.add(dict(type="scatter", mode="markers", name="each engine's best",
                 showlegend=bool(rings), x=[b[X] for _, b in rings], y=[b[Y] for _, b in rings],
                 customdata=[b["point"] for _, b in rings], cliponaxis=False,
                 marker=dict(symbol="circle-open", size=24, color=ink(dark),
                             line=dict(width=2.5, color=ink(dark))),
                 hovertext=[f"{e}'s best: point {b['point']}" for e, b in rings],
                 hovertemplate=HOVER))
    top_x, top_y = max(t for t in tops_x if t is not None), max(t for t in tops_y if t)
    floor = (carry or {}).get("min_per_user")
    if floor:
        top_x = max(top_x, floor)
        fig.add(dict(type="scatter", mode="lines", name=f"objective: ≥ {floor:g} per user",
                     x=[floor, floor], y=[0, top_y * 1.1], hoverinfo="skip",
                     line=dict(color=shade(palette.MUTED), width=1.5, dash="dot")))
    fig.xaxes(title=dict(text=X_TITLE), range=[0, top_x * 1.18], zeroline=False)
    fig.yaxes(title=dict(text=Y_TITLE), range=[0, top_y * 1.15], zeroline=False)
    if not any(plotted(r) for r in everything):
        fig.annotate(text="no point ran: nothing to plot", showarrow=False, x=0.5, y=0.5,
                     xref="paper", yref="paper", font=dict(size=14))
    heading = title or "inferlab and vLLM on the same grid: tokens/s in total against per user"
    line = headline(carry)
    heading += f"<br>{line}" if line else ""
    clock, _ = sweep_clock(everything)
    sups = ["clock: " + clock]
    notes = [failed_note(rows, names).replace(
        "not plotted: ", f"not plotted ({e}): ") for e, rows in engines.items()]
    sups += [n for n in notes if n]
    lines = heading.count("<br>") + 1
    fig.update_layout(height=HEIGHT, showlegend=True, hovermode="closest",
                      legend=dict(orientation="h", x=0.01, xanchor="left", y=0.01,
                                  yanchor="bottom", xref="container", yref="container"),
                      margin=dict(t=14 + 22 * lines + 17 * len(sups), r=30, b=120))
    out = fig.style(heading, None, dark=dark)
    out["layout"]["title"]["text"] += "".join(f"<br><sup>{s}</sup>" for s in sups)
    return out


def figure(engines, carry=None, *, title=None, dark=False) -> go.Figure:
    """The two engines' frontiers as a plotly figure (see ``spec``)."""
    return go.Figure(spec(engines, carry, title=title, dark=dark))
