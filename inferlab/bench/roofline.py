"""Where a step's time goes on this CPU, next to what the roofline says about each part.

The cost model prices a step as ``max(FLOPs / peak, bytes / bandwidth) + overhead``. When
its prediction misses the engine's measured step, this module says which term is wrong by
timing the parts of the same step on the real weights, outside the engine:

* ``linear``: every layer's four projections (qkv, o, gate_up, down) and the LM head,
  through the engine's own linear backend on the step's token count: the GEMMs (or GEMVs)
  the roofline's compute or memory term stands for;
* ``attention``: the attention the engine's forward runs for that step (the numba kernels;
  the fused forward sends prompt chunks of >= 256 tokens through torch's SDPA), once per
  layer on the step's query and context lengths: priced by the roofline as FLOPs at sgemm
  speed;
* ``rest`` = the measured step minus both: norms, rotary, residual adds, the KV write,
  input preparation and sampling, which the model covers only with its per-op overhead.

Model side: ``linear`` = max(linear FLOPs / peak, weight bytes / bandwidth), ``attention`` =
attention FLOPs / peak (or its KV bytes / bandwidth, whichever is larger), ``rest`` = the
profile's overhead term.
"""
from __future__ import annotations

import statistics
import time

from inferlab.core.shapes import cdiv, kv_bytes_per_token
from inferlab.sim.costmodel import step_flops
from inferlab.lab.chapters._kernel_timing import median_time


def measure_parts(eng, chunks, repeats: int = 3) -> dict[str, float]:
    """Seconds for the linear layers and the attention kernels of one step of ``chunks``
    [(new_tokens, context_after)] on ``eng``'s model and KV cache (its contents do not
    matter for timing; the blocks used are scratch)."""
    import torch

    from inferlab.model.llama import AttentionMetadata
    runner = eng.runner
    m = eng.model
    H, KVH, D = m.num_heads, m.num_kv_heads, m.head_dim
    T = sum(n for n, _ in chunks)
    R = sum(1 for n, _ in chunks if n)
    hidden = m.embed.shape[1]
    inter = m.layers[0].w_down.shape[1]
    x = torch.randn(T, hidden, dtype=m.dtype)                    # [T, hidden]
    o = torch.randn(T, H * D, dtype=m.dtype)                     # [T, H*D]
    act = torch.randn(T, inter, dtype=m.dtype)                   # [T, intermediate]
    last = torch.randn(R, hidden, dtype=m.dtype)                 # [R, hidden]

    @torch.inference_mode()
    def linears():
        lin = m.linear                      # the engine's own GEMM path (model/linear.py)
        for w in m.layers:
            lin(x, w.wqkv, w.bqkv)
            lin(o, w.wo)
            lin(x, w.w_gate_up)
            lin(act, w.w_down)
        lin(last, m.lm_head)

    bs = runner.block_size
    tables, seq_lens, qsl, nxt = [], [], [0], 0
    for n, ctx in chunks:
        nb = cdiv(ctx, bs)
        tables.append(list(range(nxt, nxt + nb)))
        nxt += nb
        seq_lens.append(ctx)
        qsl.append(qsl[-1] + n)
    if nxt > runner.num_blocks:
        raise ValueError(f"{nxt} scratch blocks needed, the engine has {runner.num_blocks}")
    width = max(len(t) for t in tables)
    bt = torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int32)
    sl = torch.tensor(seq_lens, dtype=torch.int32)
    qs = torch.tensor(qsl, dtype=torch.int32)
    q = torch.randn(T, H, D, dtype=m.dtype)                      # [T, H, D]
    meta = AttentionMetadata(slot_mapping=torch.zeros(T, dtype=torch.int64), block_tables=bt,
                             seq_lens=sl, query_start_loc=qs,
                             decode_only=all(n == 1 for n, _ in chunks), backend=runner.backend)
    attend = runner.attention_for(meta)              # what the engine's forward would run

    @torch.inference_mode()
    def attention_layers():
        for li in range(m.num_layers):
            attend(q, runner.k_cache[li], runner.v_cache[li], meta, m.scale)
    return {"linear": median_time(linears, repeats),
            "attention": median_time(attention_layers, repeats)}


def model_parts(gpu, shape, chunks, dtype_bytes: int) -> dict[str, float]:
    """The roofline's price of the same parts (seconds), with ``gpu``'s efficiencies."""
    flops_rate = gpu.peak_flops(dtype_bytes) * gpu.flops_efficiency
    bw = gpu.hbm_bandwidth * gpu.bandwidth_efficiency
    total = step_flops(shape, chunks)
    seqs = sum(1 for n, _ in chunks if n)
    tokens = sum(n for n, _ in chunks)
    lin_flops = (2.0 * shape.num_layers * shape.layer_params * tokens
                 + 2.0 * shape.vocab_size * shape.hidden_size * seqs)
    weights = (shape.num_layers * shape.layer_params + shape.vocab_size * shape.hidden_size)
    kv = kv_bytes_per_token(shape, dtype_bytes) * sum(ctx for n, ctx in chunks if n)
    return {"linear": max(lin_flops / flops_rate, weights * dtype_bytes / bw),
            "attention": max((total - lin_flops) / flops_rate, kv / bw),
            "rest": gpu.step_overhead_s + gpu.layer_overhead_s * shape.num_layers}


# ---- `inferlab bench roofline`: this machine's roofline and the engine's share of it -------

def machine() -> dict:
    """This CPU's sgemm FLOP/s and memory bandwidth, measured by the this-cpu clock's profile
    (sim/this_cpu.py: medians of repeats; the faster of torch's and oneDNN's GEMM; the
    engine's numba GEMM can beat both at 8-64 rows)."""
    import torch

    from inferlab.sim.this_cpu import measure_bandwidth, measure_sgemm_flops
    return {"sgemm_flops": measure_sgemm_flops(),
            "read_bandwidth": measure_bandwidth()["bandwidth"],
            "threads": torch.get_num_threads()}


def ideal_step_s(shape, chunks, mach: dict, dtype_bytes: int = 4) -> float:
    """The roofline's time for one step: FLOPs at sgemm speed or bytes at memory bandwidth,
    whichever is longer (no overhead term: the bound the engine is measured against)."""
    from inferlab.sim.costmodel import step_bytes
    return max(step_flops(shape, chunks) / mach["sgemm_flops"],
               step_bytes(shape, chunks, dtype_bytes) / mach["read_bandwidth"])


def decode_steps(eng, batch: int, prompt_len: int = 64, steps: int = 12) -> tuple[float, float, int]:
    """(median wall seconds of a whole ``eng.step()``, median seconds inside its forward
    pass + sampling (the StepRecord's wall_duration), context length) over decode-only steps
    with ``batch`` running sequences."""
    import numpy as np

    import inferlab as il
    from inferlab.observe.trace import Trace
    rng = np.random.default_rng(batch)
    sp = il.SamplingParams(max_tokens=steps + 3, ignore_eos=True)
    for _ in range(batch):
        eng.add_request(rng.integers(3, eng.vocab_size, prompt_len).tolist(), sp)
    trace = Trace.record(eng)
    totals = []
    while eng.has_unfinished_requests():
        t = time.perf_counter()
        eng.step()
        totals.append(time.perf_counter() - t)
    trace.stop()
    pairs = [(tot, rec.wall_duration) for tot, rec in zip(totals, trace.records)
             if len(rec.batch) == batch and all(c.num_tokens == 1 for c in rec.batch)]
    return (statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs),
            prompt_len + steps // 2)


def split(eng, batch: int, repeats: int = 5) -> dict:
    """Where a decode step at ``batch`` goes (ms): the linear layers and attention timed on
    their own (measure_parts), greedy sampling over [batch, vocab] logits, the rest of the
    forward (embedding, norms, rotary, SiLU, KV write, input tensors), and the host side of
    the step (scheduling, detokenizing, outputs)."""
    import torch

    from inferlab.model.sampler import sample
    from inferlab.core.params import SamplingParams
    step, execute, ctx = decode_steps(eng, batch)
    parts = measure_parts(eng, [(1, ctx)] * batch, repeats)
    logits = torch.randn(batch, eng.vocab_size)
    params = [SamplingParams(max_tokens=1)] * batch
    sampling = median_time(lambda: sample(logits, params, [None] * batch), repeats)
    return {"step": step * 1e3, "linear": parts["linear"] * 1e3,
            "attention": parts["attention"] * 1e3, "sampling": sampling * 1e3,
            "other forward": max(execute - parts["linear"] - parts["attention"] - sampling, 0) * 1e3,
            "host": (step - execute) * 1e3, "context": ctx}


def main(batches=(1, 8, 32), model=None, repeats: int = 5, linear_backend: str = "auto",
         out=print, dtype: str = "float32") -> dict:
    import os

    import inferlab as il
    from inferlab.core.shapes import ModelShape
    eng = il.Engine(model, max_num_seqs=max(batches), enable_prefix_caching=False,
                    linear_backend=linear_backend, dtype=dtype)
    shape = ModelShape.from_hf_config(eng.loaded.hf_model.config)
    mach = machine()
    elem = eng.runner.k_cache.element_size()          # the roofline's bytes per element
    out(f"{eng.model_name} {eng.runner.plan.precision}, linear backend {eng.runner.linear_backend}, attention "
        f"{eng.runner.backend}, {mach['threads']} threads, load {os.getloadavg()[0]:.2f}")
    out(f"this machine: sgemm {mach['sgemm_flops'] / 1e9:.0f} GFLOP/s, memory bandwidth "
        f"{mach['read_bandwidth'] / 1e9:.1f} GB/s")
    out(f"{'batch':>5} {'ideal ms':>9} {'step ms':>8} {'share':>6} {'tok/s':>7} {'forward':>8}   "
        "split of the step (ms): linear | attention | sampling | other forward | host")
    fused = eng.runner.plan.fused
    rows = {}
    for b in batches:
        s = split(eng, b, repeats)
        ideal = ideal_step_s(shape, [(1, s["context"])] * b, mach, elem) * 1e3
        path = ("1 call" if b == 1 else "fused") if fused else "per-op"
        rows[b] = {**s, "ideal": ideal, "share": ideal / s["step"], "tok_s": b / s["step"] * 1e3,
                   "forward": path}
        out(f"{b:5d} {ideal:9.1f} {s['step']:8.1f} {ideal / s['step']:6.0%} "
            f"{b / s['step'] * 1e3:7.1f} {path:>8}   {s['linear']:.1f} | {s['attention']:.1f} | "
            f"{s['sampling']:.1f} | {s['other forward']:.1f} | {s['host']:.1f}")
    if fused:
        out("forward: '1 call' = the whole pass in one numba call (kernels.decode_pass), 'fused' "
            "= small ops fused (model/fused.py); the split times the same linear layers and "
            "attention on their own, so at batch 1 its parts exceed the fused step")
    out(f"load after {os.getloadavg()[0]:.2f}")
    return {"machine": mach, "rows": rows}
