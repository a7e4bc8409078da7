"""The report card: every claim's verdict as a table (terminal, Markdown), as one small
figure per claim (measurements as bars, published values as markers or ranges, the verdict
named in the legend) and as one tally that is also the verdicts' colour key
(`inferlab claims`, notebooks/11_report_card)."""
from __future__ import annotations

import textwrap

from . import palette
from .verdicts import KINDS, STANDINGS

# the verdicts' colours, by name (palette.VERDICT), in the report card's order
VERDICT_COLORS = {v: palette.VERDICT[v] for v in STANDINGS}


def counts(results) -> dict[str, int]:
    """How many claims got each verdict (measured claims) or were shown as a projection or
    an illustration."""
    out = {v: 0 for v in VERDICT_COLORS}
    for _, _, verdict in results:
        out[verdict.verdict] += 1
    return out


def kind_counts(results) -> dict[str, int]:
    """How many claims rest on a measurement, a projection, an illustration."""
    out = {k: 0 for k in KINDS}
    for claim, _, _ in results:
        out[claim.kind] += 1
    return out


def as_records(results) -> list[dict]:
    """Every claim as plain data (``inferlab claims --json``)."""
    return [{"id": c.id, "chapter": c.chapter, "claim": c.text, "source": c.source,
             "rests_on": c.kind, "verdict": v.verdict, "measured": v.measured,
             "reason": v.reason, "unit": v.unit, "clock": v.clock, "warning": v.warning,
             "points": [_point_record(p) for p in v.points], "chart": v.chart, "axis": v.axis}
            for c, _, v in results]


def _point_record(point) -> list:
    label, value, role = point_parts(point)
    value = list(value) if isinstance(value, tuple) else value
    return [label, value, role] if role else [label, value]


def verdict_from_record(rec: dict):
    """A claims.json record (``as_records``) back as a Verdict, to draw its figure without
    measuring again."""
    from .verdicts import Verdict
    return Verdict(rec["verdict"], rec["reason"], rec["measured"],
                   tuple(tuple(tuple(x) if isinstance(x, list) else x for x in p)
                         for p in rec["points"]), rec["unit"], rec["clock"],
                   rec.get("warning"), rec.get("chart", "bars"), rec.get("axis", "linear"))


def as_result_file(results, command: str, smoke: bool, meta: dict | None = None) -> dict:
    """The report card as a result file (docs/results/claims.json): every claim with the
    command, date, CPU and load of the run that measured it (``meta``: the records', when
    judged on them)."""
    from .protocol import result_meta
    return {**(meta or result_meta(command)), "smoke": smoke, "rests_on": kind_counts(results),
            "verdicts": counts(results), "claims": as_records(results)}


def write_result_file(results, path: str, command: str, smoke: bool,
                      meta: dict | None = None) -> str:
    import json
    import os
    path = os.path.abspath(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(as_result_file(results, command, smoke, meta), f, indent=1)
        f.write("\n")
    return path


def text_table(results, width: int = 110) -> str:
    """claim | measured | verdict, then the reason indented beneath (terminal width)."""
    lines = [f"{'claim':20} {'rests on':12} {'measured':34} verdict", "-" * min(width, 80)]
    for claim, _, v in results:
        lines.append(f"{claim.id:20} {claim.kind:12} {v.measured[:34]:34} {v.verdict}")
        lines += textwrap.wrap(v.reason, width, initial_indent="    ",
                               subsequent_indent="    ")
        if v.warning:
            lines += textwrap.wrap(v.warning, width, initial_indent="    ",
                                   subsequent_indent="    ")
    lines += ["", "rests on: " + "; ".join(f"{n} {k}" for k, n in kind_counts(results).items()),
              "; ".join(f"{n} {v}" for v, n in counts(results).items())]
    return "\n".join(lines)


def markdown_rows(records) -> list[str]:
    """The report card's Markdown table from ``as_records`` (or a claims.json's "claims"):
    the header, then one row per claim, its warning after the reason."""
    esc = lambda s: str(s).replace("|", "\\|").replace("\n", " ")
    rows = ["| claim | chapter | rests on | measured | verdict | reason |",
            "|---|---|---|---|---|---|"]
    for c in records:
        reason = c["reason"] + (f" ({c['warning']})" if c.get("warning") else "")
        rows.append(f"| {esc(c['claim'])} | {c['chapter'][:4]} | {c['rests_on']} | "
                    f"{esc(c['measured'])} | **{c['verdict']}** | {esc(reason)} |")
    return rows


def markdown_table(results) -> str:
    """The table as the README carries it."""
    return "\n".join(markdown_rows(as_records(results)))


# --- the figures -----------------------------------------------------------------------------
# A Verdict's points are (label, value) pairs, drawn as bars in the verdict's colour, or
# (label, value, role): "published" (a published value drawn as a marker, or a range when
# the value is (lo, hi)), "reference" (a bound or a size to read the bars against, such as a
# measured ceiling: a dashed line across the plot), a policy name (palette.POLICY: static,
# continuous, chunked: a bar in that policy's colour; bars sharing a label are grouped) or
# "total" (a chart="stack" verdict's whole, drawn after its parts). A published value with
# a measurement's label gets a row of its own beneath it ("<label>, published").
PUBLISHED, REFERENCE, TOTAL = "published", "reference", "total"
ROLES = (PUBLISHED, REFERENCE, TOTAL, *palette.POLICY)
WIDTH = 680


def point_parts(point) -> tuple[str, object, str]:
    """(label, value, role) of one point; value is a float, or (lo, hi) for a range."""
    label, value, *rest = point
    role = rest[0] if rest else ""
    if role and role not in ROLES:
        raise ValueError(f"point {label!r}: role must be one of {ROLES}, got {role!r}")
    if isinstance(value, (tuple, list)):
        lo, hi = (float(v) for v in value)
        return str(label), (lo, hi), role
    return str(label), float(value), role


def suffix(unit: str) -> str:
    """What follows a number in ``unit``: 'x' for ratios, '%' for percentages, ' ms'."""
    u = unit.strip()
    if "(x)" in u or u.startswith("x ") or u == "x":
        return "x"
    if u.startswith("%"):
        return "%"
    if u.endswith("(ms)") or u.startswith("ms "):
        return " ms"
    if u.endswith("GB/s"):
        return " GB/s"
    return ""


def number(value: float, unit: str = "") -> str:
    """A value as a figure prints it: thousands separators, never scientific notation,
    three significant digits below 100 (10,849; 95; 4.7; 1.33x; 2.77%)."""
    text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    if "e" in text:                   # tiny values: decimals, not 1e-05
        text = f"{value:.6f}".rstrip("0").rstrip(".")
    return text + suffix(unit)


def wrap(label: str, width: int = 26) -> str:
    """A row label on lines of ``width`` characters (plotly's <br>), so none is cut."""
    return "<br>".join(textwrap.wrap(label, width)) or label


def figure(claim, verdict):
    """One small figure of the numbers behind a verdict: measured values as bars in the
    verdict's colour (or in a policy's colour), published values as markers or ranges,
    references as dashed lines; a stacked verdict (chart="stack") as parts adding up to a
    whole; the legend is the key (the verdict's colour names the verdict)."""
    import math

    import plotly.graph_objects as go

    from . import figures
    pts = [point_parts(p) for p in verdict.points]
    unit, color = verdict.unit, VERDICT_COLORS[verdict.verdict]
    # a published value gets its own row beneath the measurement it is compared with
    pts = [(f"{lb}, published" if rl == PUBLISHED and "published" not in lb else lb, v, rl)
           for lb, v, rl in pts]
    rows: list[str] = []
    for label, _, role in pts:
        if role != REFERENCE and label not in rows:
            rows.append(label)
    ylab = {r: wrap(r) for r in rows}
    fig = go.Figure()
    key = f"measured: {verdict.verdict}" if claim.kind == "measured" else verdict.verdict
    chart = verdict.chart
    if chart == "stack":                      # parts that add up to a whole
        parts = [(lb, v, rl) for lb, v, rl in pts if rl in ("", TOTAL)]
        fig.add_trace(go.Waterfall(
            orientation="h", y=[ylab[lb] for lb, _, _ in parts],
            x=[v for _, v, _ in parts], name=key,
            measure=["total" if rl == TOTAL else "relative" for _, _, rl in parts],
            text=[number(v, unit) if rl == TOTAL or i == 0 else "+" + number(v, unit)
                  for i, (_, v, rl) in enumerate(parts)],
            textposition="outside", cliponaxis=False, connector=dict(
                line=dict(color=palette.MUTED, width=1, dash="dot")),
            increasing=dict(marker=dict(color=color)),
            totals=dict(marker=dict(color=palette.INK)), showlegend=False))
        fig.add_trace(go.Bar(x=[None], y=[None], name=key, marker_color=color,
                             orientation="h", hoverinfo="skip"))     # the legend's key
    else:
        groups = [rl for rl in dict.fromkeys(rl for _, _, rl in pts)
                  if rl not in (PUBLISHED, REFERENCE, TOTAL)]
        # side by side only where one row holds several policies' bars
        grouped = any(sum(1 for lb, _, rl in pts if lb == r and rl in palette.POLICY) > 1
                      for r in rows)
        for role in groups:
            bars = [(lb, v) for lb, v, rl in pts if rl == role]
            fig.add_trace(go.Bar(
                y=[ylab[lb] for lb, _ in bars], x=[v for _, v in bars], orientation="h",
                name=role or key, marker_color=palette.POLICY.get(role, color),
                offsetgroup=(role or "measured") if grouped else None,
                text=[number(v, unit) for _, v in bars],
                textposition="outside", cliponaxis=False, legendrank=1,
                textfont=dict(size=12), constraintext="none",
                hovertemplate="%{y}: %{text}<extra>" + (role or "measured") + "</extra>"))
    vals = [v for _, val, _ in pts for v in (val if isinstance(val, tuple) else (val,))]
    if not vals:                              # not measurable: no numbers, only the key
        fig.add_trace(go.Bar(x=[None], y=[None], name=key, marker_color=color,
                             orientation="h", hoverinfo="skip"))
        fig.add_annotation(text="nothing measured: " + wrap(verdict.reason, 80), x=0, y=0.5,
                           xref="paper", yref="paper", xanchor="left", align="left",
                           showarrow=False, font=dict(size=12, color=palette.MUTED_TEXT))
        fig.update_xaxes(visible=False)
        fig.update_yaxes(visible=False)
        vals = [0.0]
    log = verdict.axis == "log"
    if log:
        lo = min(v for v in vals if v > 0)
        lo = 1.0 if suffix(unit) == "x" and lo >= 1 else 10 ** math.floor(math.log10(lo))
        hi = 10 ** math.ceil(math.log10(max(vals) * 1.05))
        tv, tt = figures.log_ticks(lo, hi, suffix(unit))
        fig.update_xaxes(type="log", range=[math.log10(lo), math.log10(hi)], tickvals=tv,
                         ticktext=tt, minor=dict(showgrid=False, ticks=""))
        ax = math.log10                       # annotations on a log axis take log10(x)
        where = lambda v: (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
    else:
        hi = max(vals) * 1.18 if max(vals) > 0 else 1.0     # all zero: nothing measured
        fig.update_xaxes(rangemode="tozero", tickformat=",.6~r", range=[min(0, min(vals)), hi])
        ax = lambda v: v
        where = lambda v: v / hi
    for i, (label, value, role) in enumerate(p for p in pts if p[2] == PUBLISHED):
        if isinstance(value, tuple):          # a published range: a thick line with caps
            lo_, hi_ = value
            text = (f"under {number(hi_, unit)}" if lo_ == 0 else
                    f"{number(lo_, unit).rstrip('x%')}-{number(hi_, unit)}")
            fig.add_trace(go.Scatter(
                x=[lo_, hi_], y=[ylab[label]] * 2, mode="lines+markers", name="published",
                line=dict(color=palette.INK, width=4),
                marker=dict(symbol="line-ns", size=14, line=dict(width=3, color=palette.INK)),
                showlegend=i == 0, legendgroup="published", hoverinfo="text",
                hovertext="published: " + text))
            fig.add_annotation(x=ax(hi_), y=ylab[label], text=text, showarrow=False,
                               xanchor="left", xshift=8, font=dict(size=12, color=palette.INK))
        else:
            left = where(value) > 0.5
            fig.add_trace(go.Scatter(
                x=[value], y=[ylab[label]], mode="markers+text", name="published",
                marker=dict(symbol="diamond", size=13, color=palette.INK),
                text=[number(value, unit)], cliponaxis=False,
                textposition="middle left" if left else "middle right",
                textfont=dict(size=12, color=palette.INK),
                showlegend=i == 0, legendgroup="published", hoverinfo="text",
                hovertext="published: " + number(value, unit)))
    for label, value, role in pts:
        if role == REFERENCE:                 # a bound to read the bars against
            fig.add_vline(x=value, line=dict(color=palette.MUTED_TEXT, dash="dash", width=1.5))
            fig.add_annotation(x=ax(value), y=1, xref="x", yref="paper", yanchor="bottom",
                               xanchor="right" if where(value) > 0.5 else "left",
                               showarrow=False, text=f"{label}: {number(value, unit)}",
                               font=dict(size=11, color=palette.MUTED_TEXT))
    fig.update_xaxes(title_text=unit + (", log scale" if log else ""), automargin=True)
    fig.update_yaxes(autorange="reversed", automargin=True, categoryorder="array",
                     categoryarray=[ylab[r] for r in rows], ticks="")
    mark = f"<span style='color:{color}'>\u25a0</span>"
    # the busy-machine warning travels with the picture, on the clock's line (beneath the
    # plot it ran into the axis title)
    busy = " | <b>busy machine: wall-clock numbers not trustworthy</b>" if verdict.warning else ""
    figures.style(fig, f"{mark} {claim.id}: {verdict.verdict}"
                  + (f" | {verdict.measured}" if verdict.measured else ""),
                  (verdict.clock or "") + busy or None)
    per_row = lambda r: max(1, sum(1 for lb, _, rl in pts if lb == r and rl in palette.POLICY))
    n = sum(max(ylab[r].count("<br>") + 1, per_row(r)) for r in rows)
    fig.update_layout(height=170 + 22 * n + 10 * len(rows), width=WIDTH, showlegend=True,
                      barmode="group" if any(per_row(r) > 1 for r in rows) else "overlay",
                      bargap=0.3, bargroupgap=0.05,
                      legend=dict(orientation="h", x=0, xanchor="left", y=0,
                                  yanchor="bottom", yref="container", traceorder="normal"),
                      margin=dict(l=10, r=40, t=90, b=90))
    return fig


def summary_figure(results):
    """The verdict key and the tally in one picture: one bar, a segment per standing (how
    many claims got it), in the colours every claim's figure uses."""
    import plotly.graph_objects as go

    from . import figures
    c = counts(results)
    fig = go.Figure()
    for verdict, n in c.items():
        if n:
            gap = palette.NEUTRAL["light"]["bg"]            # a white seam between segments
            fig.add_trace(go.Bar(y=["claims"], x=[n], orientation="h", name=f"{verdict} ({n})",
                                 marker=dict(color=VERDICT_COLORS[verdict],
                                             line=dict(color=gap, width=2)),
                                 text=[str(n)], textposition="inside",
                                 insidetextanchor="middle",
                                 hovertemplate=f"{verdict}: {n}<extra></extra>"))
    fig.update_xaxes(title_text="claims", dtick=2, range=[0, sum(c.values())])
    fig.update_yaxes(showticklabels=False, ticks="")
    figures.style(fig, f"{sum(c.values())} claims, each measured and judged, or shown as a "
                  "projection or an illustration")
    fig.update_layout(barmode="stack", width=WIDTH, height=220, showlegend=True,
                      legend=dict(orientation="h", x=0, xanchor="left", y=0,
                                  yanchor="bottom", yref="container", traceorder="normal"),
                      margin=dict(l=20, r=20, t=50, b=90))
    return fig
