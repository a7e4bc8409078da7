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

from .spec import Spec
from .timeline import HOVER, LANE_PX, fmt_time, request_axis, time_axis, time_unit

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
    """The token stream as a plotly figure: see ``spec``."""
    return go.Figure(spec(rows, title=title, clock=clock, dark=dark))


def spec(rows, title: str = "Token stream", clock: str | None = None,
         dark: bool = False) -> dict:
    """``rows``: dicts with request_id, arrival, times (token times), texts, and optionally
    prompt; times in seconds from the view's t0. Rows keep their order (arrival order).
    A plain dict (``spec.Spec``) with the same three traces at every step."""
    ids = [r["request_id"] for r in rows]
    span = max([t for r in rows for t in r["times"]] + [r["arrival"] for r in rows] + [0.0])
    f, unit = time_unit(span)
    fig = Spec()
    waiting = [r for r in rows if r["times"]]
    fig.add(dict(                            # arrival -> first token, hover: the whole text
        type="bar", orientation="h", name="waiting for the first token (TTFT)",
        showlegend=bool(waiting),
        y=[r["request_id"] for r in waiting], base=[r["arrival"] * f for r in waiting],
        x=[max(r["times"][0] - r["arrival"], 0.0) * f for r in waiting],
        marker=dict(color=palette.PHASE["queued"], line=dict(width=0)), width=0.45,
        hovertext=[f"<b>{html.escape(r['request_id'])}</b>: first token after "
                   f"{fmt_time(r['times'][0] - r['arrival'], unit)}, {len(r['times'])} tokens"
                   f"<br><b>prompt</b> {_wrap(r.get('prompt') or '')}"
                   f"<br><b>answer</b> {_wrap(''.join(r['texts']))}" for r in waiting],
        hovertemplate=HOVER))
    for first, name, phase in ((True, "first token (prefill)", "prefill"),
                               (False, "token (decode)", "decode")):
        xs, ys, hover = [], [], []
        for r in rows:
            so_far, rid = "", html.escape(r["request_id"])
            for i, (t, x) in enumerate(zip(r["times"], r["texts"])):
                if (i == 0) == first:
                    gap = t - (r["times"][i - 1] if i else r["arrival"])
                    xs.append(t * f)
                    ys.append(r["request_id"])
                    # one string per token: plotly walks every element of a nested customdata
                    hover.append(f"<b>{rid}</b> token {i} {html.escape(repr(x))} at "
                                 f"{fmt_time(t, unit)} ({'TTFT' if first else '+'} "
                                 f"{fmt_time(gap, unit)})<br>after: {_wrap(so_far, CONTEXT)}")
                so_far += x
        fig.add(dict(
            type="scatter", x=xs, y=ys, mode="markers", name=name, hovertext=hover,
            cliponaxis=False, showlegend=bool(xs), hovertemplate=HOVER,
            marker=dict(symbol="line-ns", size=LANE_PX - 6,
                        line=dict(width=2 if first else 1.5, color=palette.PHASE[phase]))))
    request_axis(fig, ids)
    time_axis(fig, unit, span * f)
    fig.xaxes(title=dict(text=f"time ({unit})"), showgrid=True)
    fig.update_layout(height=height_for(len(ids)), barmode="overlay", showlegend=True,
                      legend=dict(traceorder="normal"))
    return fig.style(title, clock, dark=dark)


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
