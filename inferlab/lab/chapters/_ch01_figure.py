"""Chapter 1's figure: what the model reads at turn 3, and what each turn computes.

Left: the prompt at turn 3 by segment (told apart by their labels; what the user typed in
the main series' grey). Right: every turn sends the whole conversation again; a bar pair per
turn, the prompt without a prefix cache (all of it computed: prefill) and with one (the part
served from the cache in the cache's colour, the rest computed).
"""
from __future__ import annotations

from .. import palette
from ..verdicts import x as times

COMPUTED = "prompt tokens computed (prefill)"
SERVED = "prompt tokens from the prefix cache"
SHOWN = {"template": "chat template"}     # a part's name as the figure prints it
OFFSET = 0.19          # each turn: the bar without a cache left of the turn, with it right


def figure(data: dict, colors: dict[str, str]):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from . import _kit
    counts = data["counts"]
    segs = list(colors)
    off, on = data["runs"]["uncached · sim"], data["runs"]["cached · sim"]
    n = len(off)
    fig = make_subplots(rows=1, cols=2, column_widths=[0.33, 0.67], horizontal_spacing=0.1,
                        subplot_titles=("the prompt at turn 3, by part",
                                        f"prompt tokens of each of {n} turns"))
    shown = [SHOWN.get(s, s) for s in segs]
    fig.add_trace(go.Bar(y=shown, x=[counts[s] for s in segs], orientation="h",
                         marker_color=[colors[s] for s in segs], showlegend=False,
                         name="tokens at turn 3", text=[counts[s] for s in segs]), 1, 1)
    turns = [r["turn"] for r in off]
    bar = dict(width=2 * OFFSET - 0.03)
    fig.add_trace(go.Bar(x=[t - OFFSET for t in turns] + [t + OFFSET for t in turns],
                         y=[r["computed_tokens"] for r in off] + [r["computed_tokens"] for r in on],
                         name=COMPUTED, marker=dict(color=palette.PHASE["prefill"]), **bar), 1, 2)
    fig.add_trace(go.Bar(x=[t + OFFSET for t in turns],
                         y=[r["prompt_tokens"] - r["computed_tokens"] for r in on], name=SERVED,
                         marker=dict(color=palette.CACHE["cached"],
                                     line=dict(color=palette.INK, width=0.5)), **bar), 1, 2)
    t_off = sum(r["computed_tokens"] for r in off)
    t_on = sum(r["computed_tokens"] for r in on)
    fig.add_annotation(text=f"{n} turns: {t_off:,} tokens computed without a cache,<br>"
                            f"{t_on:,} with it ({times(t_off / t_on)} fewer)",
                       xref="x2 domain", yref="y2 domain", x=0.02, y=0.98, xanchor="left",
                       yanchor="top", showarrow=False, align="left", font=dict(size=13))
    fig.update_layout(barmode="stack")
    fig.update_yaxes(autorange="reversed", row=1, col=1)
    fig.update_xaxes(title_text="tokens", row=1, col=1)
    fig.update_xaxes(title_text="turn (left bar: no prefix cache; right: with it)", row=1, col=2,
                     tickvals=[1] + list(range(5, n + 1, 5)), range=[0.4, n + 0.6])
    top = max(r["prompt_tokens"] for r in off)
    fig.update_yaxes(title_text="prompt tokens", range=[0, top * 1.25], row=1, col=2)
    total = sum(counts.values())
    typed = counts.get("new message", 0)
    fig = _kit.style(fig, f"At turn 3 the user typed {typed} of the {total} tokens the model "
                          "reads; every turn sends all of them again", "none: token counts",
                     left=120)
    return fig.update_layout(margin_t=110, legend=dict(traceorder="normal"))
