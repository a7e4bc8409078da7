"""Chapter 3, second part: each token extends the sequence, so a decode step reads more as the
context grows (03-decode-context).

A decode step reads every weight once and, for each sequence, the keys and values of every
token before it: the longer the context, the more bytes per generated token. Measured here:
one request at a time, the median wall time of its decode-only steps after a prompt of each
length, the lengths interleaved (A B A B) under a busy check, on SmolLM2 in the real engine.
Beside each, the bytes the step reads (weights + context x K/V bytes per token). The prompt is
the same in every repeat, so prefix caching computes it once: the repeats time decode steps.
"""
from __future__ import annotations

import statistics

import numpy as np

from .. import protocol
from ..verdicts import FAILS, Verdict, on_wall, no_wall_run, x
from ._ch09_decode_step import decode_steps

CLEAR = 1.2          # the longest context's step this much slower: the growth is clear


def contexts(smoke: bool) -> tuple[int, ...]:
    return (64, 2048) if smoke else (64, 1024, 4096)


def _prompt(n: int) -> list[int]:
    return np.random.default_rng(n).integers(3, 8000, size=n).tolist()


def measure(smoke: bool, repeats: int, lengths: tuple[int, ...] | None = None) -> dict:
    """Each context length's decode step on the wall clock, interleaved ``repeats`` times
    (``lengths``: the falsification passes the same length twice)."""
    from . import _kit
    lengths = tuple(lengths or contexts(smoke))
    steps = 8 if smoke else 16
    eng = _kit.engine(None, enable_prefix_caching=True, num_blocks=None,
                      max_model_len=max(lengths) + steps + 16)
    _kit.warm_up(eng)
    arms = {f"{i}: {n} tokens": (lambda n=n: decode_steps(eng, 1, steps, [_prompt(n)]))
            for i, n in enumerate(lengths)}
    res = protocol.compare(arms, repeats)
    w = eng.loaded.weights.linear_bytes
    kv = eng.runner.kv_bytes_per_token
    rows = []
    for arm, n in zip(arms, lengths):
        ctx = statistics.mean(r["context"] for r in res.runs[arm])
        rows.append({"prompt": n, "context": ctx, "step": res.spread(arm, lambda r:
                     r["step_s"]).as_dict(), "kv_bytes": ctx * kv, "bytes": w + ctx * kv})
    return {"rows": rows, "weight_bytes": w, "kv_bytes_per_token": kv,
            "model": eng.model_name, **res.meta()}


def judge(c: dict | None) -> Verdict:
    """The decode step after the longest context against the shortest: clearly slower
    (``CLEAR``, the ranges apart) holds; slower by 5% or more, smaller; else it does not
    hold. The bytes each step reads are the reason's explanation."""
    if not c:
        return no_wall_run("per-token decode time against the context is judged on this "
                           "machine's wall clock only")
    a, b = c["rows"][0], c["rows"][-1]
    sa, sb = protocol.Spread(**a["step"]), protocol.Spread(**b["step"])
    grow, apart = sb.median / sa.median, sb.lo > sa.hi
    reads = b["bytes"] / a["bytes"]
    steps = "; ".join(f"after {r['prompt']:,} tokens {protocol.Spread(**r['step']).ms(1)}, "
                      f"reading {r['bytes'] / 1e6:.0f} MB ({r['kv_bytes'] / 1e6:.1f} MB of K/V)"
                      for r in c["rows"])
    return Verdict(on_wall(grow, clear=CLEAR) if apart else FAILS,
                   f"one request decoding on {c['model']}, the time of a decode step: {steps}; "
                   f"{x(grow)} slower at the longest context"
                   f"{'' if apart else ' (the ranges overlap)'}, while the bytes read grow "
                   f"{x(reads)} ({c['weight_bytes'] / 1e6:.0f} MB of weights plus "
                   f"{c['kv_bytes_per_token'] / 1024:.0f} KiB of K/V per token of context); "
                   f"this machine's wall clock (medians of {c['repeats']} interleaved repeats)",
                   measured=f"{x(grow)} slower per token",
                   points=tuple((f"{r['prompt']:,}-token context",
                                 r["step"]["median"] * 1e3) for r in c["rows"]),
                   unit="ms per decode step, one request", clock=c["label"],
                   warning=c.get("warning"))
