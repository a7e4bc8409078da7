"""The frontier of a sweep of engine knobs: output tokens/s per user (x) against output
tokens/s in total (y), the axes of vLLM's ``vllm bench sweep plot_pareto`` (its
"Tokens/s/user" and "Tokens/s/GPU": here one device, so the total is the machine's).

Every point that ran is a grey marker with its spread (min..max over repeats) as error
bars; the Pareto frontier, the points no other point beats in both (more of both is
better), is a line through them, each labelled with the knobs that vary across the sweep.
The trade-off along the frontier is written in the title as a ratio. Hover a point for its
knobs and its TTFT and ITL percentiles. Points that failed are not plotted: a note under the
title names them (the article profile moves it to the caption, as it does the clock line).
A row is the sweep's (inferlab.lab.sweep): {"point", "knobs", "metrics", "trace_path",
"error", "clock", "projection"}.
"""
from __future__ import annotations

import html
import math

import plotly.graph_objects as go

from inferlab.lab import palette
from inferlab.lab.article import wrap

from .spec import Spec
from .timeline import ink

X, Y = "output_tok_s_per_user", "output_tok_s"
X_TITLE = "output tokens/s per user (vLLM: Tokens/s/user)"
Y_TITLE = "output tokens/s in total (one device)"
HOVER = "%{hovertext}<extra></extra>"
MOST_FAILED = 3          # failed points named in the note; the rest counted
HEIGHT = 480
NARROW_CHARS = 48        # a title line's characters in a narrow pane (SweepView's)


def _num(v) -> float | None:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def plotted(row: dict) -> bool:
    """Whether a row is drawn: it ran without error and has both frontier numbers."""
    m = row.get("metrics") or {}
    return row.get("error") is None and _num(m.get(X)) is not None and \
        _num(m.get(Y)) is not None


def failed(rows) -> list[dict]:
    """The rows that are not drawn (an error, or no throughput), in sweep order."""
    return [r for r in rows if not plotted(r)]


def frontier_points(rows) -> list[int]:
    """The ``point`` numbers of the Pareto frontier, by output tokens/s per user rising: the
    drawn points that no other drawn point matches or beats in both numbers while beating
    them in one (two identical best points are both on it)."""
    pts = sorted(((_num(r["metrics"][X]), _num(r["metrics"][Y]), r["point"])
                  for r in rows if plotted(r)), key=lambda p: (-p[0], -p[1]))
    out, best, last = [], -math.inf, None
    for x, y, p in pts:
        if y > best or (last is not None and (x, y) == last):
            out.append((x, p))
            best, last = max(best, y), (x, y)
    return [p for _, p in sorted(out)]


def varying_knobs(rows) -> list[str]:
    """The knobs whose values differ between the sweep's points, in first-seen order (all of
    them when none differ: a single point is named by all its knobs)."""
    names: list[str] = []
    for r in rows:
        names += [k for k in (r.get("knobs") or {}) if k not in names]
    vary = [k for k in names if len({repr((r.get("knobs") or {}).get(k)) for r in rows}) > 1]
    return vary or names


def knob_text(row: dict, names, sep: str = ", ") -> str:
    knobs = row.get("knobs") or {}
    return sep.join(f"{k}={knobs[k]}" for k in names if k in knobs)


def sweep_clock(rows) -> tuple[str, bool]:
    """(the clock the sweep's numbers come from, whether they are a projection)."""
    clocks = list(dict.fromkeys(str(r.get("clock") or "wall") for r in rows))
    projection = any(bool(r.get("projection")) for r in rows)
    clock = " / ".join(clocks) or "wall"
    if projection and "projection" not in clock.lower():
        clock += " (a projection from the cost model, not measured)"
    return clock, projection


def fmt(v) -> str:
    v = _num(v)
    if v is None:
        return "–"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def hover_text(row: dict, names) -> str:
    m = row.get("metrics") or {}
    spread = m.get("spread") or {}

    def rng(key):
        s = spread.get(key)
        return f" ({fmt(s[0])}–{fmt(s[1])})" if s and len(s) == 2 and s[0] != s[1] else ""
    return "<br>".join([
        f"<b>point {row['point']}</b>" + (f": {html.escape(knob_text(row, names))}"
                                           if names else ""),
        f"{fmt(m.get(Y))} output tok/s in total{rng(Y)}",
        f"{fmt(m.get(X))} output tok/s per user{rng(X)}",
        f"TTFT p50 {fmt(m.get('ttft_p50_ms'))} ms · p99 {fmt(m.get('ttft_p99_ms'))} ms",
        f"ITL p50 {fmt(m.get('itl_p50_ms'))} ms · p99 {fmt(m.get('itl_p99_ms'))} ms"])


def _bars(rows, key, colour: str) -> dict:
    """Asymmetric error bars from each row's spread [min, max] of ``key``."""
    up, down = [], []
    for r in rows:
        m = r["metrics"]
        v, s = _num(m[key]), (m.get("spread") or {}).get(key)
        lo, hi = (_num(s[0]), _num(s[1])) if s and len(s) == 2 else (None, None)
        up.append(max(hi - v, 0.0) if hi is not None else 0.0)
        down.append(max(v - lo, 0.0) if lo is not None else 0.0)
    return dict(type="data", symmetric=False, array=up, arrayminus=down,
                color=colour, thickness=1.2, width=4,
                visible=any(up) or any(down))


def failed_note(rows, names) -> str:
    bad = failed(rows)
    if not bad:
        return ""
    parts = []
    for r in bad[:MOST_FAILED]:
        why = str(r.get("error") or "no throughput measured").strip().splitlines()[0]
        why = why if len(why) <= 40 else why[:39] + "…"
        knobs = knob_text(r, names)
        parts.append(html.escape(f"point {r['point']}" + (f" ({knobs})" if knobs else "")
                                 + f" failed: {why}"))
    if len(bad) > MOST_FAILED:
        parts.append(f"{len(bad) - MOST_FAILED} more failed")
    return "not plotted: " + " · ".join(parts)


def trade_off(rows, points) -> str:
    """The frontier's two ends as ratios: how much more in total the one end gives, how much
    more per user the other (computed from the rows)."""
    if len(points) < 2:
        return ""
    by = {r["point"]: r["metrics"] for r in rows if plotted(r)}
    fast, full = by[points[-1]], by[points[0]]     # most per user, most in total
    fx, fy, tx, ty = (_num(fast[X]), _num(fast[Y]), _num(full[X]), _num(full[Y]))
    if not (fy and tx):
        return ""
    return f"(the frontier's ends: {ty / fy:.1f}× more in total, or {fx / tx:.1f}× more per user)"


def spec(rows, *, title: str | None = None, dark: bool = False,
         selected: int | None = None, narrow: bool = False) -> dict:
    """The frontier of ``rows`` as a plain figure dict (see the module's text); ``selected``:
    the point ringed (the one a SweepView shows beside the plot); ``narrow``: for a pane
    about 450 px wide (the title in shorter lines, the failed points only counted: the pane
    lists them beside). The same traces in the same order whatever the rows, so a live
    widget updates them in place."""
    rows = list(rows)
    names = varying_knobs(rows)
    ok = [r for r in rows if plotted(r)]
    front = frontier_points(rows)
    by = {r["point"]: r for r in ok}
    clock, projection = sweep_clock(rows)
    fig = Spec()
    # the neutral series greys; on a dark page the dark ramp's of the same rank (as the
    # article's dark twin): the frontier still stands out from the other points
    shade = palette.on_dark if dark else (lambda c: c)
    grey, main = shade(palette.SERIES["baseline"]), shade(palette.SERIES["main"])
    fig.add(dict(type="scatter", mode="markers", name="sweep points",
                 x=[_num(r["metrics"][X]) for r in ok], y=[_num(r["metrics"][Y]) for r in ok],
                 error_x=_bars(ok, X, grey), error_y=_bars(ok, Y, grey),
                 customdata=[r["point"] for r in ok], cliponaxis=False,
                 marker=dict(color=grey, size=11, line=dict(width=0)),
                 hovertext=[hover_text(r, names) for r in ok], hovertemplate=HOVER))
    labels = "frontier" + (f", labelled {', '.join(names)}" if names else "")
    fr = [by[p] for p in front]
    fig.add(dict(type="scatter", mode="lines+markers+text", name=labels,
                 x=[_num(r["metrics"][X]) for r in fr], y=[_num(r["metrics"][Y]) for r in fr],
                 customdata=front, cliponaxis=False,
                 text=[", ".join(str((r.get("knobs") or {}).get(k, "")) for k in names)
                       for r in fr], textposition="top right",
                 textfont=dict(size=13, color=ink(dark)),
                 line=dict(color=main, width=2.5), marker=dict(color=main, size=12),
                 hovertext=[hover_text(r, names) for r in fr], hovertemplate=HOVER))
    sel = [by[selected]] if selected in by else []
    fig.add(dict(type="scatter", mode="markers", name="shown beside", showlegend=bool(sel),
                 x=[_num(r["metrics"][X]) for r in sel], y=[_num(r["metrics"][Y]) for r in sel],
                 customdata=[r["point"] for r in sel], cliponaxis=False,
                 marker=dict(symbol="circle-open", size=22, color=ink(dark),
                             line=dict(width=2.5, color=ink(dark))),
                 hovertext=[hover_text(r, names) for r in sel], hovertemplate=HOVER))
    xs = [_num(r["metrics"][X]) for r in ok]
    ys = [_num(r["metrics"][Y]) for r in ok]
    top_x = max([_hi(r, X) for r in ok] + xs + [1e-9])
    top_y = max([_hi(r, Y) for r in ok] + ys + [1e-9])
    fig.xaxes(title=dict(text=X_TITLE), range=[0, top_x * 1.18], rangemode="tozero",
              zeroline=False)
    fig.yaxes(title=dict(text=Y_TITLE.split(" (")[0] if narrow else Y_TITLE),
              range=[0, top_y * 1.15], rangemode="tozero", zeroline=False)
    if not ok:
        fig.annotate(text="no point of the sweep ran: nothing to plot", showarrow=False,
                     x=0.5, y=0.5, xref="paper", yref="paper", font=dict(size=14))
    heading = title or "Sweep: output tokens/s in total against per user"
    if projection and not heading.lower().startswith("projection"):
        heading = "Projection. " + heading
    ratio = trade_off(rows, front)
    heading += f"<br>{ratio}" if ratio else ""
    note = failed_note(rows, names)
    if narrow:
        heading = wrap(heading, NARROW_CHARS)
        n_bad = len(failed(rows))
        note = note and f"not plotted: {n_bad} failed point{'s' if n_bad > 1 else ''}, " \
            "listed beside"
    # the lines under the title: the clock, a line per part of a long one ("H100
    # (simulated ...); a projection: ..."), then the note (each a caption line in the
    # article profile); in the narrow pane, no line longer than it
    sups = [("clock: " if i == 0 else "") + part for i, part in enumerate(clock.split("; "))]
    sups += [note] if note else []
    if narrow:
        sups = [line for s in sups for line in wrap(s, 2 * NARROW_CHARS - 30).split("<br>")]
    lines = heading.count("<br>") + 1
    # the legend at the foot, under the x axis (a narrow pane has no room beside the title;
    # there its items wrap, one under the other, and the plot leaves room for them)
    rows_below = 3 if narrow else 1
    fig.update_layout(height=HEIGHT + 22 * (rows_below - 1), showlegend=True,
                      hovermode="closest",
                      legend=dict(orientation="h", x=0.01, xanchor="left",
                                  y=0.01, yanchor="bottom", xref="container",
                                  yref="container"),
                      margin=dict(t=14 + 22 * lines + 17 * len(sups), r=30,
                                  b=72 + 24 * rows_below))
    out = fig.style(heading, None, dark=dark)
    out["layout"]["title"]["text"] += "".join(f"<br><sup>{s}</sup>" for s in sups)
    return out


def _hi(row, key) -> float:
    s = (row["metrics"].get("spread") or {}).get(key)
    v = _num(s[1]) if s and len(s) == 2 else None
    return v if v is not None else _num(row["metrics"][key])


def figure(rows, *, title: str | None = None, dark: bool = False, selected: int | None = None,
           narrow: bool = False) -> go.Figure:
    """The frontier of a sweep's rows as a plotly figure (see ``spec``)."""
    return go.Figure(spec(rows, title=title, dark=dark, selected=selected, narrow=narrow))
