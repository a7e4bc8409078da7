"""Chapter 14's figures, one point each (``figures``: the main one first):

* ``""``: the agent's rounds: every round re-sends the whole conversation, and the prefix
  cache serves more of it each round (token counts from the engine);
* ``"burst"``: several users released at once, each one's wait and stream as its client saw
  it, and how few engine steps served them all (wall clock, one run; a deterministic run has
  no burst, and the agent's figure says so).

Every number written in them is read from the measurement.
"""
from __future__ import annotations

from .. import palette
from . import _kit


def _frame(fig, title: str, clock: str, legend: dict):
    """The house style, margins that hold the title and the axis titles, and the legend
    (``legend``: where it goes; inside the plot, paper coordinates, stays there in the
    article profile; else at the foot)."""
    _kit.style(fig, title, clock)
    fig.update_layout(margin=dict(t=80, b=60 + (30 if legend.get("yref") == "container"
                                                   else 0), l=70, r=30), legend=legend)
    return fig


def agent_figure(data: dict):
    """Per round: the prompt (from the prefix cache, then computed, stacked) beside the
    answer; over each prompt, the share the cache served."""
    import plotly.graph_objects as go
    rounds = data["agent"]["rounds"]
    x = [f"round {r['round']}" for r in rounds]
    fig = go.Figure()
    # the prompt's two parts stacked in one bar (offsetgroup), the answer beside it
    fig.add_trace(go.Bar(x=x, y=[r["cached"] for r in rounds], offsetgroup="prompt",
                         name="prompt tokens from the prefix cache",
                         marker=dict(color=palette.CACHE["cached"],
                                     line=dict(color=palette.INK, width=1))))
    share = [r["cached"] / r["prompt_tokens"] if r["prompt_tokens"] else 0 for r in rounds]
    fig.add_trace(go.Bar(x=x, y=[r["computed"] for r in rounds], offsetgroup="prompt",
                         base=[r["cached"] for r in rounds],
                         name="prompt tokens computed (prefill)",
                         marker_color=palette.PHASE["prefill"],
                         text=[f"{s:.0%} cached" if s else "" for s in share],
                         textposition="outside", cliponaxis=False))
    fig.add_trace(go.Bar(x=x, y=[r["completion_tokens"] for r in rounds], offsetgroup="answer",
                         name="answer tokens (decode)", marker_color=palette.PHASE["decode"]))
    top = max(r["prompt_tokens"] for r in rounds)
    fig.update_yaxes(title_text="tokens", range=[0, top * 1.45], automargin=True)
    fig.update_layout(barmode="group", height=500)
    last = rounds[-1]
    title = (f"An agent re-sends the conversation every round: {share[-1]:.0%} cached by "
             f"round {last['round']}")
    clock = f"token counts from the engine ({data['model']})" if data.get("burst") else (
        f"token counts from the engine ({data['model']}; deterministic: the burst, whose "
        "times depend on the machine, left out)")
    return _frame(fig, title, clock,
                  dict(orientation="v", xref="paper", yref="paper", x=0.01, xanchor="left",
                       y=0.99, yanchor="top"))


def burst_figure(data: dict):
    """Each user of the burst, send to first token to last, as its client saw it: the
    client's view is times, not the engine's phases (the wait holds queue and prefill
    alike), so the neutral series: waiting light, streaming dark."""
    import plotly.graph_objects as go
    b = data["burst"]
    ok = [u for u in b["users"] if "error" not in u]
    ys = [u["id"] for u in ok]
    fig = go.Figure()
    fig.add_trace(go.Bar(y=ys, x=[u["ttft"] for u in ok], base=[u["offset"] for u in ok],
                         orientation="h", marker_color=palette.SERIES["baseline"],
                         name="sent, waiting for the first token"))
    fig.add_trace(go.Bar(y=ys, x=[u["e2e"] - u["ttft"] for u in ok],
                         base=[u["offset"] + u["ttft"] for u in ok], orientation="h",
                         marker_color=palette.SERIES["main"],
                         name="streaming (the answer's tokens arriving)",
                         text=[f"{u['completion_tokens']} tokens" for u in ok],
                         textposition="outside", cliponaxis=False))
    end = max(u["offset"] + u["e2e"] for u in ok)
    fig.update_xaxes(title_text="seconds from the burst's start", range=[0, end * 1.18])
    fig.update_yaxes(autorange="reversed", automargin=True)
    fig.update_layout(barmode="overlay", bargap=0.25, height=500)
    title = (f"{len(b['users'])} users at once: {b['tokens']:,} tokens in {b['steps']:,} "
             f"engine steps, up to {b['max_batch']} a step")
    return _frame(fig, title, f"wall clock, this machine, one run (the clients' times, "
                  f"{data['model']}); steps and tokens counted by the engine",
                  dict(orientation="h", yref="container", y=0, yanchor="bottom",
                       xref="container", x=0.01, xanchor="left"))
