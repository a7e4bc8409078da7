"""Benchmarks that compare side by side in one run (ratios, never absolute timed tests).

    inferlab bench engine     our engine vs transformers generate (padded batch, batch 1)
                              vs transformers generate_batch (its continuous batching)
    inferlab bench engine --alone
                              our engine vs transformers' padded batch, each in its own process
"""
from __future__ import annotations

import copy
import os
import statistics
import time

from .common import Worker, hf_greedy_config, median_time, tok_s


def bench_engine(num_requests=32, prompt_len=64, new_tokens=64, repeats=3, model=None,
                 batch1_requests=4, device=None, other_linear="torch", out=print) -> dict:
    """tokens/s of the same requests through five paths; returns {name: tok/s} and ratios.
    ``other_linear``: the linear backend of the second inferlab engine (the reference GEMMs,
    ``F.linear``, unless told otherwise), to show what the default's GEMMs buy."""
    import numpy as np
    import torch

    import inferlab as il
    kw = {"device": device} if device else {}
    # prefix caching off: each repeat sends the same prompts, which would hit the cache from
    # the second run on and flatter the engine against paths that cannot reuse anything
    eng = il.Engine(model, max_num_seqs=num_requests, enable_prefix_caching=False, **kw)
    # the same engine with other GEMMs (F.linear by default), to show what the fast path buys
    ref = il.Engine(model, max_num_seqs=num_requests, num_blocks=eng.num_blocks,
                    enable_prefix_caching=False, linear_backend=other_linear, **kw)
    hf = eng.loaded.hf_model
    dev = next(hf.parameters()).device
    rng = np.random.default_rng(0)
    prompts = [rng.integers(3, eng.vocab_size, prompt_len).tolist() for _ in range(num_requests)]
    sp = il.SamplingParams(max_tokens=new_tokens, ignore_eos=True)
    total = num_requests * new_tokens
    out(f"model={eng.model_name} threads={torch.get_num_threads()} requests={num_requests} "
        f"prompt={prompt_len} new={new_tokens} median of {repeats}; linear backend "
        f"{eng.runner.linear_backend}")

    def through(engine):
        def run():
            outs = engine.generate(prompts, sp, use_tqdm=False)
            assert all(len(o.token_ids) == new_tokens for o in outs)
        return run

    gc = hf_greedy_config(new_tokens)

    def hf_padded(batch):
        def run():
            with torch.inference_mode():
                for i in range(0, len(batch), len(batch)):
                    ids = torch.tensor(batch, device=dev)
                    hf.generate(ids, attention_mask=torch.ones_like(ids), generation_config=gc)
        return run

    def hf_batch1():
        with torch.inference_mode():
            for p in prompts[:batch1_requests]:
                ids = torch.tensor([p], device=dev)
                hf.generate(ids, attention_mask=torch.ones_like(ids), generation_config=gc)

    def hf_cb():
        cb_model = hf_cb.model
        # no_grad, not inference_mode: generate_batch updates its tensors from a worker
        # thread, where inference tensors made on this thread may not be changed in place
        with torch.no_grad():
            res = cb_model.generate_batch(prompts, generation_config=gc, progress_bar=False)
        assert len(res) == num_requests

    paths = {"inferlab engine": through(eng),
             f"inferlab, linear_backend={other_linear}": through(ref),
             f"transformers padded x{num_requests}": hf_padded(prompts)}
    try:
        from transformers import AutoModelForCausalLM
        # a copy of the config: newer transformers set the attention implementation on the
        # config object given, which would turn the padded model's plain forward paged too
        hf_cb.model = AutoModelForCausalLM.from_config(copy.deepcopy(hf.config),
                                                       attn_implementation="paged|sdpa")
        hf_cb.model.load_state_dict(hf.state_dict())
        hf_cb.model.to(dev).eval()
        paths["transformers generate_batch"] = hf_cb
    except Exception as e:  # noqa: BLE001 - report, do not hide
        out(f"  transformers generate_batch unavailable: {type(e).__name__}: {e}")
    for fn in paths.values():        # warm-up (numba JIT, allocator, thread pools)
        fn()
    # Interleave the repeats so that machine noise hits every path alike.
    times = {k: [] for k in paths}
    for _ in range(repeats):
        for name, fn in paths.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    results = {k: total / statistics.median(v) for k, v in times.items()}
    results["transformers batch 1"] = batch1_requests * new_tokens / median_time(hf_batch1, 1)
    width = max(map(len, results))
    for k, v in results.items():
        out(f"  {k:{width}s} {v:8.1f} tok/s")
    base = results["inferlab engine"]
    for k, v in results.items():
        if k != "inferlab engine":
            out(f"  inferlab / {k:{width}s} = {base / v:5.2f}x")
    return results


def bench_engine_alone(num_requests=32, prompt_len=64, new_tokens=64, repeats=3, model=None,
                       out=print) -> dict:
    """inferlab vs transformers' padded batch, each in a process of its own (bench/worker.py,
    as in ``inferlab bench vllm``), A B A B, the idle one frozen: neither's memory, threads or
    leftovers touch the other's runs (in one process they do: BENCHMARKS.md, "Speed, round 2")."""
    import sys

    import numpy as np
    model_args = ["--model", model] if model else []
    with Worker("inferlab", sys.executable, ["--max-num-seqs", str(num_requests), *model_args]) \
            as ours, Worker("transformers", sys.executable, model_args) as theirs:
        workers = {"inferlab engine": ours, "transformers padded": theirs}
        rng = np.random.default_rng(0)                 # the prompts of bench_engine
        prompts = [rng.integers(3, ours.hello["vocab_size"], prompt_len).tolist()
                   for _ in range(num_requests)]
        cmd = dict(cmd="generate", prompts=prompts, max_tokens=new_tokens, ignore_eos=True)
        out(f"requests={num_requests} prompt={prompt_len} new={new_tokens} greedy fp32, each "
            f"in its own process ({ours.hello['version']}, {theirs.hello['version']}, "
            f"{ours.hello['threads']} threads), median of {repeats} after a warm-up, A B A B, "
            f"the idle one frozen; load {os.getloadavg()[0]:.2f}")
        for w in workers.values():
            w.request(**cmd)                           # warm-up, untimed
        runs = {k: [] for k in workers}
        for _ in range(repeats):
            for name, w in workers.items():
                idle = theirs if w is ours else ours
                with idle.frozen():
                    runs[name].append(w.request(**cmd))
    speed = {k: statistics.median(tok_s(r) for r in v) for k, v in runs.items()}
    same = sum(a == b for a, b in zip(*(v[0]["token_ids"] for v in runs.values())))
    for k, v in runs.items():
        out(f"  {k:22s} {speed[k]:8.1f} tok/s   (runs: "
            + ", ".join(f"{tok_s(r):.1f}" for r in v) + ")")
    ratio = speed["inferlab engine"] / speed["transformers padded"]
    out(f"  inferlab / transformers padded = {ratio:.2f}x   same greedy tokens on {same} of "
        f"{num_requests}; load after {os.getloadavg()[0]:.2f}")
    return {"tok_s": speed, "ratio": ratio, "same_tokens": same}


def _rss_bytes() -> int:
    import os
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def bench_soak(num_requests=2000, model="tiny", seed=0, out=print) -> dict:
    """Many random requests through one engine: all finish, no block leaks, flat memory."""
    import gc

    import numpy as np

    import inferlab as il
    eng = il.Engine(model, num_blocks=96, block_size=8, max_num_seqs=16,
                    max_num_batched_tokens=256, max_model_len=256, seed=seed)
    rng = np.random.default_rng(seed)
    quarter = num_requests // 4
    rss, done, aborted = [], 0, 0
    ids = []
    for i in range(num_requests):
        n = int(rng.integers(1, 120))
        prompt = rng.integers(3, eng.vocab_size, n).tolist()
        if rng.random() < 0.3 and ids:       # some share a prefix with an earlier prompt
            prompt = prompt[: n // 2] + prompt
        params = il.SamplingParams(max_tokens=int(rng.integers(1, 40)),
                                   temperature=float(rng.choice([0.0, 0.8])),
                                   seed=int(rng.integers(0, 1 << 30)))
        ids.append(eng.add_request(prompt[:200], params))
        if rng.random() < 0.05:
            aborted += eng.abort(ids[-1])
        for o in eng.step():
            done += o.finished
        if (i + 1) % quarter == 0:
            gc.collect()
            rss.append(_rss_bytes())
    while eng.has_unfinished_requests():
        for o in eng.step():
            done += o.finished
    st = eng.stats()
    growth = (rss[-1] - rss[0]) / rss[0]
    res = dict(requests=num_requests, finished=done, aborted=aborted,
               blocks_leaked=st.kv_blocks_used,
               nonzero_refcounts=sum(1 for r in eng.kv.block_ref_counts() if r),
               preemptions=st.num_preemptions, rss_first_quarter_mb=rss[0] / 2**20,
               rss_last_quarter_mb=rss[-1] / 2**20, rss_growth=growth, steps=st.num_steps)
    for k, v in res.items():
        out(f"  {k:24s} {v:.3f}" if isinstance(v, float) else f"  {k:24s} {v}")
    ok = done + aborted == num_requests and st.kv_blocks_used == 0 and growth < 0.05
    out("  PASS" if ok else "  FAIL")
    return res


def bench_trace(model: str | None = "tiny", num_requests: int = 16, max_tokens: int = 32,
              repeats: int = 5, **engine_kwargs) -> dict:
    """Step time with no hook vs with a Trace subscribed, same workload, runs interleaved.

    End-to-end step times on a shared CPU are noisy (the model's matmuls vary by tens of
    percent run to run), so the publish path -- building the StepRecord and calling the
    hooks, the only code a subscriber adds -- is also timed on its own."""
    from inferlab.engine import Engine
    from inferlab.core.params import SamplingParams
    from inferlab.observe.trace import Trace
    eng = Engine(model, **engine_kwargs)
    prompts = [[3 + (i * 7 + j) % 500 for j in range(24 + i % 9)] for i in range(num_requests)]
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)

    def run(traced: bool) -> tuple[float, float, int]:
        trace = Trace.record(eng) if traced else None
        for p in prompts:
            eng.add_request(p, params)
        n, spent0, t = 0, eng.publish_seconds, time.perf_counter()
        while eng.has_unfinished_requests():
            eng.step()
            n += 1
        dt = time.perf_counter() - t
        if trace is not None:
            trace.stop()
        return dt / n, (eng.publish_seconds - spent0) / n, n

    run(False)                                   # warm-up
    plain, traced = [], []
    for _ in range(repeats):
        plain.append(run(False))
        traced.append(run(True))
    med = lambda xs, i: sorted(x[i] for x in xs)[len(xs) // 2]
    a, b = med(plain, 0), med(traced, 0)
    hook = med(traced, 1) - med(plain, 1)
    return {"model": eng.model_name, "steps_per_run": plain[0][2], "repeats": repeats,
            "step_ms_plain": a * 1e3, "step_ms_traced": b * 1e3, "ratio": b / a,
            "publish_ms_plain": med(plain, 1) * 1e3, "publish_ms_traced": med(traced, 1) * 1e3,
            "recording_ms_per_step": hook * 1e3, "recording_pct_of_step": hook / a * 100}


def print_trace_bench(r: dict, out=print) -> None:
    out(f"model {r['model']}: {r['steps_per_run']} steps/run, median of {r['repeats']}\n"
        f"  step time   no hook {r['step_ms_plain']:8.3f} ms | with Trace "
        f"{r['step_ms_traced']:8.3f} ms | ratio {r['ratio']:.3f}\n"
        f"  publish     no hook {r['publish_ms_plain']:8.3f} ms | with Trace "
        f"{r['publish_ms_traced']:8.3f} ms\n"
        f"  recording cost {r['recording_ms_per_step']:.3f} ms/step = "
        f"{r['recording_pct_of_step']:.2f}% of a step")

