"""Chapter 15, first part: what a prompt token and a generated token cost to serve.

A prompt token rides in a prefill step with many others: the step reads the weights once for
all of them. A generated token gets a decode step of its own (per request): the step reads
the same weights for one token per request. So on the same machine a prompt token costs a
fraction of a generated one, and the gap narrows as a decode batch grows. Measured here on the
real model from the engine's own step records (each step's wall time, split by what it
computed), A B A B, and turned into a price per million tokens at a stated hourly cost.
"""
from __future__ import annotations

import numpy as np

from .. import protocol
from ..verdicts import Verdict, against_published, direction, worst, x
from . import _kit

# What one hour of this machine is assumed to cost (an assumption, not a measurement): about
# what a 2-vCPU general-purpose cloud VM rents for on demand.
HOURLY_USD = 0.10
# Public API list prices, USD per million tokens (input, output), with where and when seen.
PUBLISHED = (
    {"model": "GPT-4o", "input": 2.50, "output": 10.00,
     "source": "OpenAI API pricing (platform.openai.com/docs/pricing), as listed May 2026"},
    {"model": "GPT-4o mini", "input": 0.15, "output": 0.60,
     "source": "OpenAI API pricing (platform.openai.com/docs/pricing), as listed May 2026"},
    {"model": "Claude Sonnet 4", "input": 3.00, "output": 15.00,
     "source": "Anthropic pricing (docs.anthropic.com/en/docs/about-claude/pricing), 2025"},
    {"model": "Claude Haiku 3.5", "input": 0.80, "output": 4.00,
     "source": "Anthropic pricing (docs.anthropic.com/en/docs/about-claude/pricing), 2025"},
)


def published_ratios() -> list[tuple[str, float]]:
    return [(p["model"], p["output"] / p["input"]) for p in PUBLISHED]


def _ids(n: int, seed: int) -> list[int]:
    return np.random.default_rng(seed).integers(3, 49152, size=n).tolist()


def step_costs(eng, prompts, decode_tokens: int) -> dict:
    """Run ``prompts`` at once; from the engine's step records, the wall seconds per prompt
    token (steps that only prefilled) and per generated token (steps that only decoded)."""
    import inferlab as il
    steps = []
    unsubscribe = eng.subscribe(steps.append)
    try:
        eng.generate(prompts, il.SamplingParams(max_tokens=decode_tokens, ignore_eos=True),
                     use_tqdm=False)
    finally:
        unsubscribe()
    pre = [s for s in steps if s.num_decode_tokens == 0 and s.num_prefill_tokens]
    dec = [s for s in steps if s.num_prefill_tokens == 0 and s.num_decode_tokens]
    n_pre, n_dec = sum(s.num_prefill_tokens for s in pre), sum(s.num_decode_tokens for s in dec)
    return {"prefill": sum(s.wall_duration for s in pre) / n_pre,
            "decode": sum(s.wall_duration for s in dec) / n_dec,
            "prefill_steps": len(pre), "prefill_tokens": n_pre,
            "decode_steps": len(dec), "decode_tokens": n_dec,
            "tokens_per_prefill_step": n_pre / len(pre), "tokens_per_decode_step": n_dec / len(dec)}


def measure_price(model, prompt_len: int, decode_tokens: int, batch: int, repeats: int,
                  one_token_per_step: bool = False) -> dict:
    """Batch 1 and a full batch (``batch`` requests at once), interleaved under the protocol.
    ``one_token_per_step``: the engine may compute at most one token per request per step
    (``max_num_batched_tokens`` = the batch), so prompts are fed as decode is: the effect
    removed, for the claim's falsification test."""
    arms = {}
    for b in (1, batch):
        kw = dict(max_num_batched_tokens=b) if one_token_per_step else {}
        eng = _kit.engine(model, enable_prefix_caching=False, max_num_seqs=batch, **kw)
        _kit.warm_up(eng)
        prompts = [_ids(prompt_len, seed=i) for i in range(b)]
        arms[f"batch {b}"] = (lambda eng=eng, prompts=prompts:
                              step_costs(eng, prompts, decode_tokens))
        name = eng.model_name
    res = protocol.compare(arms, repeats)
    rows = []
    for arm, reps in res.runs.items():
        row = {"arm": arm, "batch": int(arm.split()[1]), **{k: reps[0][k] for k in reps[0]
                                                           if k not in ("prefill", "decode")}}
        for key in ("prefill", "decode"):
            sp = res.spread(arm, lambda r, key=key: r[key])
            row.update({key: sp.median, f"{key}_lo": sp.lo, f"{key}_hi": sp.hi})
        ratio = res.spread(arm, lambda r: r["decode"] / r["prefill"])
        row.update(ratio=ratio.median, ratio_lo=ratio.lo, ratio_hi=ratio.hi)
        for key in ("prefill", "decode"):       # USD per million tokens at HOURLY_USD
            row[f"usd_per_m_{key}"] = HOURLY_USD / 3600 * row[key] * 1e6
        rows.append(row)
    return {**res.meta(), "rows": rows, "model": name, "prompt_len": prompt_len,
            "decode_tokens": decode_tokens, "batch": batch, "hourly_usd": HOURLY_USD,
            "cpu": protocol.cpu_name(), "one_token_per_step": one_token_per_step}


def price_lines(p: dict) -> list[str]:
    lines = [f"cost per token on this machine ({p['model']}, {p['cpu']}, {p['label']}); "
             f"prompts of {p['prompt_len']} tokens, {p['decode_tokens']} generated each; "
             f"price at an assumed ${p['hourly_usd']:.2f} per hour:"]
    for r in p["rows"]:
        lines.append(f"  {r['arm']:9}: prompt token {r['prefill'] * 1e3:6.2f} ms "
                     f"[{r['prefill_lo'] * 1e3:.2f}-{r['prefill_hi'] * 1e3:.2f}] "
                     f"({r['tokens_per_prefill_step']:.0f} per step), generated token "
                     f"{r['decode'] * 1e3:6.2f} ms [{r['decode_lo'] * 1e3:.2f}-"
                     f"{r['decode_hi'] * 1e3:.2f}] ({r['tokens_per_decode_step']:.0f} per step): "
                     f"{x(r['ratio'])}; ${r['usd_per_m_prefill']:.3f} vs "
                     f"${r['usd_per_m_decode']:.3f} per million tokens")
    lines.append("published output/input price ratios: " + ", ".join(
        f"{m} {x(v)}" for m, v in published_ratios()))
    return lines + ([p["warning"]] if p.get("warning") else [])


def judge_token_price(d: dict) -> Verdict:
    """A generated token must cost clearly more than a prompt token at batch 1 (1.5x), and
    at the full batch it is set against the lowest published output/input price ratio."""
    p = d["price"]
    one, full = p["rows"][0], p["rows"][-1]
    low = min(v for _, v in published_ratios())
    v = worst(direction(one["ratio"], clear=1.5, no_effect=1.25),
              against_published(full["ratio"], low, no_effect=1.25))
    pub = ", ".join(f"{m} {x(r)}" for m, r in published_ratios())
    return Verdict(v, f"on this machine's wall clock ({p['model']}, {p['cpu']}, medians of "
                   f"{p['repeats']} interleaved repeats) a generated token costs "
                   f"{x(one['ratio'])} a prompt token at batch 1 ({one['decode'] * 1e3:.1f} vs "
                   f"{one['prefill'] * 1e3:.2f} ms) and {x(full['ratio'])} at batch "
                   f"{full['batch']} ({full['decode'] * 1e3:.1f} vs {full['prefill'] * 1e3:.2f} "
                   f"ms; {full['tokens_per_prefill_step']:.0f} prompt tokens per prefill step, "
                   f"{full['tokens_per_decode_step']:.0f} per decode step); at an assumed "
                   f"${p['hourly_usd']:.2f}/hour: ${full['usd_per_m_prefill']:.3f} vs "
                   f"${full['usd_per_m_decode']:.3f} per million tokens; public list prices "
                   f"charge {pub} (output/input)",
                   measured=f"{x(one['ratio'])} at batch 1, {x(full['ratio'])} at "
                            f"{full['batch']}",
                   points=(("batch 1", one["ratio"]), (f"batch {full['batch']}", full["ratio"]),
                           *((m, r, "published") for m, r in published_ratios())),
                   unit="generated-token cost / prompt-token cost (x)", axis="log",
                   clock=p["label"], warning=p.get("warning"))

