"""Chapter 15: what a token costs, how many long contexts fit, and where the memory goes.

Three consequences of the same two facts (a step reads every weight once, however many
tokens it computes; every live token keeps its keys and values in the KV cache):

* a prompt token is cheaper to serve than a generated one, which is why API price lists
  charge several times more per output token (``_ch15_price``);
* a model that accepts a long context does not serve many long contexts at once: the KV
  budget holds only so many of them (``_ch15_capacity``);
* the weights and the KV cache take most of a serving process's memory (``_ch15_memory``).

Each has a figure of its own (``figures``, drawn in ``_ch15_figures``).
"""
from __future__ import annotations

from .. import measure_cache
from ..verdicts import AFTER, ENTER, ILLUSTRATION, PAGED, Claim, no_wall_run
from . import _kit
from ._ch15_capacity import capacity_lines, judge_long_context, measure_capacity
from ._ch15_figures import capacity_figure, memory_figure, price_figure
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
                    requests=4, cap_decode=8, mem_requests=4, mem_prompt=64, mem_blocks=128)
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
        import gc
        gc.collect()    # the engines above go before the worker process builds its own
        data["memory"] = measure_memory(memory_model, s["mem_blocks"], s["mem_requests"],
                                        s["mem_prompt"], s["decode"])
    return data


def precision(smoke: bool = False, model: str | None = None, dtypes=None) -> dict:
    """fp32 and bf16 engines side by side (``_ch15_precision``): speed, bytes, where the
    greedy answers part. ``dtypes=("float32", "float32")`` removes the effect."""
    _kit.seed_everything(0)
    # a smoke run (tests, Binder's 2 GB pod) keeps one copy of each engine's weights: oneDNN
    # on them as they are, no packed second copy (its pod peak: docs/results/binder-chapters-amd.json)
    kw = dict(prompts=4, max_tokens=24, repeats=2, unpacked=True) if smoke else \
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


# --- the figures (``_ch15_figures``): one point each ------------------------------------------
def figures(data: dict) -> dict:
    """The chapter's figures, main first: what a token costs ("" when the price was
    measured), how many long contexts fit ("capacity"), where the memory goes ("memory");
    a part that was not measured has no figure (no empty panels)."""
    drawn = [(k, draw) for k, part, draw in (("", "price", price_figure),
                                             ("capacity", "capacity", capacity_figure),
                                             ("memory", "memory", memory_figure))
             if part in data]
    return {("" if i == 0 else k): draw(data) for i, (k, draw) in enumerate(drawn)}


def figure(data: dict):
    """The main figure, ``figures``' first (the others: ``figures(data)["capacity"]``,
    ``["memory"]``)."""
    return next(iter(figures(data).values()))


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
