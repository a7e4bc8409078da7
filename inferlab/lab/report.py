"""The report card: every claim's verdict as a table (terminal, Markdown) and as one small
figure per claim (`inferlab claims`, notebooks/11_report_card)."""
from __future__ import annotations

import textwrap

from . import palette
from .verdicts import (FAILS, HOLDS, HOLDS_SMALLER, ILLUSTRATED, KINDS, PROJECTED,
                       UNMEASURABLE)

VERDICT_COLORS = {HOLDS: palette.BLUISH_GREEN, HOLDS_SMALLER: palette.ORANGE,
                  FAILS: palette.VERMILLION, UNMEASURABLE: palette.GREY,
                  PROJECTED: palette.SKY_BLUE, ILLUSTRATED: palette.MUTED}


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
             "points": [[str(k), float(val)] for k, val in v.points]}
            for c, _, v in results]


def as_result_file(results, command: str, smoke: bool) -> dict:
    """The report card as a result file (docs/results/claims.json): every claim with the
    command, date, CPU and load of the run that measured it."""
    from .protocol import result_meta
    return {**result_meta(command), "smoke": smoke, "rests_on": kind_counts(results),
            "verdicts": counts(results), "claims": as_records(results)}


def write_result_file(results, path: str, command: str, smoke: bool) -> str:
    import json
    import os
    path = os.path.abspath(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(as_result_file(results, command, smoke), f, indent=1)
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


def figure(claim, verdict):
    """One small bar chart of the numbers behind a verdict, coloured by the verdict."""
    import plotly.graph_objects as go

    from . import figures
    labels = [str(k) for k, _ in verdict.points]
    values = [float(v) for _, v in verdict.points]
    color = VERDICT_COLORS[verdict.verdict]
    fig = go.Figure(go.Bar(y=labels, x=values, orientation="h", marker_color=color,
                           text=[f"{v:.3g}" for v in values], textposition="outside",
                           cliponaxis=False))
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title_text=verdict.unit, rangemode="tozero")
    figures.style(fig, f"{claim.id}: {verdict.verdict} | {verdict.measured}", verdict.clock)
    if verdict.warning:          # the busy-machine warning travels with the picture
        fig.add_annotation(text="busy machine: wall-clock numbers not trustworthy", x=1, y=1,
                           xref="paper", yref="paper", xanchor="right", yanchor="bottom",
                           showarrow=False, font=dict(size=11, color=palette.VERMILLION))
    fig.update_layout(height=120 + 26 * len(labels), width=640, showlegend=False,
                      margin=dict(l=170, r=60, t=60, b=50))
    return fig
