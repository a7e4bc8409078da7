"""Why continuous batching gains about 1.5x in this lab and 8x in Anyscale's benchmark.

Static batching runs each batch as long as its longest answer; continuous batching can at
best keep every seat busy. With every request waiting from the start, the gain in decode
steps is bounded by each static batch's longest answer over its mean answer
(``verdicts.ideal_batching_gain``). The chapter's chat answers (SmolLM2 stopping where it
stops) give a bound under 2x; a gain near 8x needs batches where one answer runs dozens of
times longer than the others.

``measure_spread`` runs the engine's real scheduler, static and continuous, on workloads
whose answer lengths are set (``ignore_eos``): in each batch of eight, seven short answers
and one ``ratio`` times longer. It counts the decode steps each scheduler takes on SmolLM2:
a count, deterministic.
"""
from __future__ import annotations

from .. import palette
from ..verdicts import ideal_batching_gain

RATIOS = (1, 2, 4, 8, 16, 32, 64)      # the long answer over the short ones, per batch
SMOKE_RATIOS = (1, 4, 16)
SHORT = 2                               # tokens in a short answer
SEATS = 8
BATCHES = 8                             # as many batches as seats: the bound can reach 8x
PUBLISHED = 8.0                         # Anyscale's continuous-batching gain (scheduling alone)


def lengths(ratio: int) -> list[int]:
    """Answer lengths in arrival order: each batch of SEATS holds one long answer."""
    group = [SHORT * ratio] + [SHORT] * (SEATS - 1)
    return [n for b in range(BATCHES) for n in group[b % SEATS:] + group[:b % SEATS]]


def steps(scheduler: str, lens: list[int]) -> int:
    """Decode steps the engine's scheduler takes for answers of ``lens`` (all waiting)."""
    import inferlab as il
    from inferlab.observe.trace import Trace

    from . import _kit
    eng = _kit.engine(None, scheduler=scheduler, max_num_seqs=SEATS, block_size=16,
                      num_blocks=1024, max_model_len=SHORT * max(RATIOS) + 64)
    prompts = [f"Count to {i + 2}." for i in range(len(lens))]
    with Trace.record(eng) as tr:
        eng.generate(prompts, [il.SamplingParams(max_tokens=n, ignore_eos=True) for n in lens],
                     use_tqdm=False)
    return len(tr.records)


def measure_spread(smoke: bool = False) -> dict:
    """For each ratio: the ideal bound and the steps each scheduler took."""
    rows = []
    for ratio in SMOKE_RATIOS if smoke else RATIOS:
        lens = lengths(ratio)
        s, c = steps("static", lens), steps("continuous", lens)
        rows.append({"ratio": ratio, "ideal": ideal_batching_gain(lens, SEATS)[0],
                     "static_steps": s, "continuous_steps": c, "gain": s / c})
    return {"rows": rows, "seats": SEATS, "short": SHORT, "batches": BATCHES,
            "clock": "none: decode steps the engine's scheduler took on SmolLM2-135M-Instruct"}


def spread_figure(spread: dict, here: dict | None = None):
    """The gain in steps against its bound, one point per answer-length spread, with this
    chapter's chat requests (``here``: ideal, steps gain, wall-clock gain) and the published
    8x; the diagonal is the bound."""
    import plotly.graph_objects as go

    from . import _kit
    rows = spread["rows"]
    top = max([r["ideal"] for r in rows] + [PUBLISHED]) * 1.08
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[1, top], y=[1, top], mode="lines", name="the bound: longest "
                             "over mean answer", line=dict(color=palette.MUTED, dash="dot")))
    fig.add_trace(go.Scatter(
        x=[r["ideal"] for r in rows], y=[r["gain"] for r in rows], mode="markers+text",
        name=f"engine, one long answer per batch of {spread['seats']}",
        text=[f"{r['ratio']}x longer" if r["ratio"] > 1 else "all equal" for r in rows],
        textposition="middle right", marker=dict(size=10, color=palette.SERIES["main"])))
    if here:
        # the two sit at one x and often a few hundredths apart: a small diamond inside a
        # wide ring, drawn after it, so neither hides the other
        for y, symbol, size, what in ((here["wall"], "diamond", 9, "on the wall clock"),
                                      (here["steps"], "circle-open", 22, "in steps")):
            fig.add_trace(go.Scatter(            # one trace each: its legend shows its marker
                x=[here["ideal"]], y=[y], mode="markers",
                name=f"this chapter's chat answers, {what}",
                marker=dict(size=size, symbol=symbol, color=palette.INK,
                            line=dict(width=2, color=palette.INK))))
        fig.add_annotation(x=here["ideal"], y=here["wall"], ax=-30, ay=-150, showarrow=True,
                           arrowcolor=palette.INK, xanchor="left", yanchor="bottom",
                           align="left", text=f"this chapter's chat answers:<br>"
                           f"{here['steps']:.2f}x in steps, {here['wall']:.2f}x on the clock")
    fig.add_hline(y=PUBLISHED, line=dict(color=palette.MUTED_TEXT, dash="dash", width=1.5))
    fig.add_annotation(x=1.05, y=PUBLISHED, xanchor="left", yanchor="bottom", showarrow=False,
                       text=f"Anyscale's benchmark: {PUBLISHED:.0f}x (published)",
                       font=dict(color=palette.MUTED_TEXT))
    fig.update_xaxes(title_text="bound: each static batch's longest answer over the mean (x)",
                     range=[0.8, top], dtick=1)
    fig.update_yaxes(title_text="continuous over static, decode steps (x)", range=[0.8, top],
                     dtick=1)
    fig.update_layout(height=560, showlegend=True)
    return _kit.style(fig, "The gain is bounded by how unequal the answers in a batch are",
                      spread["clock"])
