"""Chapter 3, third part: some models respond faster than others (03-model-sizes).

A bigger model has more weights to read for every generated token and more arithmetic for
every prompt token, so on the same machine it answers later and types slower. Measured here:
SmolLM2-135M (its real weights) beside larger published shapes built with random weights
(the time of a forward pass does not depend on what the weights say; the tokens do, and are
not compared), the same prompt on each, the models interleaved (A B A B) under a busy check:
the time to the first token and the time per output token. A shape whose weights would not fit
in half of the memory this machine (or container) has left is not run, and says so.
"""
from __future__ import annotations

from .. import protocol
from ..verdicts import FAILS, UNMEASURABLE, Verdict, on_wall, no_wall_run, x
from ._ch03_steps import one_request

PROMPT, OUTPUT = 128, 16
REAL = "smollm2-135m"        # measured with its real weights (the default model)


def shapes(smoke: bool) -> tuple[str, ...]:
    return (REAL, "smollm2-360m") if smoke else (REAL, "smollm2-360m", "smollm2-1.7b")


def _fits(shape: str) -> tuple[bool, float]:
    """Whether ``shape``'s fp32 weights fit in half the memory left; and their bytes."""
    from inferlab.core.shapes import model_shape, weight_bytes
    from inferlab.model.resources import available_memory
    need = weight_bytes(model_shape(shape), 4)
    return need <= available_memory() / 2, need


def measure(smoke: bool, repeats: int, names: tuple[str, ...] | None = None) -> dict:
    """Each shape's TTFT and time per output token on the wall clock, interleaved
    ``repeats`` times (``names``: the falsification passes the same shape twice)."""
    from inferlab.core.shapes import model_shape
    from . import _kit
    names = tuple(names or shapes(smoke))
    skipped, engines = {}, {}
    for i, name in enumerate(names):
        ok, need = _fits(name)
        if not ok:
            skipped[name] = need
            continue
        eng = _kit.engine(None if name == REAL else f"random:{name}", num_blocks=64,
                          enable_prefix_caching=False)
        _kit.warm_up(eng)
        engines[f"{i}: {name}"] = (name, eng)
    ids = list(range(100, 100 + PROMPT))
    rows, meta = [], {}
    if len(engines) >= 2:
        res = protocol.compare({a: (lambda e=e: one_request(e, ids, OUTPUT)) for a, (_, e) in engines.items()},
                               repeats)
        meta = res.meta()
        for arm, (name, eng) in engines.items():
            rows.append({"shape": name, "model": eng.model_name,
                         "params": model_shape(name).num_params,
                         "ttft": res.spread(arm, lambda r: r["ttft"]).as_dict(),
                         "tpot": res.spread(arm, lambda r: r["tpot"]).as_dict()})
    return {"rows": rows, "skipped": skipped, "prompt": PROMPT, "output": OUTPUT, **meta}


def judge(s: dict | None) -> Verdict:
    """The largest shape measured against SmolLM2-135M: both its first token and its time
    per output token clearly later (1.5x, the ranges apart) holds; later by 5% or more,
    smaller; else it does not hold. Fewer than two shapes in memory: not measurable."""
    if not s:
        return no_wall_run("model sizes are compared on this machine's wall clock only")
    if len(s["rows"]) < 2:
        return Verdict(UNMEASURABLE, "not measurable here: memory; the larger shapes' fp32 "
                       "weights (" + ", ".join(f"{k} {v / 1e9:.1f} GB" for k, v in
                                               s["skipped"].items()) +
                       ") do not fit in half of the memory left", measured="not measured")
    a, b = s["rows"][0], s["rows"][-1]
    ta, tb = protocol.Spread(**a["ttft"]), protocol.Spread(**b["ttft"])
    pa, pb = protocol.Spread(**a["tpot"]), protocol.Spread(**b["tpot"])
    first, per = tb.median / ta.median, pb.median / pa.median
    apart = tb.lo > ta.hi and pb.lo > pa.hi
    each = "; ".join(f"{r['shape']} ({r['params'] / 1e6:,.0f}M parameters"
                     f"{'' if r['shape'] == REAL else ', random weights'}): first token "
                     f"{protocol.Spread(**r['ttft']).ms(0)}, "
                     f"{protocol.Spread(**r['tpot']).ms(1)} per output token"
                     for r in s["rows"])
    skipped = "".join(f"; {k} not run ({v / 1e9:.1f} GB of fp32 weights, more than half the "
                      "memory left)" for k, v in s["skipped"].items())
    return Verdict(on_wall(min(first, per)) if apart else FAILS,
                   f"the same {s['prompt']}-token prompt, {s['output']} tokens out: {each}; "
                   f"the largest {x(first)} later to the first token and {x(per)} slower per "
                   f"token{'' if apart else ' (the ranges overlap)'}, for "
                   f"{x(b['params'] / a['params'])} the parameters{skipped}; this machine's "
                   f"wall clock (fp32, medians of {s['repeats']} interleaved repeats)",
                   measured=f"{x(first)} later first token, {x(per)} per token",
                   points=tuple(p for r in s["rows"] for p in (
                       (f"{r['shape']}: first token", r["ttft"]["median"] * 1e3),
                       (f"{r['shape']}: per token", r["tpot"]["median"] * 1e3))),
                   unit="ms", clock=s["label"], warning=s.get("warning"))
