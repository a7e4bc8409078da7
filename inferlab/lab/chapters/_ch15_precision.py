"""Chapter 15, fp32 against bf16: the same model served in both, side by side.

Half precision halves the bytes of every weight and every cached key and value; decode reads
all of them at every step, so it is where a memory-bound engine could gain. What the CPU does
with bf16 decides whether it does: ``plan`` names the path its GEMMs take here
(``model/cpu_features.py``). Measured on the real SmolLM2, on this machine:

* speed: greedy answers to the same chat prompts, one at a time and all in one batch, the two
  engines interleaved (A B A B) under the busy check: decode tokens per second;
* memory: each engine's weight tensors and its KV cache's bytes per token (its own tensors);
* where the tokens diverge: each prompt's greedy answer in both, the first position where
  they differ, and whether there each side's token is among the other's top-5 (vLLM's
  ``check_logprobs_close``: a rounding apart, not a different answer).
"""
from __future__ import annotations

from .. import palette, protocol
from . import _kit

DTYPES = ("float32", "bfloat16")
COLORS = {"float32": palette.SERIES["baseline"], "bfloat16": palette.SERIES["main"]}
TOP = 5


def _weight_bytes(eng) -> int:
    from ._ch15_memory import weight_bytes
    return sum(weight_bytes(eng.loaded.weights, eng.runner.model.linear))  # + its packed copies


def _prompts(tokenizer, n: int) -> list:
    from inferlab.sim.chat_requests import chat_requests
    return [list(r.messages) for r in chat_requests(tokenizer, n, seed=0).requests
            if r.messages][:n]


def _decode_tok_s(eng, prompts, max_tokens: int) -> float:
    """Generated tokens per second of decode steps (prefill steps left out)."""
    import inferlab as il
    seconds, made = [0.0], [0]

    def seen(rec):
        if rec.num_decode_tokens and not rec.num_prefill_tokens:
            seconds[0] += rec.wall_duration
            made[0] += rec.num_decode_tokens
    off = eng.subscribe(seen)
    eng.generate(prompts, il.SamplingParams(max_tokens=max_tokens, ignore_eos=True),
                 use_tqdm=False)
    off()
    return made[0] / seconds[0] if seconds[0] else 0.0


def first_difference(a: list, b: list) -> int | None:
    """The first index where the token lists differ (a length difference counts), or None."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _divergence(outs: dict) -> list[dict]:
    rows = []
    for o32, o16 in zip(outs["float32"], outs["bfloat16"]):
        a, b = list(o32.token_ids), list(o16.token_ids)
        i = first_difference(a, b)
        close = None
        if i is not None and i < min(len(a), len(b)):
            close = a[i] in o16.logprobs[i] and b[i] in o32.logprobs[i]
        rows.append({"tokens": len(a), "first_difference": i, "close_there": close})
    return rows


def measure_precision(model: str | None = None, prompts: int = 4, max_tokens: int = 32,
                      repeats: int = 2, dtypes=DTYPES, unpacked: bool = False) -> dict:
    """Both engines on the same prompts (see the module). ``dtypes=("float32", "float32")``
    removes the effect: the answers then never diverge and the bytes are equal.
    ``unpacked``: oneDNN on the weights as they are (no packed copy) for both engines."""
    import inferlab as il
    kw = {"linear_backend": "onednn"} if unpacked else {}
    engines = {name: _kit.engine(model, dtype=dt, **kw) for name, dt in zip(DTYPES, dtypes)}
    for eng in engines.values():
        _kit.warm_up(eng)
    chats = _prompts(engines["float32"].tokenizer, prompts)
    params = il.SamplingParams(max_tokens=max_tokens, logprobs=TOP)
    outs = {n: eng.generate(chats, params, use_tqdm=False) for n, eng in engines.items()}
    arms = {f"{n} {shape}": (lambda eng=eng, ps=ps: _decode_tok_s(eng, ps, max_tokens))
            for shape, ps in (("batch 1", chats[:1]), (f"batch {len(chats)}", chats))
            for n, eng in engines.items()}
    res = protocol.compare(arms, repeats)
    speed = {arm: res.spread(arm).as_dict() for arm in arms}
    return {**res.meta(), "model": engines["float32"].model_name, "prompts": len(chats),
            "max_tokens": max_tokens, "dtypes": list(dtypes), "speed": speed,
            "engines": {n: {"dtype": eng.config.dtype, "plan": eng.runner.plan.precision,
                            "weights": _weight_bytes(eng),
                            "kv_bytes_per_token": eng.runner.kv_bytes_per_token}
                        for n, eng in engines.items()},
            "divergence": _divergence(outs)}


def precision_lines(p: dict) -> list[str]:
    from inferlab.lab.drawings.kv_map import size
    e32, e16 = p["engines"]["float32"], p["engines"]["bfloat16"]
    lines = [f"fp32 vs bf16 ({p['model']}; bf16 GEMMs here: {e16['plan']}):",
             f"  memory: weights {size(e32['weights'])} vs {size(e16['weights'])}, KV cache "
             f"{size(e32['kv_bytes_per_token'])} vs {size(e16['kv_bytes_per_token'])} a token"]
    for shape in ("batch 1", f"batch {p['prompts']}"):
        a = protocol.Spread(**p["speed"][f"float32 {shape}"])
        b = protocol.Spread(**p["speed"][f"bfloat16 {shape}"])
        lines.append(f"  decode, {shape}: {a.median:,.0f} [{a.lo:,.0f}-{a.hi:,.0f}] vs "
                     f"{b.median:,.0f} [{b.lo:,.0f}-{b.hi:,.0f}] tok/s: bf16 at "
                     f"{b.median / a.median:.2f}x fp32's speed")
    lines.append(f"  ({p['label'].split(' (')[0]})")
    div = p["divergence"]
    same = sum(r["first_difference"] is None for r in div)
    lines.append(f"  greedy answers ({p['max_tokens']} tokens): {same} of {len(div)} the same "
                 "in both" + "".join(
                     f"; prompt {i + 1} apart from token {r['first_difference'] + 1}"
                     + ("" if r["close_there"] is None else
                        " (each side's token in the other's top-5 there)" if r["close_there"]
                        else " (NOT in each other's top-5 there)")
                     for i, r in enumerate(div) if r["first_difference"] is not None))
    return lines + ([p["warning"]] if p.get("warning") else [])


def precision_figure(p: dict):
    """Decode speed, bytes, and where the answers part, fp32 beside bf16."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from inferlab.lab.drawings.kv_map import size
    shapes = ("batch 1", f"batch {p['prompts']}")
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.1, subplot_titles=(
        "decode speed (tokens/s)", "bytes, as a share of fp32's",
        "greedy answers: tokens alike"))
    for n in DTYPES:
        sp = [protocol.Spread(**p["speed"][f"{n} {s}"]) for s in shapes]
        fig.add_trace(go.Bar(x=list(shapes), y=[s.median for s in sp], name=n,
                             marker_color=COLORS[n], legendgroup=n, error_y=dict(
                                 type="data", symmetric=False,
                                 array=[s.hi - s.median for s in sp],
                                 arrayminus=[s.median - s.lo for s in sp])), 1, 1)
        e, full = p["engines"][n], p["engines"]["float32"]
        fig.add_trace(go.Bar(x=["weights", "KV cache, a token"],
                             y=[100 * e["weights"] / full["weights"],
                                100 * e["kv_bytes_per_token"] / full["kv_bytes_per_token"]],
                             name=n, marker_color=COLORS[n], legendgroup=n, showlegend=False,
                             text=[size(e["weights"]), size(e["kv_bytes_per_token"])],
                             textposition="outside"), 1, 2)
    div = p["divergence"]
    same = [r["first_difference"] is None for r in div]
    fig.add_trace(go.Bar(x=[str(i + 1) for i in range(len(div))],
                         y=[r["tokens"] if s else r["first_difference"]
                            for r, s in zip(div, same)],
                         marker=dict(color=[palette.INK if s else "rgba(0,0,0,0)"
                                            for s in same],
                                     line=dict(color=palette.INK, width=1.5)),
                         showlegend=False,
                         text=["all" if s else "" for s in same], textposition="outside",
                         hovertext=[f"{r['tokens']} tokens, all alike" if s else
                                    f"alike for {r['first_difference']} tokens, then apart"
                                    for r, s in zip(div, same)], hoverinfo="text"), 1, 3)
    fig.update_xaxes(title_text="prompt (filled: all alike)", dtick=1, row=1, col=3)
    fig.update_yaxes(rangemode="tozero", title_text="tokens/s", row=1, col=1)
    fig.update_yaxes(range=[0, 125], title_text="% of fp32", row=1, col=2)
    fig.update_yaxes(range=[0, p["max_tokens"] * 1.15], title_text="tokens", row=1, col=3)
    fig.update_layout(barmode="group", height=440)
    clock = (f"wall clock, this machine: median and range of {p['repeats']} interleaved "
             f"repeats" + (f"<br>{p['warning']}" if p.get("warning") else ""))
    _kit.style(fig, f"fp32 and bf16, the same model ({p['model']})", clock)
    if p.get("warning"):                     # the warning's line: room above the panels
        fig.update_layout(margin_t=150)
    return fig
