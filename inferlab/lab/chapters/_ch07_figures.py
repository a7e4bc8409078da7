"""Chapter 7's figures, one point each (``ch07_prefix_caching.figures``):

- the agent loop: the prompt tokens each round computes, without and with the prefix cache
  (what the cache serves drawn on top of what is computed: the bar is the prompt re-sent);
- the shared system prompt: time to first token of requests sent one after another;
- requests arriving together: the prompt tokens computed when the shared prompt's blocks are
  findable as they are allocated (vLLM) or only after their step.

Colours by meaning (inferlab.lab.palette): tokens computed are prefill work (``PHASE``),
tokens served from the cache the cache's ``cached`` state; the arm without a cache is grey.
"""
from __future__ import annotations

from .. import figures, palette
from ..verdicts import x as times

COMPUTED = "prompt tokens computed (prefill)"
SERVED = "prompt tokens from the prefix cache"
# the cache's yellow is faint on white: its bars and points get an ink edge, its lines width
EDGE = dict(color=palette.INK, width=1)


def _counts_clock(data: dict) -> str:
    return f"none: prompt tokens counted by the engine ({data['model']})"


def _note(fig, text: str, x: float = 0.02, y: float = 0.98):
    """The ratio the figure is about, written in its empty corner."""
    return fig.add_annotation(text=text, xref="paper", yref="paper", x=x, y=y, xanchor="left",
                              yanchor="top", showarrow=False, align="left",
                              font=dict(size=14))


def agent(data: dict):
    """Prompt tokens per round of the agent loop, prefix cache off and on, side by side."""
    import plotly.graph_objects as go
    u, c, s = data["agent"]["uncached"], data["agent"]["cached"], data["sizes"]
    rounds = [str(k) for k in range(len(u["prompt_tokens"]))]
    arms = ("off", "on")
    xs = [[r for r in rounds for _ in arms], [a for _ in rounds for a in arms]]
    computed = [v for pair in zip(u["computed_tokens"], c["computed_tokens"]) for v in pair]
    served = [None for _ in rounds for _ in arms]
    served[1::2] = [p - k for p, k in zip(c["prompt_tokens"], c["computed_tokens"])]
    fig = go.Figure([
        go.Bar(x=xs, y=computed, name=COMPUTED, marker=dict(color=palette.PHASE["prefill"])),
        go.Bar(x=xs, y=served, name=SERVED, marker=dict(color=palette.CACHE["cached"],
                                                         line=EDGE))])
    last_u, last_c = u["computed_tokens"][-1], c["computed_tokens"][-1]
    _note(fig, f"last round: {last_c:,.0f} tokens computed instead of {last_u:,.0f} "
               f"({times(last_u / last_c)} fewer)")
    top = max(u["prompt_tokens"])
    fig.update_layout(barmode="stack", bargap=0.25)
    fig.update_yaxes(title_text=f"prompt tokens (mean of {s['tasks']} loops)",
                     range=[0, top * 1.18], automargin=True)
    fig.update_xaxes(title_text="round of the agent loop (0: the task), prefix cache off and on",
                     tickfont=dict(size=13))
    title = ("An agent loop re-sends its whole prompt every round; with a prefix cache "
             "only the new tokens are computed"
             f"<br><sup>{s['tasks']} loops of {s['tool_calls']} tool calls, "
             f"{s['tools_len']}-token tool definitions</sup>")
    figures.style(fig, title, _counts_clock(data))
    return fig.update_layout(margin=dict(t=95, b=140), legend=dict(
        traceorder="normal", orientation="h", x=0, xanchor="left", y=-0.34, yanchor="top"))


def shared(data: dict):
    """Time to first token of requests sharing one system prompt, one after another."""
    import plotly.graph_objects as go
    s, arms = data["sizes"], data["shared"]
    names = {"uncached": "no prefix cache", "cached": "system prompt cached"}
    colors = {"uncached": palette.SERIES["baseline"], "cached": palette.CACHE["cached"]}
    fig = go.Figure()
    for arm in ("uncached", "cached"):
        t = [v * 1e3 for v in arms[arm]["ttft"]]
        edge = EDGE if arm == "cached" else dict(width=0)
        fig.add_trace(go.Scatter(x=list(range(1, len(t) + 1)), y=t, mode="lines+markers",
                                 name=names[arm], line=dict(color=colors[arm], width=3),
                                 marker=dict(size=9, color=colors[arm], line=edge)))
    u, c = arms["uncached"]["ttft"][1:], arms["cached"]["ttft"][1:]
    mu, mc = sum(u) / len(u), sum(c) / len(c)
    fig.add_annotation(text=f"requests 2 to {len(u) + 1}: {mc * 1e3:.1f} ms instead of "
                       f"{mu * 1e3:.1f} ms ({times(mu / mc)} shorter)", xref="paper",
                       x=0.98, xanchor="right", y=(mu + mc) / 2 * 1e3, yanchor="middle",
                       showarrow=False, font=dict(size=14))
    top = max(max(v["ttft"]) for v in arms.values()) * 1e3
    fig.update_yaxes(title_text="time to first token (ms)", range=[0, top * 1.15],
                     automargin=True)
    fig.update_xaxes(title_text="request, sent one after another",
                     tickvals=[1] + list(range(5, len(u) + 2, 5)))
    title = (f"Requests sharing a {s['system_len']:,}-token system prompt: once it is cached, "
             "each later request starts sooner"
             f"<br><sup>each request: the system prompt and {s['user_len']} tokens of its "
             "own</sup>")
    figures.style(fig, title, data["clock"])
    return fig.update_layout(margin=dict(t=95, b=110), legend=dict(
        traceorder="normal", orientation="h", x=0, xanchor="left", y=-0.24, yanchor="top"))


def together(data: dict):
    """Prompt tokens computed and served from the cache for requests arriving together,
    the prompt's blocks indexed after their step or as they are allocated (vLLM)."""
    import plotly.graph_objects as go
    s = data["sizes"]
    runs = [data["together"][k] for k in ("after", "ahead")]
    labels = {"after the step": "blocks indexed<br>after their step",
              "at allocation": "blocks indexed as<br>allocated (vLLM)"}
    ys = [labels.get(r["index"], r["index"]) for r in runs]
    comp = [r["computed_tokens"] for r in runs]
    served = [r["prompt_tokens"] - r["computed_tokens"] for r in runs]
    fig = go.Figure([
        go.Bar(y=ys, x=comp, orientation="h", name=COMPUTED,
               marker=dict(color=palette.PHASE["prefill"]),
               text=[f"{v:,}" for v in comp], textposition="inside",
               insidetextanchor="middle", textfont=dict(size=14)),
        go.Bar(y=ys, x=served, orientation="h", name=SERVED,
               marker=dict(color=palette.CACHE["cached"], line=EDGE),
               text=[f"{v:,}" for v in served], textposition="inside",
               insidetextanchor="middle", textfont=dict(size=14))])
    a, b = comp
    _note(fig, f"indexed after their step: {a - b:,} more prompt tokens computed "
               f"({times(a / b)})", y=1.12)
    total = max(r["prompt_tokens"] for r in runs)
    fig.update_layout(barmode="stack", bargap=0.35)
    fig.update_xaxes(title_text=f"prompt tokens of the {s['together']} requests "
                     f"({total:,} in all)", range=[0, total * 1.02])
    fig.update_yaxes(autorange="reversed", automargin=True)
    title = (f"{s['together']} requests with one {s['system_len']:,}-token system prompt "
             "arrive at once: blocks indexed as allocated are shared in the first step"
             "<br><sup>indexed only after their step, each request admitted in the first "
             "step computes its own copy of the system prompt</sup>")
    figures.style(fig, title, _counts_clock(data))
    return fig.update_layout(height=420, margin=dict(t=125, l=20, b=110), legend=dict(
        traceorder="normal", orientation="h", x=0, xanchor="left", y=-0.3, yanchor="top"))


def all_figures(data: dict) -> dict:
    """{suffix: figure}: the agent loop first (the chapter's main figure), then the shared
    system prompt, one after another and all together."""
    return {"": agent(data), "shared": shared(data), "together": together(data)}
