"""Chapter 15: what a token costs, how many long contexts fit, and where the memory goes.

Three consequences of the same two facts (a step reads every weight once, however many
tokens it computes; every live token keeps its keys and values in the KV cache):

* a prompt token is cheaper to serve than a generated one, which is why API price lists
  charge several times more per output token (``_ch15_price``);
* a model that accepts a long context does not serve many long contexts at once: the KV
  budget holds only so many of them (``_ch15_capacity``);
* the weights and the KV cache take most of a serving process's memory (``_ch15_memory``).
"""
from __future__ import annotations

from .. import measure_cache, palette
from ..verdicts import AFTER, ENTER, ILLUSTRATION, PAGED, Claim, no_wall_run
from . import _kit
from ._ch15_capacity import capacity_lines, judge_long_context, measure_capacity
from ._ch15_memory import PARTS, judge_memory, measure_memory, memory_lines
from ._ch15_precision import measure_precision, precision_figure, precision_lines
from ._ch15_price import judge_token_price, measure_price, price_lines, published_ratios

TITLE = "What a token costs, how many long contexts fit, where the memory goes"
CLAIM = ("Input tokens are cheaper to serve than output tokens; a long context window is not "
         "room for many long requests; the weights and the KV cache take most of the memory.")
# the KV budget of the capacity run: room for this many long requests (the lab's choice, so
# 15-long-context is an illustration; its reason gives the engine's default budget at the
# model's own context length beside it)
FITS = 2


def sizes(smoke: bool) -> dict:
    if smoke:
        return dict(prompt_len=64, decode=8, batch=4, repeats=2, long=128, short=16,
                    requests=4, cap_decode=8, mem_requests=4, mem_prompt=64, mem_blocks=512)
    return dict(prompt_len=256, decode=32, batch=16, repeats=3, long=1024, short=64,
                requests=8, cap_decode=16, mem_requests=16, mem_prompt=256, mem_blocks=512)


@measure_cache.shared
def measure(smoke: bool = False, deterministic: bool = False, model: str | None = None,
            parts=("price", "capacity", "memory"), one_token_per_step: bool = False,
            fits: int | None = FITS, memory_model: str | None = None,
            resize: dict | None = None) -> dict:
    """``price``: the cost per prompt and per generated token on this machine's wall clock
    (skipped when ``deterministic``); ``capacity``: long and short requests in a KV budget
    with room for ``fits`` long ones (``None``: room for all); ``memory``: the breakdown of
    one engine process (``memory_model``: the model it loads). ``one_token_per_step`` and
    ``fits=None`` remove the first two effects, ``memory_model="tiny"`` the third, for the
    falsification tests; ``resize``: sizes to change (``sizes``' names)."""
    _kit.seed_everything(0)
    s = {**sizes(smoke), **(resize or {})}
    data = {"sizes": s, "model": "SmolLM2-135M-Instruct", "clock_sim": _kit.SIM_LABEL}
    if "price" in parts and not deterministic:
        data["price"] = measure_price(model, s["prompt_len"], s["decode"], s["batch"],
                                      s["repeats"], one_token_per_step)
        data["model"] = data["price"]["model"]
    if "capacity" in parts:
        data["capacity"] = measure_capacity(s["long"], s["short"], s["requests"],
                                            s["cap_decode"], fits)
    if "memory" in parts:
        data["memory"] = measure_memory(memory_model, s["mem_blocks"], s["mem_requests"],
                                        s["mem_prompt"], s["decode"])
    return data


def precision(smoke: bool = False, model: str | None = None, dtypes=None) -> dict:
    """fp32 and bf16 engines side by side (``_ch15_precision``): speed, bytes, where the
    greedy answers part. ``dtypes=("float32", "float32")`` removes the effect."""
    _kit.seed_everything(0)
    kw = dict(prompts=4, max_tokens=24, repeats=2) if smoke else \
        dict(prompts=8, max_tokens=64, repeats=3)
    return measure_precision(model, dtypes=dtypes or ("float32", "bfloat16"), **kw)


def precision_summary(p: dict) -> str:
    return "\n".join(precision_lines(p))


def summary(data: dict) -> str:
    lines = [f"model: {data['model']}"]
    if "price" in data:
        lines += price_lines(data["price"])
    if "capacity" in data:
        lines += capacity_lines(data["capacity"])
    if "memory" in data:
        lines += memory_lines(data["memory"])
    return "\n".join(lines)


# --- the figure ------------------------------------------------------------------------------
# the model's parts (palette.PART), the KV cache by its blocks' states, the rest in greys
PART_COLORS = {"weights": palette.PART["weights"], "KV cache, holding tokens": palette.CACHE["used"],
               "KV cache, reserved and free": palette.CACHE["free"],
               "activations and workspace": palette.PART["activations"],
               "everything else": palette.SERIES["baseline"],
               "GPU memory left free": palette.SERIES["band"]}


def _price_panels(fig, p):
    import plotly.graph_objects as go
    arms = [r["arm"] for r in p["rows"]]
    for key, phase, name in (("prefill", "prefill", "a prompt token (prefill)"),
                             ("decode", "decode", "a generated token (decode)")):
        rows = p["rows"]
        fig.add_trace(go.Bar(x=arms, y=[r[key] * 1e3 for r in rows], name=name,
                             marker_color=palette.PHASE[phase], error_y=dict(
                                 type="data", symmetric=False,
                                 array=[(r[f"{key}_hi"] - r[key]) * 1e3 for r in rows],
                                 arrayminus=[(r[key] - r[f"{key}_lo"]) * 1e3 for r in rows])),
                      1, 1)
    for r in p["rows"]:
        fig.add_annotation(x=r["arm"], y=r["decode"] * 1e3, text=f"{r['ratio']:.1f}x",
                           yshift=14, showarrow=False, row=1, col=1)
    top = max(r["decode_hi"] for r in p["rows"]) * 1e3
    fig.update_yaxes(title_text="ms per token", range=[0, top * 1.2], row=1, col=1)
    labels = [f"here,<br>{r['arm']}" for r in p["rows"]]
    fig.add_trace(go.Scatter(x=labels, y=[r["ratio"] for r in p["rows"]], mode="markers+text",
                             text=[f"{r['ratio']:.1f}x" for r in p["rows"]],
                             textposition="middle right", name="measured here (cost ratio)",
                             marker=dict(size=11, color=palette.PHASE["decode"])), 1, 2)
    pub = published_ratios()
    fig.add_trace(go.Scatter(x=[m.replace(" ", "<br>", 1) for m, _ in pub], y=[v for _, v in pub], mode="markers+text",
                             text=[f"{v:.0f}x" for _, v in pub], textposition="middle right",
                             name="published list prices (output / input)",
                             marker=dict(size=11, symbol="diamond-open",
                                         color=palette.SERIES["main"])), 1, 2)
    from .. import figures as ilf
    ilf.log_axis(fig, "y", [*(r["ratio"] for r in p["rows"]), *(v for _, v in pub), 1],
                 title="generated / prompt token (x, log)", row=1, col=2)


def _capacity_panel(fig, c, row: int = 2):
    import plotly.graph_objects as go
    lo, sh = c["long"], c["short"]
    xs = [f"{sh['context']}-token requests", f"{lo['context']:,}-token requests"]
    fig.add_trace(go.Bar(x=xs, y=[sh["max_running"], lo["max_running"]],
                         marker_color=palette.SERIES["main"], showlegend=False,
                         text=[f"{sh['max_running']} at once", f"{lo['max_running']} at once"],
                         textposition="inside"), row, 1)
    fig.add_trace(go.Scatter(x=xs, y=[lo["requests"]] * 2, mode="lines",
                             line=dict(color=palette.INK, dash="dash", width=1.5),
                             name=f"{lo['requests']} requests waiting"), row, 1)
    fig.update_yaxes(title_text="requests", rangemode="tozero", dtick=2, row=row, col=1)


def memory_bars(m: dict) -> dict:
    """The memory panel's bars: {label: {part: bytes}}, the KV cache split by use."""
    p = m["projection"]

    def split(parts, used):
        out = {k: v for k, v in parts.items() if k != "KV cache"}
        out["KV cache, holding tokens"] = used
        out["KV cache, reserved and free"] = parts["KV cache"] - used
        return out
    return {"SmolLM2 here, idle": split(m["parts_idle"], 0),
            "SmolLM2 here,<br>under load": split(m["parts_load"], m["kv_peak_used"]),
            f"{p['model']} on an<br>80 GB GPU (projection)":
                {**split(p["parts"], 0), "GPU memory left free": p["free"]}}


def _memory_panel(fig, m, row: int = 2):
    import plotly.graph_objects as go
    bars = memory_bars(m)
    base = {label: 0.0 for label in bars}
    for part, color in PART_COLORS.items():
        xs, ys, texts, starts = [], [], [], []
        for label, parts in bars.items():
            total = sum(parts.values())
            v = parts.get(part, 0)
            size = f"{v / 1e9:,.0f} GB" if "projection" in label else f"{v / 1e6:,.0f} MB"
            starts.append(base[label])
            base[label] += v / total * 100
            xs.append(v / total * 100)
            ys.append(label)
            texts.append(size if v / total > 0.08 else "")
        fig.add_trace(go.Bar(x=xs, y=ys, base=starts, orientation="h", name=part, text=texts,
                             offsetgroup="memory", textposition="inside",
                             insidetextanchor="middle",
                             marker=dict(color=color, line=dict(color=palette.MUTED, width=1))),
                      row, 2)
    fig.update_xaxes(title_text="% of the process's peak (or of the GPU)", range=[0, 100],
                     row=row, col=2)
    fig.update_yaxes(autorange="reversed", row=row, col=2)


def figure(data: dict):
    from plotly.subplots import make_subplots
    s = data["sizes"]
    # the price row only when the price was measured (a deterministic run has none: no
    # empty panels then)
    rows = 2 if "price" in data else 1
    titles = (f"cost per token, this machine ({s['prompt_len']}-token prompts)",
              "a generated token's cost over a prompt token's")[:2 * (rows - 1)] + (
              "the same KV budget, long vs short requests", "where the memory goes")
    fig = make_subplots(rows=rows, cols=2, vertical_spacing=0.2, horizontal_spacing=0.14,
                        subplot_titles=titles)
    if "price" in data:
        _price_panels(fig, data["price"])
    if "capacity" in data:
        _capacity_panel(fig, data["capacity"], rows)
    if "memory" in data:
        _memory_panel(fig, data["memory"], rows)
    fig.update_layout(barmode="group", height=820 if rows == 2 else 480)
    clock = data["price"]["label"] if "price" in data else "none: counts and bytes"
    _kit.style(fig, TITLE, f"{clock}; requests at once: block counts; memory: bytes "
               "resident", left=70)
    if rows == 2:
        fig.update_xaxes(tickangle=0, row=1, col=2)
    return fig


# --- the chapter's claims: how each is measured and judged ------------------------------------
def measure_for_claims(smoke: bool) -> dict:
    """The measurement every claim below is judged on (``claims.run_all``): the prices on
    the wall clock, the capacity in block counts, the memory in bytes."""
    return measure(smoke=smoke)


def judge_price(d: dict):
    if "price" not in d:
        return no_wall_run("the cost per token is judged on this machine's wall clock only (0 "
                           "repeats here)")
    return judge_token_price(d)


CLAIMS = (
    Claim("15-token-price", "A prompt token costs less to serve than a generated token: "
          "prefill computes many prompt tokens in one pass over the weights, decode makes one "
          "token per request per pass; API price lists charge more for output tokens.",
          f"{AFTER}; the price lists: OpenAI and Anthropic API pricing pages (cited in the "
          "chapter, with dates)", "ch15_memory_and_price", measure_for_claims, judge_price),
    Claim("15-long-context", "A long context window is not many long requests: every live "
          "token keeps its keys and values in the KV cache, so a budget that holds a few long "
          "contexts serves only those few at once.", f"{AFTER}; {PAGED}",
          "ch15_memory_and_price", measure_for_claims, judge_long_context, kind=ILLUSTRATION),
    Claim("15-memory", "The model's weights and the KV cache take most of a serving "
          "process's memory; activations and everything else are the smaller part.",
          f"{ENTER}; {PAGED}", "ch15_memory_and_price", measure_for_claims, judge_memory),
)
