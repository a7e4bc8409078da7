"""Where a step's time goes on this CPU, next to what the roofline says about each part.

The cost model prices a step as ``max(FLOPs / peak, bytes / bandwidth) + overhead``. When
its prediction misses the engine's measured step, this module says which term is wrong by
timing the parts of the same step on the real weights, outside the engine:

* ``linear``: every layer's four projections (qkv, o, gate_up, down) and the LM head,
  ``torch.nn.functional.linear`` on the step's token count: the GEMMs (or GEMVs) the
  roofline's compute or memory term stands for;
* ``attention``: the paged-attention kernel the engine uses (numba on a CPU), once per layer
  on the step's query and context lengths: priced by the roofline as FLOPs at sgemm speed;
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


def _median_time(fn, repeats: int) -> float:
    fn()                                               # warm up (numba dispatch, allocator)
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def measure_parts(eng, chunks, repeats: int = 3) -> dict[str, float]:
    """Seconds for the linear layers and the attention kernels of one step of ``chunks``
    [(new_tokens, context_after)] on ``eng``'s model and KV cache (its contents do not
    matter for timing; the blocks used are scratch)."""
    import torch

    from inferlab import kernels
    runner = eng.runner
    m = runner.model
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
    decode = all(n == 1 for n, _ in chunks)

    @torch.inference_mode()
    def attention():
        for li in range(m.num_layers):
            kc, vc = runner.k_cache[li], runner.v_cache[li]      # [blocks, bs, KVH, D]
            if decode:
                kernels.paged_attention_decode(q, kc, vc, bt, sl, m.scale, backend=runner.backend)
            else:
                kernels.paged_attention_prefill(q, kc, vc, bt, sl, qs, m.scale,
                                                backend=runner.backend)
    return {"linear": _median_time(linears, repeats), "attention": _median_time(attention, repeats)}


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
