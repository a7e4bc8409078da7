"""The batching comparison: the same requests under two (or more) schedulers, side by side.

Left, one grid of seats x time per policy (as in Anyscale's continuous-batching figures):
each seat of the batch is a row, and the request holding it fills it, in the prefill then
the decode colour, with its label inside when it fits and an end mark where it finished.
A seat nobody holds is hatched: under static batching the seats a finished request left
stay empty until its whole group is done, while the queue waits. The grids share one time
axis, so the run that takes longer is visibly longer. The ratios the figure is about
(throughput, steps) are written above it. Right, each request's latencies (time to first
token, time to the whole answer) as a box with every request's point, per policy in its
colour, on a linear time axis from 0.
"""
from __future__ import annotations

import plotly.graph_objects as go

from inferlab.lab import palette
from inferlab.observe.metrics import request_metrics

from .spec import Spec
from .timeline import fmt_time, ink, time_axis, time_unit

SEAT_PX = 20


def policy_colour(label: str, i: int) -> str:
    """A policy's colour by its name (also inside a longer label, e.g. "static (wall)");
    other labels (runs, configs) alternate two neutral series greys."""
    for name, colour in palette.POLICY.items():
        if name == label or name in label.lower().split():
            return colour
    return (palette.SERIES["main"], palette.SERIES["baseline"])[i % 2]


def seat_plan(trace, seats: int | None = None, upto: float | None = None) -> dict:
    """Who holds which seat of the batch when: a request takes the lowest free seat when
    first scheduled and keeps it until it finishes (or is preempted). Returns seats, bars
    (seat, request, kind, t0, t1, step0, step1, tokens: consecutive steps of one kind
    merged), ends (seat, request, time), and the run's steps, duration, output tokens,
    throughput and per-request TTFT and E2E (seconds); ``upto`` (seconds from the trace's
    t0): only the steps ended by then."""
    t0 = trace.t0
    records = [r for r in trace.records if upto is None or r.t_end - t0 <= upto]
    held: dict[str, int] = {}
    bars: list[list] = []
    last: dict[str, list] = {}
    ends: list[tuple] = []
    peak = 0
    for rec in records:
        batch = {c.request_id for c in rec.batch}
        for ev in rec.request_events:
            if ev.kind == "preempted" and ev.request_id not in batch:
                held.pop(ev.request_id, None)
        for c in rec.batch:
            rid = c.request_id
            if rid not in held:
                held[rid] = min(set(range(len(held) + 1)) - set(held.values()))
            b = last.get(rid)
            if b and b[0] == held[rid] and b[2] == c.kind and b[6] == rec.step - 1:
                b[4], b[6], b[7] = rec.t_end - t0, rec.step, b[7] + c.num_tokens
            else:
                b = last[rid] = [held[rid], rid, c.kind, rec.t_start - t0, rec.t_end - t0,
                                 rec.step, rec.step, c.num_tokens]
                bars.append(b)
        peak = max(peak, len(held))
        for ev in rec.request_events:
            if ev.kind in ("finished", "aborted", "rejected") and ev.request_id in held:
                ends.append((held.pop(ev.request_id), ev.request_id, rec.t_end - t0))
    per = request_metrics(records, trace.requests)
    tokens = sum(len(r.emitted) for r in records)
    dur = records[-1].t_end - t0 if records else 0.0
    cfg = (trace.meta.get("config") or {}).get("max_num_seqs")
    n_seats = max(seats or (min(cfg, len(per)) if cfg else peak), peak, 1)
    busy = sum(b[4] - b[3] for b in bars)
    written = {rid: 0 for rid in trace.requests}       # answer lengths, in arrival order
    for r in records:
        for e in r.emitted:
            written[e.request_id] = written.get(e.request_id, 0) + 1
    return {"seats": n_seats, "bars": bars, "ends": ends,
            "idle": 1 - busy / (n_seats * dur) if dur > 0 else 0.0,
            "lens": [n for n in written.values() if n],
            "steps": len(records), "duration": dur, "tokens": tokens,
            "throughput": tokens / dur if dur > 0 else 0.0,
            "ttft": [m.ttft for m in per.values() if m.ttft is not None],
            "e2e": [m.e2e for m in per.values() if m.e2e is not None]}


def _label(rid: str) -> str:
    """A short label for inside a seat: the request's number when its id ends in one."""
    tail = rid.rsplit("-", 1)[-1].lstrip("r")
    return tail if tail.isdigit() else rid


def _grid(fig, row, label, plan, f, unit, dark, first, seat_px=SEAT_PX):
    n, span = plan["seats"], plan["duration"]
    fig.add(dict(                  # every seat over the whole run, hatched where empty
        type="bar", orientation="h", y=list(range(n)), base=[0] * n, x=[span * f] * n, width=0.8,
        name="empty seat", legendgroup="idle", showlegend=first, hoverinfo="skip",
        marker=dict(color="rgba(0,0,0,0)", line=dict(width=0.5, color=palette.MUTED),
                    pattern=dict(shape="/", fgcolor=palette.MUTED, size=6, solidity=0.15))),
        row=row, col=1)
    for kind in ("prefill", "decode"):
        bs = [b for b in plan["bars"] if b[2] == kind]
        fig.add(dict(
            type="bar", orientation="h", y=[b[0] for b in bs], base=[b[3] * f for b in bs],
            x=[(b[4] - b[3]) * f for b in bs], width=0.8, name=kind, legendgroup=kind,
            showlegend=first and bool(bs),
            marker=dict(color=palette.PHASE[kind], line=dict(width=0)),
            text=[_label(b[1]) if kind == "decode" else "" for b in bs],
            textposition="inside", insidetextanchor="middle", textangle=0,
            textfont=dict(color=palette.NEUTRAL["light"]["bg"], size=10),
            customdata=[[b[1], fmt_time(b[3], unit), fmt_time(b[4] - b[3], unit), b[7], b[5],
                         b[6]] for b in bs],
            hovertemplate=label + ", seat %{y}: %{customdata[0]} " + kind + " from "
                          "%{customdata[1]} for %{customdata[2]}, %{customdata[3]} tokens, "
                          "steps %{customdata[4]}-%{customdata[5]}<extra></extra>"),
            row=row, col=1)
    fig.add(dict(
        type="scatter", x=[e[2] * f for e in plan["ends"]], y=[e[0] for e in plan["ends"]],
        mode="markers", name="finished", legendgroup="finished",
        showlegend=first and bool(plan["ends"]),
        marker=dict(symbol="line-ns", size=min(seat_px, 40) * 0.8,
                    line=dict(width=2.5, color=ink(dark))),
        customdata=[[e[1], fmt_time(e[2], unit)] for e in plan["ends"]],
        hovertemplate=label + ": %{customdata[0]} finished at %{customdata[1]}"
                      "<extra></extra>"), row=row, col=1)
    fig.yaxes(range=[n - 0.5, -0.5], tickvals=list(range(n)), showgrid=False,
              ticktext=[str(i + 1) for i in range(n)], fixedrange=True, ticks="",
              title=dict(text="seat", standoff=2), row=row, col=1)


def _latencies(fig, labels, plans, colours):
    top = max([v for p in plans for v in p["ttft"] + p["e2e"]] + [1e-3])
    f, unit = time_unit(top)
    for label, plan, colour in zip(labels, plans, colours):
        ys = [v * f for v in plan["ttft"]] + [v * f for v in plan["e2e"]]
        fig.add(dict(
            type="box", x=["time to<br>first token"] * len(plan["ttft"])
            + ["time to<br>whole answer"] * len(plan["e2e"]), y=ys, name=label, legendgroup=f"policy {label}",
            marker=dict(color=colour, size=4), line=dict(color=colour, width=1.5),
            boxpoints="all", jitter=0.5, pointpos=0, boxmean=False,
            hovertemplate=label + " %{x}: %{y:.3g} " + unit + "<extra></extra>"),
            row=1, col=2)
    fig.update_layout(boxmode="group", boxgap=0.3, boxgroupgap=0.15)
    fig.yaxes(rangemode="tozero", exponentformat="none", row=1, col=2,
              title=dict(text=f"latency per request ({unit})", standoff=4))
    # the two names on two lines each, level: rotated, the second ran off the picture
    fig.xaxes(row=1, col=2, fixedrange=True, tickangle=0)


def ratio_text(labels, plans) -> str:
    """The figure's point in words: each policy's throughput and steps against the first."""
    from inferlab.lab.verdicts import ideal_batching_gain
    base, base_plan = labels[0], plans[0]
    parts = []
    for label, p in zip(labels[1:], plans[1:]):
        thr = p["throughput"] / base_plan["throughput"] if base_plan["throughput"] else 0.0
        st = p["steps"] / base_plan["steps"] if base_plan["steps"] else 0.0
        parts.append(f"<b>{label}</b> vs {base}: <b>{thr:.2f}x</b> the throughput, "
                     f"<b>{st:.2f}x</b> the steps ({p['steps']} vs {base_plan['steps']})")
        if "static" in base.lower() and base_plan["lens"]:
            # what scheduling alone could gain on these answers: each static batch's longest
            # answer over the mean answer
            ideal = ideal_batching_gain(base_plan["lens"], base_plan["seats"])[0]
            parts.append(f"ideal for these answers <b>{ideal:.2f}x</b> (each static batch "
                         f"waits for its longest); seats idle: {base} "
                         f"{base_plan['idle']:.0%}, {label} {p['idle']:.0%}")
    return "<br>".join(parts)


def figure(sides, title: str = "Batching comparison", clock: str | None = None,
           seats: int | None = None, dark: bool = False) -> go.Figure:
    """The batching comparison as a plotly figure: see ``spec``."""
    return go.Figure(spec(sides, title=title, clock=clock, seats=seats, dark=dark))


def spec(sides, title: str = "Batching comparison", clock: str | None = None,
         seats: int | None = None, dark: bool = False, upto: float | None = None) -> dict:
    """``sides``: (label, Trace) pairs, the first the baseline the ratios are taken against;
    ``seats``: the batch limit (max_num_seqs) when the traces do not say; ``upto``: only the
    steps ended by then (seconds from each trace's t0: the view's scrubber), and a dotted
    line there (every scrubber position draws something new, even inside one long step).
    A plain dict (``spec.Spec``)."""
    labels = [lab for lab, _ in sides]
    plans = [seat_plan(tr, seats, upto) for _, tr in sides]
    colours = [policy_colour(lab, i) for i, lab in enumerate(labels)]
    k = max(len(plans), 1)
    # the whole runs' time axis even when cut at ``upto``: scrubbing fills it in
    span = max([tr.records[-1].t_end - tr.t0 for _, tr in sides if tr.records] + [0.0])
    f, unit = time_unit(span)
    top, bottom, gap = 150, 100, 44      # the top: title, clock line, then the ratio lines
    # seats of SEAT_PX, taller when there are few: the latency panel needs room
    seat_px = max(SEAT_PX, (300 - gap * (k - 1)) / max(sum(p["seats"] for p in plans), 1))
    grid_px = [p["seats"] * seat_px for p in plans] or [300]
    plot_px = sum(grid_px) + gap * (k - 1)
    height = top + bottom + plot_px
    fig = Spec(rows=k, cols=2, column_widths=[0.7, 0.3], shared_xaxes=True,
               horizontal_spacing=0.09, vertical_spacing=gap / plot_px, row_heights=grid_px,
               span_last_column=True)
    for i, (label, plan) in enumerate(zip(labels, plans)):
        _grid(fig, i + 1, label, plan, f, unit, dark, first=i == 0, seat_px=seat_px)
        fig.annotate(
            text=f"<b>{label}</b>: {plan['steps']} steps, {fmt_time(plan['duration'], unit)}, "
                 f"{plan['throughput']:.0f} output tokens/s, {plan['idle']:.0%} of seat-time "
                 f"idle",
            x=0, y=1, xref=f"x{fig.ref(i + 1, 1)} domain", yref=f"y{fig.ref(i + 1, 1)} domain",
            xanchor="left", yanchor="bottom", showarrow=False,
            font=dict(color=colours[i], size=12))
    if plans:
        _latencies(fig, labels, plans, colours)
    time_axis(fig, unit, span * f, row=k, col=1)
    for i in range(1, k):
        time_axis(fig, unit, span * f, row=i, col=1)
    fig.xaxes(title=dict(text=f"time ({unit})", standoff=6), row=k, col=1)
    if upto is not None and upto < span:       # scrubbing: where the scrubber cuts the runs
        for i in range(1, k + 1):
            fig.layout.setdefault("shapes", []).append(dict(
                type="line", x0=upto * f, x1=upto * f, y0=0, y1=1, layer="above",
                xref=f"x{fig.ref(i, 1)}", yref=f"y{fig.ref(i, 1)} domain",
                line=dict(width=1.5, dash="dot", color=ink(dark))))
    fig.update_layout(height=height, barmode="overlay", uniformtext=dict(minsize=8, mode="hide"),
                      legend=dict(orientation="h", x=0, xanchor="left", y=-62 / plot_px,
                                  yanchor="top", traceorder="normal", itemsizing="constant"),
                      margin=dict(t=top, b=bottom),
                      # the title at the top, not in the middle of the tall top margin (the
                      # ratio line under it needs the margin; the title left it empty above)
                      title=dict(y=1 - 14 / height, yanchor="top"))
    if len(plans) > 1:
        # its own line under the title's clock line (a long clock line ran into it)
        fig.annotate(text=ratio_text(labels, plans), x=0, y=1 + 34 / plot_px,
                     xref="paper", yref="paper", xanchor="left", yanchor="bottom",
                     align="left", showarrow=False, font=dict(size=13))
    return fig.style(title, clock, dark=dark)
