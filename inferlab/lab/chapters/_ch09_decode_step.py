"""Chapter 9's whole decode step against this machine's two roofs (09-memory-bound).

A decode step of the real model reads every weight once (and each running sequence's K/V),
whatever the batch, and does about two FLOPs per weight per sequence. So at batch 1 it moves
many bytes for little arithmetic, and a large enough batch turns it around. Measured here:
the median wall time of decode-only steps at batch 1 and at a large batch, on SmolLM2 in the
real engine (the batches interleaved, A B A B, under a busy check); beside each, the bytes
it read and the FLOPs it did as shares of this machine's measured memory bandwidth and matmul
rate (``ch09_kernels._machine``). The nearer roof is the limit: memory when the step's
bandwidth share exceeds its arithmetic share.
"""
from __future__ import annotations

import statistics

from .. import protocol
from ..verdicts import FAILS, HOLDS, HOLDS_SMALLER, Verdict, no_wall_run

PROMPT_LEN = 32              # tokens each sequence starts with (its context grows from there)


def batches(smoke: bool) -> tuple[int, ...]:
    """Batch 1, and a batch past this CPU's ridge point (a 135M fp32 model: ~0.5 FLOPs per
    weight byte per sequence, against ridge points of ~3-10 FLOPs per byte here)."""
    return (1, 32) if smoke else (1, 64)


def decode_steps(eng, batch: int, steps: int, prompts: list | None = None) -> dict:
    """``batch`` sequences decoding together for ``steps`` steps: the median wall time of the
    steps that decode all of them (no prefill in the step), and the mean context read.
    ``prompts``: the ``batch`` prompts (default: ``PROMPT_LEN`` tokens each)."""
    import inferlab as il
    times, contexts = [], []

    def seen(rec):
        if rec.num_prefill_tokens == 0 and rec.num_decode_tokens == batch:
            times.append(rec.wall_duration)
            contexts.append(sum(c.start + c.num_tokens for c in rec.batch) / batch)
    unsub = eng.subscribe(seen)
    try:
        prompts = prompts or [[(7 * i + j) % 1000 + 10 for j in range(PROMPT_LEN)]
                              for i in range(batch)]
        eng.generate(prompts, il.SamplingParams(max_tokens=steps + 1, ignore_eos=True),
                     use_tqdm=False)
    finally:
        unsub()
    return {"step_s": statistics.median(times), "context": statistics.mean(contexts),
            "steps": len(times)}


def measure(machine: dict, smoke: bool, repeats: int, model: str | None = None,
            batch_sizes: tuple[int, ...] | None = None) -> dict:
    """Each batch's decode step on the wall clock (interleaved, ``repeats`` times), with the
    bytes and FLOPs of a step; ``machine``: this machine's measured roofs (read_gbs,
    matmul_gflops). ``batch_sizes`` (default ``batches(smoke)``): the falsification passes
    only a large one."""
    from . import _kit
    sizes = tuple(batch_sizes or batches(smoke))
    steps = 8 if smoke else 24
    eng = _kit.engine(model, max_num_seqs=max(sizes), enable_prefix_caching=False,
                      max_num_batched_tokens=max(2048, max(sizes) * PROMPT_LEN))
    _kit.warm_up(eng)
    res = protocol.compare({f"batch {b}": (lambda b=b: decode_steps(eng, b, steps))
                            for b in sizes}, repeats)
    w = eng.loaded.weights
    weight_bytes = w.linear_bytes                  # every linear weight, lm_head included
    flops_per_seq = 2 * weight_bytes / w.lm_head.element_size()
    kv_token = eng.runner.kv_bytes_per_token
    rows = []
    for b in sizes:
        reps = res.runs[f"batch {b}"]
        t = protocol.spread(r["step_s"] for r in reps)
        ctx = statistics.mean(r["context"] for r in reps)
        nbytes = weight_bytes + b * ctx * kv_token
        flops = b * flops_per_seq
        rows.append({"batch": b, "step": t.as_dict(), "context": ctx,
                     "bytes": nbytes, "flops": flops, "gbs": nbytes / t.median / 1e9,
                     "gflops": flops / t.median / 1e9,
                     "bw_share": nbytes / t.median / 1e9 / machine["read_gbs"],
                     "flop_share": flops / t.median / 1e9 / machine["matmul_gflops"]})
    return {"rows": rows, "model": eng.model_name, "weight_mb": weight_bytes / 1e6,
            "kv_bytes_per_token": kv_token, "dtype": str(w.lm_head.dtype).replace("torch.", ""),
            "read_gbs": machine["read_gbs"], "matmul_gflops": machine["matmul_gflops"],
            "wall": {**res.meta(), "model": eng.model_name}}


def bound(row: dict) -> str:
    """Which roof is nearer for this step: "memory" or "compute"."""
    return "memory" if row["bw_share"] > row["flop_share"] else "compute"


def describe(d: dict) -> str:
    """Each batch's step in numbers, as a reason's clause."""
    return "; ".join(
        f"batch {r['batch']}: a step of {protocol.Spread(**r['step']).ms(1)} reads "
        f"{r['bytes'] / 1e6:.0f} MB ({r['gbs']:.1f} GB/s, {r['bw_share']:.0%} of the measured "
        f"{d['read_gbs']:.1f} GB/s) and does {r['flops'] / 1e9:.1f} GFLOPs ({r['gflops']:.0f} "
        f"GFLOP/s, {r['flop_share']:.0%} of the measured {d['matmul_gflops']:.0f}): "
        f"{bound(r)}-bound" for r in d["rows"])


MEMORY_SHARE = 0.5       # a memory-bound step that reads at half the bandwidth or more: holds


def judge(ds: dict | None, attention: str, clock: str, warning: str | None) -> Verdict:
    """09-memory-bound on the whole decode step at its smallest batch: memory-bound where the
    step's bytes are a larger share of the measured bandwidth than its FLOPs of the measured
    matmul rate (holds from half the bandwidth on, smaller below); compute-bound: does not
    hold. ``attention``: the attention kernel's own share, a clause of the reason."""
    if not ds:
        return no_wall_run(f"09-memory-bound is judged on the whole decode step on the wall "
                           f"clock; {attention}")
    first = ds["rows"][0]
    v = FAILS if bound(first) == "compute" else (
        HOLDS if first["bw_share"] >= MEMORY_SHARE else HOLDS_SMALLER)
    return Verdict(v, f"the whole decode step of {ds['model']} ({ds['dtype']}, "
                   f"{ds['weight_mb']:.0f} MB of weights, {ds['kv_bytes_per_token'] / 1024:.0f} "
                   f"KiB of K/V per token of context) on this machine's wall clock (medians of "
                   f"{ds['wall']['repeats']} interleaved repeats): {describe(ds)}; {attention}",
                   measured=f"{first['bw_share']:.0%} of the bandwidth at batch "
                            f"{first['batch']} ({bound(first)}-bound)",
                   points=(("memory bandwidth", ds["read_gbs"], "reference"),
                           *((f"batch {r['batch']}", r["gbs"]) for r in ds["rows"])),
                   unit="GB/s a decode step reads", clock=clock,
                   warning=warning or ds["wall"].get("warning"))
