"""The token stream: every request's output tokens as ticks on one time axis.

One row per request in arrival order (first at the top), every request shown: the figure
grows by one lane per request instead of squeezing or cutting rows. A bar in the queued
colour runs from the request's arrival to its first token (the time to first token, TTFT:
queueing plus prefill); then one tick per token where it came out, the first in the prefill
colour (the prefill step produces it), the rest in the decode colour, so the gaps between
ticks are the inter-token latencies. Hover the bar for the request's prompt and its whole
answer, a tick for that token, its time and the text around it.
"""
from __future__ import annotations

import html

import plotly.graph_objects as go

from inferlab.lab import palette

from .timeline import LANE_PX, fmt_time, request_axis, time_axis, time_unit

WRAP = 72            # characters per hover line
TEXT_MAX = 600       # characters of prompt or answer shown on hover
CONTEXT = 60         # characters of answer before a token, on the token's hover


def _wrap(text: str, limit: int = TEXT_MAX) -> str:
    """Hover-safe text: escaped, the end kept when long, broken into lines."""
    text = text if len(text) <= limit else "..." + text[-limit:]
    text = html.escape(text.replace("\n", " "))
    return "<br>".join(text[i:i + WRAP] for i in range(0, len(text), WRAP)) or "(empty)"


def height_for(n: int, top: int = 100, bottom: int = 55) -> int:
    """Every request gets a lane of LANE_PX: the figure grows instead of cutting rows."""
    return top + bottom + max(n, 3) * LANE_PX


def token_raster(rows, title: str = "Token stream", clock: str | None = None,
                 dark: bool = False) -> go.Figure:
    """``rows``: dicts with request_id, arrival, times (token times), texts, and optionally
    prompt; times in seconds from the view's t0. Rows keep their order (arrival order)."""
    from inferlab.lab.figures import style
    ids = [r["request_id"] for r in rows]
    span = max([t for r in rows for t in r["times"]] + [r["arrival"] for r in rows] + [0.0])
    f, unit = time_unit(span)
    fig = go.Figure()
    waiting = [r for r in rows if r["times"]]
    if waiting:                              # arrival -> first token, hover: the whole text
        fig.add_trace(go.Bar(
            orientation="h", name="waiting for the first token (TTFT)",
            y=[r["request_id"] for r in waiting], base=[r["arrival"] * f for r in waiting],
            x=[max(r["times"][0] - r["arrival"], 0.0) * f for r in waiting],
            marker=dict(color=palette.PHASE["queued"], line_width=0), width=0.45,
            customdata=[[fmt_time(r["times"][0] - r["arrival"], unit), len(r["times"]),
                         _wrap(r.get("prompt") or ""), _wrap("".join(r["texts"]))]
                        for r in waiting],
            hovertemplate="<b>%{y}</b>: first token after %{customdata[0]}, "
                          "%{customdata[1]} tokens<br><b>prompt</b> %{customdata[2]}"
                          "<br><b>answer</b> %{customdata[3]}<extra></extra>"))
    for first, name, phase in ((True, "first token (prefill)", "prefill"),
                               (False, "token (decode)", "decode")):
        xs, ys, cd = [], [], []
        for r in rows:
            so_far = ""
            for i, (t, x) in enumerate(zip(r["times"], r["texts"])):
                if (i == 0) == first:
                    gap = t - (r["times"][i - 1] if i else r["arrival"])
                    xs.append(t * f)
                    ys.append(r["request_id"])
                    cd.append([i, html.escape(repr(x)), fmt_time(t, unit), fmt_time(gap, unit),
                               _wrap(so_far, CONTEXT)])
                so_far += x
        if not xs:
            continue
        fig.add_trace(go.Scatter(
            x=xs, y=ys, mode="markers", name=name, customdata=cd, cliponaxis=False,
            marker=dict(symbol="line-ns", size=LANE_PX - 6,
                        line=dict(width=2 if first else 1.5, color=palette.PHASE[phase])),
            hovertemplate="<b>%{y}</b> token %{customdata[0]} %{customdata[1]} at "
                          "%{customdata[2]} (" + ("TTFT" if first else "+") +
                          " %{customdata[3]})<br>after: %{customdata[4]}<extra></extra>"))
    request_axis(fig, ids)
    time_axis(fig, unit, span * f)
    fig.update_xaxes(title_text=f"time ({unit})", showgrid=True)
    fig.update_layout(height=height_for(len(ids)), barmode="overlay", showlegend=True,
                      legend=dict(traceorder="normal"))
    return style(fig, title, clock, dark=dark)


def rows_from_trace(trace) -> list[dict]:
    """The token stream's rows of a recorded Trace, in arrival order (seconds from t0)."""
    t0, order = trace.t0, trace.lanes().order
    arrivals = trace.arrivals()
    rows = {rid: {"request_id": rid, "arrival": arrivals.get(rid, t0) - t0, "times": [],
                  "texts": [], "prompt": (trace.requests.get(rid, {}).get("prompt_text") or "")}
            for rid in order}
    for rec in trace.records:
        for e in rec.emitted:
            if e.request_id in rows:
                rows[e.request_id]["times"].append(rec.t_end - t0)
                rows[e.request_id]["texts"].append(e.text)
    return list(rows.values())


def from_trace(trace, title: str = "Token stream", dark: bool = False) -> go.Figure:
    """The token stream of a whole recorded Trace."""
    return token_raster(rows_from_trace(trace), title=title,
                        clock=str(trace.meta.get("clock", "wall")), dark=dark)
