"""GPU check of the numba-CUDA kernels (run by kernels/gpu_check.sh on a lent H200).

    python -m inferlab.bench.cuda_kernels [--peak-tbs 4.8]

1. correctness vs the torch reference (on the GPU, fp32, no TF32) at real shapes: fp32 within
   1e-4; fp16 and bf16 (q, K, V in that type) within one rounding of the output (the unit
   roundoff, relative, + 2e-5) of the fp32 reference on the same upcast inputs: the kernels
   accumulate in fp32; write_kv in place (half caches: fp32 k/v rounded as torch rounds);
2. kernel-only decode bandwidth at batch 64, context 2048 and 4096 (SmolLM2 and Llama-8B
   heads) as a % of the peak, fp32, fp16 and bf16 side by side; "kernel-only" = GPU time
   between CUDA events around launches queued behind a GPU sleep, so host launch latency is
   hidden;
3. launch overhead: host time per call of the Python launcher at a tiny shape;
4. torch SDPA on the same K/V gathered into contiguous tensors (kernel-only, and with the
   gather counted).
"""
from __future__ import annotations

import argparse
import os
import time

import torch
import torch.nn.functional as F

from inferlab.core.shapes import cdiv
from inferlab.kernels import paged_attention_decode, paged_attention_prefill, reference, write_kv

# Dry run (kernels/gpu_check.sh --dry-run, in CI): numba's CUDA simulator on CPU tensors, every
# step at tiny shapes, wall-clock times (meaningless, printed only to run the code).
DRY = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
DEV = "cpu" if DRY else "cuda"


def sync() -> None:
    if not DRY:
        torch.cuda.synchronize()


DTYPES = ("float32", "float16", "bfloat16")
UNIT_ROUNDOFF = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}


def make(batch, context, heads, kv_heads, head_dim, block=16, new_tokens=1, seed=0,
         dtype="float32"):
    g = torch.Generator(device="cpu").manual_seed(seed)
    nblk = cdiv(context, block)
    tables = torch.randperm(batch * nblk, generator=g).int().view(batch, nblk)
    shape = (batch * nblk, block, kv_heads, head_dim)
    dt = getattr(torch, dtype)
    return dict(q=torch.randn(batch * new_tokens, heads, head_dim, generator=g).to(DEV, dt),
                k_cache=torch.randn(shape, generator=g).to(DEV, dt),
                v_cache=torch.randn(shape, generator=g).to(DEV, dt),
                block_tables=tables.to(DEV),
                seq_lens=torch.full((batch,), context, dtype=torch.int32, device=DEV),
                query_start_loc=torch.arange(0, batch * new_tokens + 1, new_tokens,
                                             dtype=torch.int32, device=DEV),
                scale=head_dim ** -0.5)


def dec(c, backend):
    return paged_attention_decode(c["q"], c["k_cache"], c["v_cache"], c["block_tables"],
                                  c["seq_lens"], c["scale"], backend=backend)


def gpu_time(fn, n=20) -> float:
    """Seconds per call of GPU work only: launches queue up behind a GPU sleep."""
    if DRY:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(50_000_000)                        # ~25 ms: the host runs ahead
    start.record()
    for _ in range(n):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / n


def _attend(c, backend, new):
    if new == 1:
        return dec(c, backend)
    args = [c[k] for k in ("q", "k_cache", "v_cache", "block_tables", "seq_lens",
                           "query_start_loc")]
    return paged_attention_prefill(*args, c["scale"], backend=backend)


def correctness() -> bool:
    ok = True
    # (dry run: the simulator takes seconds per kernel call, so the smallest shapes that
    # still have GQA, uneven lengths and a prefill over cached tokens)
    cases = [("decode tiny b2 ctx<=12", 2, 12, 4, 1, 32, 1, DTYPES),
             ("prefill tiny 1 x 4 new of 12", 1, 12, 4, 1, 32, 4, DTYPES)] if DRY else [
             ("decode SmolLM2 b64 ctx<=2048", 64, 2048, 9, 3, 64, 1, DTYPES),
             ("decode Llama-8B b16 ctx<=4096", 16, 4096, 32, 8, 128, 1, DTYPES),
             ("decode GQA1 d128 b8 ctx 777", 8, 777, 8, 8, 128, 1, DTYPES[:1]),
             ("prefill SmolLM2 4 x 512 new of 1500", 4, 1500, 9, 3, 64, 512, DTYPES),
             ("prefill Llama-8B 2 x 512 new of 2048", 2, 2048, 32, 8, 128, 512, DTYPES[1:])]
    for name, b, ctx, h, kvh, d, new, dtypes in cases:
        lens = torch.randint(max(new, 1), ctx + 1, (b,), dtype=torch.int32, device=DEV)
        for dtype in dtypes:
            c = make(b, ctx, h, kvh, d, new_tokens=new, dtype=dtype)
            c["seq_lens"] = lens
            out = _attend(c, "numba-cuda", new)
            up = {k: v.float() if k in ("q", "k_cache", "v_cache") else v for k, v in c.items()}
            ref = _attend(up, "reference", new)       # fp32, on the same (upcast) inputs
            err = (out.float() - ref).abs()
            if dtype == "float32":
                worst, good = err.max().item(), err.max().item() <= 1e-4
                bound = "atol 1e-4"
            else:   # in units of one rounding of the output: <= 1 when accumulated in fp32
                worst = (err / (2e-5 + UNIT_ROUNDOFF[dtype] * ref.abs())).max().item()
                good = worst <= 1.01 and out.dtype == c["q"].dtype
                bound = f"{worst:.2f} roundings"
            ok &= good
            print(f"  {name:40s} {dtype:8s} max abs err {err.max().item():.2e} ({bound}) "
                  f"{'ok' if good else 'FAIL'}")
    nb, n, kvh, d = (2, 6, 1, 32) if DRY else (64, 300, 8, 128)
    for cache_dtype, new_dtype in [("float32", "float32"), ("bfloat16", "bfloat16"),
                                   ("float16", "float16"), ("bfloat16", "float32"),
                                   ("float16", "float32")]:
        kc = torch.zeros(nb, 16, kvh, d, device=DEV, dtype=getattr(torch, cache_dtype))
        vc = torch.zeros_like(kc)
        k, v = (torch.randn(n, kvh, d, device=DEV).to(getattr(torch, new_dtype))
                for _ in range(2))
        slots = torch.randperm(nb * 16, device=DEV)[:n]
        write_kv(k, v, kc, vc, slots, backend="numba-cuda")
        good = (torch.equal(kc.view(-1, kvh, d)[slots], k.to(kc.dtype))     # torch rounds
                and torch.equal(vc.view(-1, kvh, d)[slots], v.to(vc.dtype)))  # to nearest even
        ok &= good
        what = f"write_kv {n} tokens {new_dtype} -> {cache_dtype}"
        print(f"  {what:40s} (in place) {'ok' if good else 'FAIL'}")
    return ok


def bandwidth(peak_tbs: float) -> None:
    print("| heads (q/kv/dim) | batch | context | dtype | numba-cuda us | TB/s | % of peak "
          "| SDPA (gathered) us | gather+SDPA us |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|")
    batch = 1 if DRY else 64
    rows = [(hd, ctx, dt) for hd in ([(2, 1, 32)] if DRY else [(9, 3, 64), (32, 8, 128)])
            for ctx in ((8,) if DRY else (2048, 4096)) for dt in DTYPES]
    for heads, ctx, dtype in rows:
        c = make(batch, ctx, *heads, dtype=dtype)
        h, kvh, d = heads
        t = gpu_time(lambda: dec(c, "numba-cuda"))
        kv_bytes = c["k_cache"].numel() * c["k_cache"].element_size() * 2
        tbs = kv_bytes / t / 1e12
        # SDPA on contiguous K/V: [B, KVH, L, D], GQA expanded to [B, H, L, D]
        tables = c["block_tables"].long()
        gather = lambda cache: cache[tables].view(batch, -1, kvh, d).transpose(1, 2)
        q4 = c["q"].view(batch, h, 1, d)

        def sdpa(k, v):
            k, v = k.repeat_interleave(h // kvh, 1), v.repeat_interleave(h // kvh, 1)
            return F.scaled_dot_product_attention(q4, k, v, scale=c["scale"])
        kg = gather(c["k_cache"]).repeat_interleave(h // kvh, 1)    # [B, H, L, D]
        vg = gather(c["v_cache"]).repeat_interleave(h // kvh, 1)
        t_sdpa = gpu_time(lambda: F.scaled_dot_product_attention(q4, kg, vg,
                                                                 scale=c["scale"]))
        del kg, vg
        t_full = gpu_time(lambda: sdpa(gather(c["k_cache"]), gather(c["v_cache"])))
        print(f"| {h}/{kvh}/{d} | {batch} | {ctx} | {dtype} | {t * 1e6:.1f} | {tbs:.2f} | "
              f"{100 * tbs / peak_tbs:.0f}% | {t_sdpa * 1e6:.1f} | {t_full * 1e6:.1f} |")
    print("  SDPA: on K/V already gathered and GQA-expanded; gather+SDPA: both timed")


def launch_overhead() -> None:
    c = make(1, 8, 2, 1, 32) if DRY else make(1, 16, 9, 3, 64)
    for _ in range(0 if DRY else 10):      # (dry run: the timed call below is the first)
        dec(c, "numba-cuda")
    sync()
    n = 1 if DRY else 200
    t0 = time.perf_counter()
    for _ in range(n):
        dec(c, "numba-cuda")
    host = (time.perf_counter() - t0) / n
    sync()
    gpu = host if DRY else gpu_time(lambda: dec(c, "numba-cuda"), n=100)
    ref_host = time.perf_counter()
    for _ in range(n):
        dec(c, "reference")
    sync()
    ref_host = (time.perf_counter() - ref_host) / n
    print(f"  batch 1, context {c['seq_lens'][0].item()}: host time per call {host * 1e6:.1f} us (numba launcher), "
          f"GPU time {gpu * 1e6:.1f} us; torch reference {ref_host * 1e6:.1f} us per call")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--peak-tbs", type=float, default=4.8, help="HBM peak (H200: 4.8 TB/s)")
    args = p.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = False       # the reference stays true fp32
    import numba
    device = "CUDA simulator (dry run: tiny shapes, times meaningless)" if DRY else \
        torch.cuda.get_device_name()
    print(f"# {device} | torch {torch.__version__} | "
          f"numba {numba.__version__}")
    print("## correctness vs reference (fp32: atol 1e-4; fp16, bf16: within one rounding of "
          "the fp32 reference on the same inputs)")
    ok = correctness()
    print("## decode bandwidth, kernel only")
    bandwidth(args.peak_tbs)
    print("## launch overhead")
    launch_overhead()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
