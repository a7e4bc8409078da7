"""Chapter 1, the wall clock: twenty turns deep, the answer starts later.

Each turn sends the whole conversation so far, so without a prefix cache the prompt to
prefill, and with it the time to the first token, grows turn by turn; with the cache a later
turn computes only what is new. Timed on this machine (SmolLM2, the two conversations
interleaved A B A B, medians with their range) at turns spread over the 20.
"""
from __future__ import annotations

from .. import palette
from ..verdicts import Verdict, on_wall, ms, no_wall_run, x

ARMS = {"uncached · wall": ("prefix caching off", palette.SERIES["baseline"], "bottom right"),
        "cached · wall": ("prefix caching on", palette.CACHE["cached"], "top right")}


def judge_later_turns(d: dict) -> Verdict:
    """Without a cache the last timed turn's TTFT must clearly exceed the first's (1.5x);
    the cached conversation's numbers are given beside it."""
    if "wall" not in d:
        return no_wall_run("the later turns' TTFT is judged on this machine's wall clock "
                           f"only; the simulated clock prices {len(d['runs']['uncached · sim'])}"
                           " turns (a projection)")
    off, on = d["runs"]["uncached · wall"], d["runs"]["cached · wall"]
    a, b = off[0], off[-1]
    grow = b["ttft"] / a["ttft"]
    w = d["wall"]
    return Verdict(on_wall(grow, clear=1.5),
                   f"on this machine's wall clock ({d['model']}, medians of {w['repeats']} "
                   f"interleaved repeats) without a prefix cache turn {a['turn']} "
                   f"({a['computed_tokens']} prompt tokens computed) starts after "
                   f"{ms(a['ttft'], 0)}, turn {b['turn']} ({b['computed_tokens']} tokens) after "
                   f"{ms(b['ttft'], 0)} ({x(grow)}); with prefix caching turn {on[-1]['turn']} "
                   f"computes {on[-1]['computed_tokens']} of its {on[-1]['prompt_tokens']} tokens "
                   f"and starts after {ms(on[-1]['ttft'], 0)} (turn {on[0]['turn']}: "
                   f"{ms(on[0]['ttft'], 0)})",
                   measured=f"turn {b['turn']} starts {x(grow)} later than turn {a['turn']}",
                   points=tuple((f"turn {r['turn']}, {lab}", r["ttft"] * 1e3)
                                for key, (lab, _, _) in ARMS.items() for r in d["runs"][key]),
                   unit="time to first token (ms)", clock=w["label"], warning=w.get("warning"))


def turns_figure(data: dict):
    """TTFT per turn on the wall clock, prefix caching off and on, with the repeats' range."""
    import plotly.graph_objects as go

    from . import _kit
    fig = go.Figure()
    # the legend names what the cache's colour means: the earlier turns found cached
    names = {"uncached · wall": "no prefix cache",
             "cached · wall": "prefix cache on: earlier turns cached"}
    for key, (label, color, where) in ARMS.items():
        rows = data["runs"][key]
        fig.add_trace(go.Scatter(
            x=[r["turn"] for r in rows], y=[r["ttft"] for r in rows],
            mode="lines+markers+text", name=names.get(key, label),
            line=dict(color=color, width=2.5),
            marker=dict(size=9, color=color, line=dict(color=palette.INK, width=1)),
            text=[f"{r['computed_tokens']} tokens" for r in rows], textposition=where,
            error_y=dict(type="data", symmetric=False,
                         array=[r["ttft_hi"] - r["ttft"] for r in rows],
                         arrayminus=[r["ttft"] - r["ttft_lo"] for r in rows])))
    fig.update_xaxes(title_text="turn of the conversation", dtick=5 if len(rows) > 3 else None,
                     range=[0, 23])
    fig.update_yaxes(title_text="time to first token (s)", rangemode="tozero")
    off = data["runs"]["uncached · wall"]
    fig.add_annotation(text=f"without a cache, turn {off[-1]['turn']} starts "
                            f"{x(off[-1]['ttft'] / off[0]['ttft'])} later than turn "
                            f"{off[0]['turn']}", xref="paper", yref="paper", x=0.02, y=0.98,
                       xanchor="left", yanchor="top", showarrow=False, font=dict(size=13))
    fig.update_layout(height=420)
    return _kit.style(fig, "Without a prefix cache, later turns start later"
                      f"<br><sup>{data['model']}; labels: prompt tokens computed"
                      "</sup>", data["wall"]["label"], left=80).update_layout(legend_y=-0.32)
