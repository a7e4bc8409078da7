"""Chapter 13's figures, one point each (``figures``: the main one first):

* ``""``: the next-token odds at three temperatures, what top-p keeps of them, and how often
  the engine's seeded sampler drew each token: the same prompt, different answers;
* (``"near"``, nearly identical prompts, is ``_ch13_near.near_figure``);
* ``"length"``: one decode step per answer token, so the time grows with the length;
* ``"kv"``: the KV cache's trade: the tokens pushed through the model with and without it,
  and the memory it keeps for every token, per model shape;
* ``"network"``: the time to the first token a user sees, as the round trip grows.

Every number written in them is read from the measurement; their colours are greys (a
temperature, a prompt size, a model are none of the palette's meanings).
"""
from __future__ import annotations

from .. import figures as ilf
from .. import palette
from . import _kit

BAR = 0.26                 # a temperature's bar width, in categories (three side by side)


def _ratio(r: float) -> str:
    return f"{r:.0f}x" if r >= 10 else f"{r:.1f}x"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.0f} ms"


def _frame(fig, title: str, clock: str, top: int = 80, legend: dict | None = None):
    """The house style for one of these figures: the title, its clock, margins that hold
    them and the axis titles and nothing more, and the legend (if any) inside the plot,
    where the article profile leaves it (``legend``: its x, y and anchors, paper
    coordinates)."""
    _kit.style(fig, title, clock)
    fig.update_layout(margin=dict(t=top, b=60, l=70, r=30))
    if legend:
        fig.update_layout(legend=dict(orientation="v", xref="paper", yref="paper", **legend))
    return fig


def sampling_figure(data: dict, temperatures, colors, prompt_text: str):
    """The main figure: bars of each top token's probability at each temperature (greys,
    hotter darker), the engine's seeded draws at temperature 1 as marks on that bar."""
    import plotly.graph_objects as go
    d, dr, a = data["distribution"], data["draws"], data["answers"]
    fig = go.Figure()
    k = len(d["top"])
    for j, t in enumerate(temperatures):
        off = (j - (len(temperatures) - 1) / 2) * BAR
        fig.add_trace(go.Bar(
            x=[i + off for i in range(k)], y=[e["p"][t] for e in d["top"]], width=BAR * 0.92,
            name=f"temperature {t}: top-p {d['top_p']} keeps {d['nucleus'][t]:,} tokens",
            marker_color=colors[t]))
    one = next((j for j, t in enumerate(temperatures) if float(t) == 1.0), None)
    if one is not None:
        off = (one - (len(temperatures) - 1) / 2) * BAR
        fig.add_trace(go.Scatter(
            x=[i + off for i in range(len(dr["top"]))], y=[e["drawn"] for e in dr["top"]],
            mode="markers", marker=dict(symbol="diamond", size=11, color=palette.INK, line=dict(
                width=1.5, color=palette.NEUTRAL["light"]["bg"])),
            name=f"share of {dr['n']:,} seeded draws at temperature {temperatures[one]}"))
    fig.update_xaxes(tickvals=list(range(k)), ticktext=[repr(e["text"]) for e in d["top"]],
                     title_text=f"the {k} likeliest next tokens", showgrid=False,
                     range=[-0.6, k - 0.4])
    fig.update_yaxes(title_text="probability of the next token", rangemode="tozero",
                     tickformat=".0%", automargin=True)
    fig.update_layout(height=520)
    title = (f"One prompt, {a['seeds']} seeds, {a['distinct']} answers: "
             "the sampler draws from these odds")
    prompt = prompt_text.replace('"', "'")
    return _frame(fig, title, f"none: probabilities from {data['model']}'s logits, draws "
                  f"counted through the engine's sampler · the prompt: \"{prompt}\"",
                  legend=dict(x=0.99, xanchor="right", y=0.99, yanchor="top"))


def length_figure(data: dict):
    """The time to the whole answer against its length (log-log: a straight line of slope
    one), each point labelled with its engine steps and its time."""
    import plotly.graph_objects as go
    dec = data["decode"]
    a, b = dec[0], dec[-1]
    n = [r["max_tokens"] for r in dec]
    e2e = [r["e2e"] * 1e3 for r in dec]
    fig = go.Figure(go.Scatter(
        x=n, y=e2e, mode="lines+markers+text", name="time to the whole answer",
        showlegend=False, line=dict(color=palette.SERIES["main"], width=2.5),
        marker=dict(size=9), textfont=dict(size=13),
        textposition=["bottom right"] * (len(dec) - 1) + ["top left"],
        text=[f"{r['steps']:,} steps, {_ms(r['e2e'])}" for r in dec]))
    ilf.log_axis(fig, "x", n, title="answer length (tokens, log scale)", pad=0.12,
                 steps=(1, 2, 5))
    ilf.log_axis(fig, "y", e2e, title="time to the answer (ms, log scale)", pad=0.12,
                 steps=(1, 2, 5))
    fig.update_layout(height=520)
    title = (f"One decode step per token: {_ratio(b['max_tokens'] / a['max_tokens'])} the "
             f"tokens took {_ratio(b['e2e'] / a['e2e'])} the time")
    return _frame(fig, title, f"{data['clock_sim']} · steps counted by the engine")


def kv_figure(data: dict):
    """Left, the work: tokens pushed through the model to write one answer with the KV cache
    and without it. Right, the price: the bytes the cache keeps for every token, per model."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots
    s, mem = data["kv"]["saving"], data["kv"]["memory"]
    w, wo = s["with"]["tokens"], s["without"]["tokens"]
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.2, column_widths=[0.4, 0.6],
                        subplot_titles=(f"work: a {s['answer']}-token answer",
                                        "memory: what each token keeps"))
    fig.add_trace(go.Bar(
        x=["with the<br>KV cache", "without"], y=[w, wo], showlegend=False, name="tokens",
        marker_color=[palette.SERIES["main"], palette.SERIES["baseline"]],
        text=[f"{w:,}", f"{wo:,}"], textposition="outside", cliponaxis=False), 1, 1)
    fig.update_yaxes(title_text="tokens computed", tickformat=",~r", range=[0, wo * 1.15],
                     automargin=True, row=1, col=1)
    kib = [r["kv_bytes_per_token"] / 1024 for r in mem]
    fig.add_trace(go.Bar(
        y=[r["model"] for r in mem], x=kib, orientation="h", showlegend=False,
        name="KV cache per token", marker_color=palette.SERIES["main"],
        text=[f"{k:,.0f} KiB" for k in kib], textposition="outside", cliponaxis=False), 1, 2)
    fig.update_xaxes(title_text="KiB per token (bf16)", range=[0, max(kib) * 1.4],
                     tickformat=",~r", row=1, col=2)
    fig.update_yaxes(autorange="reversed", automargin=True, row=1, col=2)
    fig.update_layout(height=500, bargap=0.35)
    title = (f"The KV cache trades memory per token for {_ratio(wo / w)} fewer tokens "
             "computed")
    return _frame(fig, title, f"none: tokens counted by the engine ({s['prompt']:,}-token "
                  "prompt, one answer); bytes from the models' shapes", top=95)


def network_figure(data: dict, prompts, handshakes: int):
    """The time to the first token a user sees against the network's round trip: each prompt
    size on a kept connection (solid) and on a new one (dotted: the handshakes first)."""
    import plotly.graph_objects as go
    net = data["network"]
    inks = dict(zip(prompts, palette.sequence(len(prompts))))
    fig = go.Figure()
    for p in prompts:
        for new in (False, True):
            rows = [r for r in net if r["prompt"] == p and r["new_connection"] == new]
            fig.add_trace(go.Scatter(
                x=[r["rtt"] * 1e3 for r in rows], y=[r["perceived"] * 1e3 for r in rows],
                mode="lines+markers", line=dict(color=inks[p], width=2.5,
                                                dash="dot" if new else None),
                name=f"{p:,}-token prompt" + (", new connection" if new else "")))
    warm = [r for r in net if not r["new_connection"] and r["prompt"] == min(prompts)]
    far = max(warm, key=lambda r: r["rtt"])
    fig.update_xaxes(title_text="network round trip (ms)", tickvals=[r["rtt"] * 1e3
                                                                    for r in warm])
    fig.update_yaxes(title_text="TTFT the user sees (ms)", rangemode="tozero",
                     automargin=True)
    fig.update_layout(height=520)
    title = (f"{far['rtt'] * 1e3:.0f} ms away, a {far['prompt']:,}-token prompt waits "
             f"{_ratio(far['perceived'] / far['server'])} the server's TTFT")
    return _frame(fig, title, f"{data['clock_sim']} · a new connection: +{handshakes} round "
                  "trips (TCP, TLS)",
                  legend=dict(x=0.01, xanchor="left", y=0.99, yanchor="top"))
