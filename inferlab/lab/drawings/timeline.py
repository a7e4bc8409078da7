"""The scheduler timeline: one lane per request over time, and under it what each step carried.

Lanes (Perfetto-like): one row per request in arrival order, its stretches of queued, prefill,
decode and preempted time as bars (consecutive decode steps merged, so no per-step clutter),
and an end mark where it finished. Under the lanes, two strips of the steps themselves, one
bar per step (a thin gap between bars marks each step boundary): prefill tokens and decode
tokens, each on its own linear scale. A prefill step carries tens to thousands of tokens, a
decode step one per running request; on one shared axis the decode bars would be a pixel
high, on a log axis stacked bars would lie about their parts. Two linear strips keep both
readable and true, and they share the time axis with the lanes, so zooming or panning time
moves all three together (the y axes are fixed: time is what one zooms, as in Perfetto).

Time ticks are plotly's round ones in one unit: ms for a run under 2 s, s above.
"""
from __future__ import annotations

import plotly.graph_objects as go

from inferlab.lab import palette

from .spec import Spec

LANE_PX = 22            # height of one request's lane
STRIP_PX = 64           # height of each per-step strip
HOVER = "%{hovertext}<extra></extra>"    # hover: one prepared string per bar or mark
END_KINDS = {"finished": "finished", "aborted": "aborted", "rejected": "rejected"}


def time_unit(span_s: float) -> tuple[float, str]:
    """(factor, unit) for times in seconds: ms below 2 s, s from 2 s up."""
    return (1e3, "ms") if span_s < 2.0 else (1.0, "s")


def fmt_time(v_s: float, unit: str) -> str:
    """A time in seconds as text in ``unit`` (three significant figures at most)."""
    v = v_s * (1e3 if unit == "ms" else 1.0)
    return f"{v:.0f} {unit}" if abs(v) >= 100 else f"{v:.3g} {unit}"


def ink(dark: bool) -> str:
    """The end mark's colour: PHASE["finished"], or the dark theme's text colour on a dark
    page (where near-black marks would vanish)."""
    return palette.NEUTRAL["dark"]["fg"] if dark else palette.PHASE["finished"]


def time_axis(fig: Spec, unit: str, span: float, **where) -> None:
    """Round ticks in ``unit``, from 0 to a little past ``span`` (already in ``unit``); no
    steps yet (span 0): 0 to 1, not ticks of a billionth."""
    fig.xaxes(range=[0, (span if span > 0 else 1.0) * 1.02], exponentformat="none",
              separatethousands=False, rangemode="nonnegative", **where)


def short_label(rid: str, most: int = 16) -> str:
    """A request's label on an axis: its id, or the id's end (where ids differ) when long."""
    return rid if len(rid) <= most else "\u2026" + rid[-(most - 1):]


def request_axis(fig: Spec, order, **where) -> None:
    """Requests as categories in ``order``, the first at the top, one lane each, labelled
    with ``short_label`` (the whole id on hover); at least three lanes' room."""
    n = max(len(order), 3)
    fig.yaxes(type="category", categoryorder="array", categoryarray=list(order)[::-1],
              tickvals=list(order), ticktext=[short_label(r) for r in order],
              range=[len(order) - 0.5 - n, len(order) - 0.5], showgrid=False, ticks="",
              fixedrange=True, automargin=True, **where)


def int_ticks(top: float, most: int = 3) -> int:
    """A round whole-number tick step (1, 2, 5, 10, 20, ...) giving at most ``most`` ticks
    above 0 up to ``top``."""
    step, k = 1, 0
    while top / step > most:
        k += 1
        step = (1, 2, 5)[k % 3] * 10 ** (k // 3)
    return step


def height_for(n_lanes: int, strips: int = 2, top: int = 110, bottom: int = 50) -> int:
    """A figure height giving every lane LANE_PX (nothing squeezed or cut)."""
    return top + bottom + max(n_lanes, 3) * LANE_PX + strips * (STRIP_PX + 24)


def _lanes(fig, segments, t0, f, unit, upto, min_s):
    cut = (lambda t: t) if upto is None else (lambda t: min(t, upto))
    for kind in ("queued", "prefill", "decode", "preempted"):
        ss = [s for s in segments if s.kind == kind and (upto is None or s.t0 <= upto)
              and (kind in ("prefill", "decode") or cut(s.t1) - s.t0 >= min_s)]
        # every kind's trace, always (the live widget updates them in place); a legend entry
        # only for what occurs (and can be seen)
        fig.add(dict(
            type="bar", orientation="h", name=kind, showlegend=bool(ss),
            marker=dict(color=palette.PHASE[kind], line=dict(width=0)),
            y=[s.request_id for s in ss], base=[(s.t0 - t0) * f for s in ss],
            x=[max(cut(s.t1) - s.t0, 0.0) * f for s in ss], legendgroup=kind,
            hovertext=[f"{s.request_id} {kind} from {fmt_time(s.t0 - t0, unit)} for "
                       f"{fmt_time(cut(s.t1) - s.t0, unit)}"
                       + ("" if kind in ("queued", "preempted") else f", {s.tokens} tokens")
                       + f", steps {s.step0}-{s.step1}" for s in ss],
            hovertemplate=HOVER), row=1, col=1)


def _ends(fig, finish, order, t0, f, unit, upto, dark):
    lane = set(order)
    for kind, symbol in (("finished", "line-ns"), ("aborted", "x-thin"), ("rejected", "x-thin")):
        es = [(r, tt) for r, (tt, k) in (finish or {}).items()
              if k == kind and r in lane and (upto is None or tt <= upto)]
        fig.add(dict(
            type="scatter", x=[(tt - t0) * f for _, tt in es], y=[r for r, _ in es],
            mode="markers", name=END_KINDS[kind], legendgroup=kind, cliponaxis=False,
            showlegend=bool(es),
            marker=dict(symbol=symbol, size=LANE_PX - 4, line=dict(width=2.5, color=ink(dark)),
                        color=ink(dark)),
            hovertext=[f"{r} {kind} at {fmt_time(tt - t0, unit)}" for r, tt in es],
            hovertemplate=HOVER), row=1, col=1)


def _strips(fig, steps, t0, f, unit, upto, px_per_unit):
    st = [s for s in steps if upto is None or s["t0"] <= upto]
    xs = [(s["t0"] - t0) * f for s in st]
    # a one-pixel gap between neighbouring steps marks each boundary, while the bars stay
    # wide enough to see (a dense run gets thinner gaps rather than no bars)
    px = 1.0 / px_per_unit
    ws = [max(w - px, w * 0.6) for w in ((s["t1"] - s["t0"]) * f for s in st)]
    # hover texts as one string each: plotly walks every element of a nested customdata
    hover = [f"step {s.get('step', i)} at {fmt_time(s['t0'] - t0, unit)} for "
             f"{fmt_time(s['t1'] - s['t0'], unit)}: {s['prefill']} prefill + {s['decode']} "
             f"decode tokens, {s.get('running', '')} running" for i, s in enumerate(st)]
    for row, key in ((2, "prefill"), (3, "decode")):
        fig.add(dict(
            type="bar", x=xs, y=[s[key] for s in st], width=ws, offset=0,
            name=f"{key} tokens per step",
            marker=dict(color=palette.PHASE[key], line=dict(width=0)),
            showlegend=False, legendgroup=key, hovertext=hover, hovertemplate=HOVER),
            row=row, col=1)
        top = max([s[key] for s in st] + [1])
        fig.yaxes(range=[0, top * 1.15], dtick=int_ticks(top), row=row, col=1)
        # the strip's name inside it, top left: no axis title to collide with its ticks
        fig.annotate(text=f"{key} tokens per step", showarrow=False, x=0.005, y=1.0,
                     xref="x domain", yref=f"y{row} domain", xanchor="left",
                     yanchor="bottom", font=dict(size=11))


def timeline(segments, order, steps, t0: float = 0.0, title: str = "Scheduler timeline",
             clock: str | None = None, upto: float | None = None, finish: dict | None = None,
             dark: bool = False, width: int = 900) -> go.Figure:
    """The scheduler timeline as a plotly figure: see ``spec``."""
    return go.Figure(spec(segments, order, steps, t0, title=title, clock=clock, upto=upto,
                          finish=finish, dark=dark, width=width))


def spec(segments, order, steps, t0: float = 0.0, title: str = "Scheduler timeline",
         clock: str | None = None, upto: float | None = None, finish: dict | None = None,
         dark: bool = False, width: int = 900) -> dict:
    """The scheduler timeline of ``segments`` (lanes.Segment) in lanes ``order`` (arrival
    order, first at the top), ``steps`` (dicts with t0, t1, prefill, decode and optionally
    step, running, budget) and ``finish`` (request id -> (time, finished|aborted|rejected));
    times in seconds on the engine clock, drawn from ``t0``; ``upto`` cuts the picture at a
    time (the view's scrubber). A plain dict (``spec.Spec``); the same traces in the same
    order at every step, so the live widget updates them in place."""
    ends = [tt for tt, _ in (finish or {}).values()]
    # the whole run's time axis even when cut at ``upto``: scrubbing fills it in, steadily
    span = max([s.t1 for s in segments] + [s["t1"] for s in steps] + ends + [t0]) - t0
    f, unit = time_unit(span)
    height = height_for(len(order))
    n = max(len(order), 3)
    fig = Spec(rows=3, shared_xaxes=True, vertical_spacing=24 / height,
               row_heights=[n * LANE_PX, STRIP_PX, STRIP_PX])
    px_per_s = (width - 100) / max(span, 1e-12)      # the plot is about 100 px narrower
    _lanes(fig, segments, t0, f, unit, upto, 0.5 / px_per_s)
    _ends(fig, finish, order, t0, f, unit, upto, dark)
    _strips(fig, steps, t0, f, unit, upto, px_per_s / f)
    fig.update_layout(barmode="overlay", bargap=0.3, height=height, showlegend=True,
                      legend=dict(traceorder="normal"), hovermode="closest")
    request_axis(fig, order, row=1, col=1)
    fig.yaxes(fixedrange=True, row=2, col=1)
    fig.yaxes(fixedrange=True, row=3, col=1)
    time_axis(fig, unit, span * f)
    fig.xaxes(title=dict(text=f"time ({unit})"), row=3, col=1)
    fig.xaxes(showgrid=True, row=1, col=1)
    return fig.style(title, clock, dark=dark)


def from_trace(trace, title: str = "Scheduler timeline", dark: bool = False) -> go.Figure:
    """The timeline of a whole recorded Trace."""
    lb = trace.lanes()
    steps = [{"step": r.step, "t0": r.t_start, "t1": r.t_end, "prefill": r.num_prefill_tokens,
              "decode": r.num_decode_tokens, "running": len(r.batch), "budget": r.token_budget}
             for r in trace.records]
    return timeline(lb.all_segments(), lb.order, steps, trace.t0, title=title,
                    clock=str(trace.meta.get("clock", "wall")), finish=lb.finish, dark=dark)
