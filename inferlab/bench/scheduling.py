"""Scheduling and memory benchmarks: one engine, one policy changed at a time.

    inferlab bench batching   continuous vs static batching throughput (and the ideal ratio)
    inferlab bench kv         paged vs contiguous KV: peak waste, max concurrent requests
    inferlab bench prefix     prefix caching: TTFT on shared prompts, cost when nothing hits
    inferlab bench chunked    chunked prefill: p99 inter-token latency, throughput cost
    inferlab bench prefix-reuse  free-block order vs prefix hits under a tight KV budget
                              (deterministic, core only; in bench/reuse.py)

Every comparison runs the same requests (ignore_eos, greedy) on engines that differ only in
the option under test: same model, same max_num_seqs, same KV budget (num_blocks). Timed runs
are interleaved (A, B, A, B, ...) and the median of ``repeats`` is kept, so the slow drift of a
shared machine hits both sides alike. Results are ratios measured side by side.
"""
from __future__ import annotations

import statistics
import time

from ..core.shapes import cdiv
from .common import table
from .reuse import bench_reuse

PASS = lambda ok: "PASS" if ok else "MISS"


def _engine(model, **kw):
    import inferlab as il
    return il.Engine(model, **kw)


def _warm(model, out):
    """Load the model and JIT-compile kernels once, outside any timed region."""
    import inferlab as il
    t = time.perf_counter()
    eng = _engine(model, num_blocks=64)
    eng.generate([list(range(10, 60))] * 2, il.SamplingParams(max_tokens=4, ignore_eos=True),
                 use_tqdm=False)
    out(f"model={eng.model_name} backend={eng.runner.backend} (warm-up "
        f"{time.perf_counter() - t:.1f} s)")
    return eng


def _timed(model, kw, workload):
    """Fresh engine, play the workload, return (wall seconds, outputs, stats)."""
    from inferlab.sim.workloads import run_workload
    eng = _engine(model, **kw)
    t = time.perf_counter()
    outs = run_workload(eng, workload, progress=False)
    wall = time.perf_counter() - t
    return wall, outs, eng.stats()


# --- batching ------------------------------------------------------------------------------
def count_steps(workload, **engine_kw) -> int:
    """Engine steps a workload takes under a policy, from the scheduler alone (no model).

    With ignore_eos every output length is fixed, so the step count does not depend on the
    model: a fake sampler gives the very schedule the real engine runs. This prices the
    issue's full-size workloads even where running the real model on them is too slow."""
    from inferlab.core.config import EngineConfig
    from inferlab.core.kv_manager import ContiguousKVManager, PagedKVManager
    from inferlab.core.params import SamplingParams
    from inferlab.core.request import Request
    from inferlab.core.scheduler import Scheduler
    cfg = EngineConfig(**engine_kw)
    max_len = cfg.max_model_len or 2048
    if cfg.kv_layout == "paged":
        kv = PagedKVManager(cfg.num_blocks, cfg.block_size, cfg.enable_prefix_caching)
    else:
        kv = ContiguousKVManager(cfg.num_blocks, cfg.block_size, max_len, cfg.contiguous_reserve)
    s = Scheduler(cfg, kv, max_len)
    for r in workload:
        s.add(Request(r.request_id, list(r.prompt_token_ids),
                      SamplingParams(max_tokens=r.max_tokens, ignore_eos=True)))
    steps = 0
    while s.has_unfinished():
        out = s.schedule()
        if out.is_empty:
            raise RuntimeError("scheduler made no progress")
        s.update(out, {c.request_id: 7 for c in out.chunks if c.samples})
        steps += 1
    return steps


def bench_batching(model=None, repeats=3, num_requests=256, max_num_seqs=8,
                   outputs=((64, 128, 1.7), (128, 512, 2.0)), prompt_len=(32, 64), seed=0,
                   full_requests=256, out=print) -> dict:
    from inferlab.sim.workloads import CappedExponential, Uniform, synthetic
    warm = _warm(model, out)
    res = {}
    for mean, cap, target in outputs:
        wl = synthetic(num_requests, prompt_len=Uniform(*prompt_len),
                       output_len=CappedExponential(mean, cap), vocab_size=warm.vocab_size,
                       seed=seed)
        n_out = sum(r.max_tokens for r in wl)
        blocks = max_num_seqs * cdiv(prompt_len[1] + cap, 16)   # same KV budget, no preemption
        base = dict(max_num_seqs=max_num_seqs, num_blocks=blocks, block_size=16)
        walls = {"continuous": [], "static": []}
        steps = {}
        for _ in range(repeats):
            for pol in ("continuous", "static"):
                wall, outs, st = _timed(model, {**base, "scheduler": pol}, wl)
                assert sum(len(o.token_ids) for o in outs) == n_out
                walls[pol].append(wall)
                steps[pol] = st.num_steps
        for pol in walls:   # the engine's steps equal the scheduler-only count
            assert steps[pol] == count_steps(wl, scheduler=pol, **base), pol
        tput = {p: n_out / statistics.median(w) for p, w in walls.items()}
        ratio = tput["continuous"] / tput["static"]
        ideal = steps["static"] / steps["continuous"]
        if full_requests and full_requests != num_requests:
            big = synthetic(full_requests, prompt_len=Uniform(*prompt_len),
                            output_len=CappedExponential(mean, cap), vocab_size=warm.vocab_size,
                            seed=seed)
            fs = {p: count_steps(big, scheduler=p, **base) for p in walls}
            full_ideal = fs["static"] / fs["continuous"]
            out(f"full size ({full_requests} requests), scheduler only: static {fs['static']} "
                f"steps, continuous {fs['continuous']} steps, ideal ratio {full_ideal:.2f}x")
        else:
            full_ideal = ideal
        frac = ratio / ideal
        out(f"\nbatching: {num_requests} requests, prompts U{prompt_len}, outputs capped-exp "
            f"mean {mean} cap {cap} ({n_out} output tokens), max_num_seqs={max_num_seqs}, "
            f"num_blocks={blocks}, median of {repeats}")
        table(out, ["scheduler", "output tok/s", "wall s (median)", "engine steps"],
               [[p, f"{tput[p]:.1f}", f"{statistics.median(walls[p]):.1f}", steps[p]]
                for p in walls])
        out(f"continuous/static = {ratio:.2f}x (target >= {target}x: {PASS(ratio >= target)}); "
            f"ideal (steps) = {ideal:.2f}x; achieved {frac:.0%} of ideal "
            f"(target >= 80%: {PASS(frac >= 0.8)})")
        res[f"mean{mean}_cap{cap}"] = dict(tok_s=tput, walls=walls, steps=steps, ratio=ratio,
                                           ideal_ratio=ideal, fraction_of_ideal=frac,
                                           target=target, num_requests=num_requests,
                                           output_tokens=n_out, full_size_ideal_ratio=full_ideal)
    return res


# --- kv ------------------------------------------------------------------------------------
def bench_kv(model=None, repeats=1, num_requests=24, max_model_len=1024, num_blocks=256,
             max_num_seqs=64, prompt_len=(160, 400), output_len=(16, 64), seed=0,
             out=print) -> dict:
    """Same trace through paged (block 16) and contiguous (reserve max_model_len) KV, with the
    same KV memory (num_blocks x 16 token slots). Deterministic: no timing involved."""
    from inferlab.sim.workloads import Uniform, synthetic
    warm = _warm(model, out)
    wl = synthetic(num_requests, prompt_len=Uniform(*prompt_len),
                   output_len=Uniform(*output_len), vocab_size=warm.vocab_size, seed=seed)
    base = dict(max_num_seqs=max_num_seqs, num_blocks=num_blocks, block_size=16,
                max_model_len=max_model_len, enable_prefix_caching=False)
    rows, res = [], {}
    for layout in ("paged", "contiguous"):
        wall, outs, st = _timed(model, {**base, "kv_layout": layout}, wl)
        res[layout] = dict(peak_kv_waste=st.peak_kv_waste,
                           max_concurrent_requests=st.max_concurrent_requests,
                           peak_kv_blocks_used=st.peak_kv_blocks_used, num_steps=st.num_steps,
                           num_preemptions=st.num_preemptions,
                           tok_s=sum(len(o.token_ids) for o in outs) / wall)
        rows.append([layout, f"{st.peak_kv_waste:.1%}", st.max_concurrent_requests,
                     st.peak_kv_blocks_used, st.num_steps, st.num_preemptions,
                     f"{res[layout]['tok_s']:.1f}"])
    out(f"\nkv: {num_requests} requests, prompts U{prompt_len}, outputs U{output_len}, "
        f"KV memory {num_blocks} blocks x 16 = {num_blocks * 16} token slots, "
        f"max_model_len={max_model_len}, max_num_seqs={max_num_seqs}")
    table(out, ["layout", "peak KV waste", "max concurrent", "peak blocks", "steps",
                 "preemptions", "output tok/s"], rows)
    p, c = res["paged"], res["contiguous"]
    conc = p["max_concurrent_requests"] / max(1, c["max_concurrent_requests"])
    res["concurrency_ratio"] = conc
    out(f"paged peak waste {p['peak_kv_waste']:.1%} (target < 4%: "
        f"{PASS(p['peak_kv_waste'] < 0.04)}); contiguous {c['peak_kv_waste']:.1%} (target >= 60%: "
        f"{PASS(c['peak_kv_waste'] >= 0.6)}); max concurrent requests paged/contiguous = "
        f"{conc:.2f}x")
    return res


# --- prefix --------------------------------------------------------------------------------
def bench_prefix(model=None, repeats=3, prompt_tokens=1024, shared=0.9, num_followers=6,
                 miss_requests=32, miss_prompt=256, miss_output=32, max_num_seqs=8, seed=0,
                 out=print) -> dict:
    import numpy as np

    import inferlab as il

    from inferlab.sim.workloads import synthetic
    warm = _warm(model, out)
    rng = np.random.default_rng(seed)
    n_shared = int(round(shared * prompt_tokens))
    prefix = rng.integers(3, warm.vocab_size, n_shared).tolist()
    prompts = [prefix + rng.integers(3, warm.vocab_size, prompt_tokens - n_shared).tolist()
               for _ in range(num_followers + 1)]
    sp = il.SamplingParams(max_tokens=4, ignore_eos=True)
    blocks = max_num_seqs * cdiv(prompt_tokens + 16, 16)
    base = dict(max_num_seqs=max_num_seqs, num_blocks=blocks, block_size=16)

    # 1. TTFT, one request at a time after a first request that fills the cache.
    ttft = {True: [], False: []}
    cached = {}
    for _ in range(repeats):
        for on in (True, False):
            eng = _engine(model, **base, enable_prefix_caching=on)
            eng.generate([prompts[0]], sp, use_tqdm=False)
            for p in prompts[1:]:
                o = eng.generate([p], sp, use_tqdm=False)[0]
                ttft[on].append(o.metrics.ttft)
                cached[on] = o.metrics.num_cached_tokens
    med = {on: statistics.median(v) for on, v in ttft.items()}
    speedup = med[False] / med[True]
    out(f"\nprefix: TTFT of {prompt_tokens}-token prompts sharing {shared:.0%} of their tokens "
        f"({n_shared}), one at a time after a first one; median of {len(ttft[True])} requests")
    table(out, ["prefix caching", "TTFT median ms", "cached tokens / request"],
           [["on", f"{med[True] * 1e3:.1f}", cached[True]],
            ["off", f"{med[False] * 1e3:.1f}", cached[False]]])
    out(f"TTFT off/on = {speedup:.2f}x (target >= 3x: {PASS(speedup >= 3)})")

    # 2. Throughput when nothing hits: random prompts, caching on vs off.
    wl = synthetic(miss_requests, prompt_len=miss_prompt, output_len=miss_output,
                   vocab_size=warm.vocab_size, seed=seed + 1)
    blocks2 = max_num_seqs * cdiv(miss_prompt + miss_output, 16)
    base2 = dict(max_num_seqs=max_num_seqs, num_blocks=blocks2, block_size=16)
    walls = {True: [], False: []}
    hits = {}
    for _ in range(repeats):
        for on in (True, False):
            wall, outs, st = _timed(model, {**base2, "enable_prefix_caching": on}, wl)
            walls[on].append(wall)
            hits[on] = st.prefix_cache_hits
    n_tok = miss_requests * (miss_prompt + miss_output)
    tput = {on: n_tok / statistics.median(w) for on, w in walls.items()}
    cost = 1 - tput[True] / tput[False]
    out(f"\nprefix, nothing hits: {miss_requests} random prompts x {miss_prompt} tokens, "
        f"{miss_output} out, max_num_seqs={max_num_seqs}, median of {repeats}")
    table(out, ["prefix caching", "total tok/s", "hit tokens"],
           [["on", f"{tput[True]:.1f}", hits[True]], ["off", f"{tput[False]:.1f}", hits[False]]])
    out(f"throughput cost of caching = {cost:+.1%} (target < 3%: {PASS(cost < 0.03)})")
    return dict(ttft_ms={("on" if k else "off"): v * 1e3 for k, v in med.items()},
                ttft_speedup=speedup, cached_tokens=cached[True],
                miss_tok_s={("on" if k else "off"): v for k, v in tput.items()},
                miss_cost=cost)


# --- chunked -------------------------------------------------------------------------------
def _chunked_run(model, kw, decoders, longs, every, sp_dec, sp_long):
    """Decoders start together; a long prompt joins each time decoder 0 has made ``every``
    more tokens (so both configs get the same mix). Returns (wall, outputs)."""
    eng = _engine(model, **kw)
    ids = [eng.add_request(p, sp_dec) for p in decoders]
    pending = list(longs)
    done = {}
    t = time.perf_counter()
    while eng.has_unfinished_requests() or pending:
        n0 = 0
        for o in eng.step():
            if o.finished:
                done[o.request_id] = o
            if o.request_id == ids[0]:
                n0 = len(o.token_ids)
        if pending and ((n0 and n0 % every == 0) or not eng.has_unfinished_requests()):
            ids.append(eng.add_request(pending.pop(0), sp_long))
    return time.perf_counter() - t, [done[i] for i in ids]


def bench_chunked(model=None, repeats=3, num_decoders=8, decode_tokens=160, num_long=4,
                  long_prompt=1000, budget=256, seed=0, out=print) -> dict:
    import numpy as np

    import inferlab as il

    from inferlab.observe.metrics import summarize
    warm = _warm(model, out)
    rng = np.random.default_rng(seed)
    decoders = [rng.integers(3, warm.vocab_size, 32).tolist() for _ in range(num_decoders)]
    longs = [rng.integers(3, warm.vocab_size, long_prompt).tolist() for _ in range(num_long)]
    sp_dec = il.SamplingParams(max_tokens=decode_tokens, ignore_eos=True)
    sp_long = il.SamplingParams(max_tokens=8, ignore_eos=True)
    every = decode_tokens // (num_long + 1)
    n = num_decoders + num_long
    blocks = n * cdiv(long_prompt + decode_tokens, 16)
    base = dict(max_num_seqs=n, num_blocks=blocks, block_size=16, max_model_len=2048,
                max_num_batched_tokens=budget, enable_prefix_caching=False)
    walls = {True: [], False: []}
    p99 = {True: [], False: []}
    steps = {}
    for _ in range(repeats):
        for on in (True, False):
            kw = {**base, "enable_chunked_prefill": on,   # off: the budget holds a whole prompt
                  "max_num_batched_tokens": budget if on else max(budget, base["max_model_len"])}
            wall, outs = _chunked_run(model, kw, decoders, longs, every, sp_dec, sp_long)
            walls[on].append(wall)
            p99[on].append(summarize(outs).itl.p99)
    n_tok = num_decoders * (32 + decode_tokens) + num_long * (long_prompt + 8)
    tput = {on: n_tok / statistics.median(w) for on, w in walls.items()}
    itl = {on: statistics.median(v) for on, v in p99.items()}
    gain = itl[False] / itl[True]
    loss = 1 - tput[True] / tput[False]
    out(f"\nchunked: {num_decoders} requests decoding {decode_tokens} tokens; {num_long} prompts "
        f"of {long_prompt} tokens join, one every {every} decode steps; token budget {budget} "
        f"(chunking off: whole prompt in one step); median of {repeats}")
    table(out, ["chunked prefill", "ITL p99 ms", "total tok/s", "wall s"],
           [[("on" if on else "off"), f"{itl[on] * 1e3:.1f}", f"{tput[on]:.1f}",
             f"{statistics.median(walls[on]):.2f}"] for on in (True, False)])
    out(f"p99 ITL off/on = {gain:.2f}x (target >= 2x: {PASS(gain >= 2)}); throughput loss "
        f"{loss:+.1%} (target <= 10%: {PASS(loss <= 0.10)})")
    return dict(itl_p99_ms={("on" if k else "off"): v * 1e3 for k, v in itl.items()},
                tok_s={("on" if k else "off"): v for k, v in tput.items()},
                itl_gain=gain, throughput_loss=loss)


BENCHES = {"batching": bench_batching, "kv": bench_kv, "prefix": bench_prefix,
           "chunked": bench_chunked, "prefix-reuse": bench_reuse}


def run(what: str, repeats: int = 3, model=None, num_requests: int | None = None,
        out=print) -> dict:
    """Entry point of ``inferlab bench batching|kv|prefix|chunked|prefix-reuse``; returns
    the results."""
    if what not in BENCHES:
        raise ValueError(f"unknown benchmark {what!r}; choose one of {sorted(BENCHES)}")
    kw = {"num_requests": num_requests} if num_requests and what in ("batching", "kv") else {}
    t = time.perf_counter()
    res = BENCHES[what](model=model, repeats=repeats, out=out, **kw)
    out(f"({what}: {time.perf_counter() - t:.0f} s)")
    return res
