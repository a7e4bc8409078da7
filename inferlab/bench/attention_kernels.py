"""`inferlab bench kernels`: the numba decode kernel vs the torch reference on SmolLM2-135M
decode shapes, as a markdown table for BENCHMARKS.md (method: lab/chapters/_kernel_timing.py).

    python -m inferlab.bench.attention_kernels
    python -m inferlab.bench.attention_kernels --batches 1 64 --contexts 2048 --repeats 9
"""
from __future__ import annotations

import argparse
import platform

import torch

from inferlab.lab.chapters._kernel_timing import bench_one, memory_bandwidth


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0].strip('`'))
    p.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16, 64])
    p.add_argument("--contexts", type=int, nargs="+", default=[128, 512, 2048])
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args(argv)

    import numba
    bw = memory_bandwidth()
    roof = bw["read_gbs"]                                 # decode only reads K/V
    rows = [bench_one(b, c, args.repeats) for b in args.batches for c in args.contexts]
    print(f"machine: {platform.processor() or platform.machine()}, "
          f"{numba.config.NUMBA_NUM_THREADS} numba threads "
          f"({numba.threading_layer()} layer), torch {torch.__version__} "
          f"({torch.get_num_threads()} threads), numba {numba.__version__}")
    print(f"measured memory bandwidth: {bw['copy_gbs']:.1f} GB/s numpy copy (read+write), "
          f"{bw['read_gbs']:.1f} GB/s parallel numba read; roof = {roof:.1f} GB/s\n")
    print("| batch | context | numba-cpu ms | reference ms | speedup | numba GB/s | % of roof "
          "| reference GB/s | max abs err |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['batch']} | {r['context']} | {r['numba_ms']:.3f} | {r['ref_ms']:.3f} | "
              f"{r['speedup']:.1f}x | {r['numba_gbs']:.1f} | {100 * r['numba_gbs'] / roof:.0f}% "
              f"| {r['ref_gbs']:.1f} | {r['max_err']:.1e} |")
    slowest = min(rows, key=lambda r: r["speedup"])
    print(f"\nslowest speedup: {slowest['speedup']:.1f}x at batch {slowest['batch']}, "
          f"context {slowest['context']}")


if __name__ == "__main__":
    main()
