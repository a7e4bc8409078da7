"""Chapter 15, second part: a long context is not many long contexts.

A model that accepts a very long context still keeps every token of every live request in
its KV cache. The budget that holds one user's long document holds only a few such users at
once; the others wait, and each step decodes fewer requests. Measured with the engine's real
allocator (block counts, the same every run) on SmolLM2; the steps are priced on the
simulated H100 clock for a throughput that does not depend on this machine's load (a
projection). Bytes per token: read from the engine's KV tensors (SmolLM2, fp32), and from
published shapes for larger models (a projection).
"""
from __future__ import annotations

import numpy as np

from ..verdicts import COUNTS, Verdict, clock_note, direction, x
from ...model.resources import KV_MEMORY_CAP
from . import _kit

GPU_BYTES = 80e9           # one 80 GB GPU
GPU_UTILIZATION = 0.9      # vLLM's default gpu_memory_utilization
BIG_SHAPES = ("llama-3.2-1b", "llama-3-8b", "qwen2-7b", "llama-3-70b")
BIG_CONTEXTS = (8192, 131072)


def _ids(n: int, seed: int) -> list[int]:
    return np.random.default_rng(100 + seed).integers(3, 49152, size=n).tolist()


def run_budget(context: int, requests: int, decode: int, budget_blocks: int,
               block_size: int = 16) -> dict:
    """``requests`` prompts of ``context`` tokens each, all waiting at once, ``decode`` tokens
    each, in a KV cache of ``budget_blocks`` blocks: the real scheduler and allocator, real
    SmolLM2 forwards, steps priced on the simulated H100."""
    import inferlab as il
    eng = _kit.engine(None, enable_prefix_caching=False, num_blocks=budget_blocks,
                      block_size=block_size, max_num_seqs=requests,
                      max_model_len=max(context + decode, 64), **_kit.SIM)
    running, decoding = [], []

    def seen(rec):
        running.append(rec.num_running)
        if rec.num_decode_tokens:
            decoding.append(rec.num_decode_tokens)
    unsubscribe = eng.subscribe(seen)
    t0 = eng.now
    outs = eng.generate([_ids(context, i) for i in range(requests)],
                        il.SamplingParams(max_tokens=decode, ignore_eos=True), use_tqdm=False)
    unsubscribe()
    st = eng.stats()
    r = eng.runner
    per_token = (r.k_cache.nbytes + r.v_cache.nbytes) / (budget_blocks * block_size)
    elapsed = eng.now - t0
    made = sum(len(o.token_ids) for o in outs)
    return {"context": context, "requests": requests, "decode": decode,
            "budget_blocks": budget_blocks, "budget_tokens": budget_blocks * block_size,
            "max_running": st.max_concurrent_requests, "steps": st.num_steps,
            "preemptions": st.num_preemptions, "finished": len(outs),
            "mean_decode_batch": float(np.mean(decoding)) if decoding else 0.0,
            "sim_seconds": elapsed, "sim_tok_s": made / elapsed if elapsed else 0.0,
            "kv_bytes_per_token": per_token, "kv_budget_bytes": r.k_cache.nbytes + r.v_cache.nbytes,
            "model": eng.model_name,
            "model_context": getattr(eng.loaded.config, "max_position_embeddings", 0)}


def blocks_for(context: int, decode: int, block_size: int = 16) -> int:
    return -(-(context + decode) // block_size)


def measure_capacity(long_context: int, short_context: int, requests: int, decode: int,
                     fits: int | None) -> dict:
    """The same budget (room for ``fits`` long requests; ``None``: room for all of them, the
    effect removed) with long and with short contexts."""
    need = blocks_for(long_context, decode)
    budget = need * (requests if fits is None else fits)
    out = {"long": run_budget(long_context, requests, decode, budget),
           "short": run_budget(short_context, requests, decode, budget),
           "fits": fits, "projection": kv_projection()}
    lo = out["long"]       # the same arithmetic at sizes the lab did not choose
    out["default_budget"] = {"bytes": KV_MEMORY_CAP, "context": lo["model_context"],
                             "fit": int(KV_MEMORY_CAP // (lo["model_context"]
                                                          * lo["kv_bytes_per_token"]))}
    return out


def kv_projection(dtype_bytes: int = 2) -> list[dict]:
    """Bytes per token (bf16) of larger published shapes and how many contexts of each
    length fit on one 80 GB GPU beside the weights (90% of it usable)."""
    from inferlab.core.shapes import kv_bytes_per_token, model_shape, weight_bytes
    rows = []
    for name in BIG_SHAPES:
        s = model_shape(name)
        per = kv_bytes_per_token(s, dtype_bytes)
        free = GPU_BYTES * GPU_UTILIZATION - weight_bytes(s, dtype_bytes)
        rows.append({"model": name, "kv_bytes_per_token": per,
                     "weights_gb": weight_bytes(s, dtype_bytes) / 1e9,
                     "kv_room_gb": max(free, 0) / 1e9,
                     "fit": {n: int(max(free, 0) // (per * n)) for n in BIG_CONTEXTS}})
    return rows


def capacity_lines(c: dict) -> list[str]:
    lo, sh = c["long"], c["short"]
    lines = [f"KV budget {lo['budget_tokens']:,} token slots ({lo['kv_budget_bytes'] / 2**20:.0f} "
             f"MiB at {lo['kv_bytes_per_token']:,.0f} bytes per token, {lo['model']} fp32, read "
             "from the engine's KV tensors):"]
    for r in (sh, lo):
        lines.append(f"  {r['requests']} requests of {r['context']:,} tokens: {r['max_running']} "
                     f"at once, {r['steps']} steps, {r['mean_decode_batch']:.1f} decoded per "
                     f"decode step, {r['preemptions']} preemptions; {r['sim_tok_s']:,.0f} "
                     "generated tok/s on the simulated H100 (projection)")
    for p in c["projection"]:
        lines.append(f"  projection, {p['model']} (bf16): {p['kv_bytes_per_token'] / 1024:.0f} "
                     f"KiB per token; beside {p['weights_gb']:.0f} GB of weights on an 80 GB GPU: "
                     + ", ".join(f"{n:,}-token contexts: {k}" for n, k in p["fit"].items()))
    return lines


def default_budget_text(c: dict) -> str:
    """How many contexts of the model's own length the engine's default KV budget holds."""
    b = c["default_budget"]
    return (f"at {c['long']['model']}'s own {b['context']:,}-token context window, the engine's "
            f"default KV budget ({b['bytes'] / 2**20:.0f} MiB) holds {b['fit']} such context"
            f"{'s' if b['fit'] != 1 else ''}")


def judge_long_context(d: dict) -> Verdict:
    """Counts: how many of the long requests the budget ran at once, against how many
    asked; the short ones in the same budget show the budget is not the limit for them. The
    budget is the lab's (room for ``fits`` long requests): an illustration of the
    allocator's arithmetic; the same arithmetic at the engine's default budget and the
    model's own context length is in the reason."""
    c = d["capacity"]
    lo, sh = c["long"], c["short"]
    v = direction(lo["requests"] / lo["max_running"], clear=2)
    p8 = next(p for p in c["projection"] if p["model"] == "llama-3-8b")
    big = max(BIG_CONTEXTS)
    return Verdict(v, f"a KV budget of {lo['budget_tokens']:,} token slots "
                   f"({lo['kv_budget_bytes'] / 2**20:.0f} MiB, {lo['kv_bytes_per_token']:,.0f} "
                   f"bytes per token measured from the engine's KV tensors, {lo['model']} fp32) "
                   f"ran {lo['max_running']} of {lo['requests']} requests of "
                   f"{lo['context']:,} tokens at once ({lo['mean_decode_batch']:.1f} decoded per "
                   f"step, {lo['steps']} steps) but all {sh['max_running']} of {sh['requests']} of "
                   f"{sh['context']} tokens ({sh['mean_decode_batch']:.1f} per step, "
                   f"{sh['steps']} steps) (block counts, the real allocator); projection "
                   f"{clock_note(d['clock_sim'])}: {lo['sim_tok_s']:,.0f} vs "
                   f"{sh['sim_tok_s']:,.0f} generated tok/s; llama-3-8b in bf16 keeps "
                   f"{p8['kv_bytes_per_token'] / 1024:.0f} KiB per token, so an 80 GB GPU holds "
                   f"{p8['fit'][big]} contexts of {big:,} tokens beside its weights; "
                   f"{default_budget_text(c)}",
                   measured=f"{lo['max_running']} of {lo['requests']} long requests at once",
                   points=((f"{sh['context']}-token requests at once", sh["max_running"]),
                           (f"{lo['context']}-token requests at once", lo["max_running"]),
                           ("requests waiting to run", lo["requests"], "reference")),
                   unit="requests running at once", clock=COUNTS)


def ratio_text(c: dict) -> str:
    lo = c["long"]
    return x(lo["requests"] / lo["max_running"])
