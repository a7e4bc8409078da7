"""``inferlab bench gemm``: the linear layers' GEMM paths side by side, at a step's row counts.

The model's four projections per layer (SmolLM2-135M: qkv 576 -> 960, o 576 -> 576, gate_up
576 -> 3072, down 1536 -> 576) with random weights, one set per layer, so that from one layer
to the next the weights come from memory as they do in a real step (30 layers: 0.43 GB a
copy). Each path multiplies the same rows through all layers; the paths alternate (A B C A B
C), and each reports the median GFLOP/s of the repeats and their range:

* ``numba GEMM``: kernels/gemm_cpu.py over its packed panels (the engine's default on a CPU);
* ``oneDNN packed``: oneDNN's matmul over weights reordered once for 32 rows (the default
  before it);
* ``F.linear``: torch's reference (MKL on x86).

``--dtype bfloat16``: the same three in bf16 (weights and rows rounded to bf16, fp32
accumulation): the numba GEMM's AVX512-BF16 tile where the CPU has it (else the row is left
out), oneDNN's bf16 matmul (AMX or AVX512-BF16, whichever the CPU has), torch's bf16 linear.
"""
from __future__ import annotations

import os
import statistics
import time

SHAPES = ((960, 576), (576, 576), (3072, 576), (576, 1536))     # [out, in] per layer
ROWS = (8, 32, 64, 512, 2048)


def main(rows=ROWS, layers: int = 30, repeats: int = 5, out=print,
         dtype: str = "float32") -> dict:
    """GFLOP/s per path and row count (medians), and numba GEMM / oneDNN packed."""
    import numpy as np
    import torch

    from inferlab import kernels
    from inferlab.model.linear import kernel_array as bits
    from inferlab.model.linear import numba_runs, onednn_linear, onednn_pack
    if not torch.backends.mkldnn.is_available():
        raise SystemExit("bench gemm compares with oneDNN, which this torch build lacks")
    dt = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    if numba_runs(dt) is not None:
        raise SystemExit(f"bench gemm --dtype {dtype}: {numba_runs(dt)}")

    gen = torch.Generator().manual_seed(0)
    plain = [[torch.randn(n, k, generator=gen).to(dt) for n, k in SHAPES]
             for _ in range(layers)]
    panels = [[kernels.pack_panels(bits(w)) for w in ws] for ws in plain]
    dnn = [[onednn_pack(w) for w in ws] for ws in plain]
    out(f"{layers} layers x {len(SHAPES)} GEMMs (SmolLM2-135M's), {dtype}, "
        f"{torch.get_num_threads()} threads, median of {repeats} after a warm-up, paths "
        f"alternated; load {os.getloadavg()[0]:.2f}")
    out(f"{'rows':>5}  {'numba GEMM':>20}  {'oneDNN packed':>20}  {'F.linear':>20}  numba/oneDNN")
    results = {}
    for m in rows:
        n_layers = max(2, min(layers, 16384 // m))         # big row counts: fewer layers
        xs = {k: torch.randn(m, k, generator=gen).to(dt) for k in (576, 1536)}
        ys = {n: np.empty((m, n), dtype=np.float32) for n, _ in SHAPES}

        def numba_gemm():
            for ws in panels[:n_layers]:
                for (n, k), w in zip(SHAPES, ws):
                    kernels.gemm(bits(xs[k]), w, ys[n])

        def onednn():
            for ws in dnn[:n_layers]:
                for (n, k), w in zip(SHAPES, ws):
                    onednn_linear(xs[k], w)

        def f_linear():
            for ws in plain[:n_layers]:
                for (n, k), w in zip(SHAPES, ws):
                    torch.nn.functional.linear(xs[k], w)

        paths = {"numba GEMM": numba_gemm, "oneDNN packed": onednn, "F.linear": f_linear}
        times = {name: [] for name in paths}
        for fn in paths.values():
            fn()                                            # warm-up
        for _ in range(repeats):
            for name, fn in paths.items():
                t = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t)
        flop = 2.0 * m * n_layers * sum(n * k for n, k in SHAPES)
        rates = {name: [flop / t / 1e9 for t in v] for name, v in times.items()}
        results[m] = {name: statistics.median(v) for name, v in rates.items()}
        cells = [f"{statistics.median(v):5.0f} ({min(v):3.0f}-{max(v):3.0f})"
                 for v in rates.values()]
        out(f"{m:5d}  " + "  ".join(f"{c:>20}" for c in cells)
            + f"  {results[m]['numba GEMM'] / results[m]['oneDNN packed']:.2f}x")
    out(f"GFLOP/s, median (range); load after {os.getloadavg()[0]:.2f}")
    return results
