"""A two-minute GPU probe: three questions the GPU engine's next steps depend on, each answer
written to the output folder the moment it is known (a run cut short still returns what ran).

    python -m inferlab.bench.gpu_probe --out DIR          # on a GPU (kernels/gpu_probe.sh)
    NUMBA_ENABLE_CUDASIM=1 python -m inferlab.bench.gpu_probe --out DIR --dry-run

1. ``launch``: host microseconds per numba-CUDA launch of a trivial kernel on a torch
   tensor: as the engine launches today (a device view and torch's stream made per call,
   ``cuda_launch.Launch``), with the view, the stream and the launch configuration prepared
   once, and on a numba device array (numba's own floor).
2. ``graph``: a numba kernel launched on torch's stream inside ``torch.cuda.graph`` capture,
   replayed after its input buffer is refilled; each replay's output checked against the same
   kernel run eagerly. (Not in the simulator: it has no CUDA graphs; the step says so.)
3. ``bf16_load``: a bf16 read-and-sum kernel loading one 16-bit element per load (as the
   decode kernel does today) against two per 32-bit load and four per 64-bit load: GB/s each
   (CUDA events, GPU time only), and the sums checked against each other.

Each step's result: ``DIR/<step>.json`` and a line of ``DIR/probe.md``; an exception is a
result too (its text), and the next step still runs.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time
import traceback

import numpy as np
from numba import cuda

from inferlab.kernels import cuda_probe_kernels

STEPS = ("launch", "graph", "bf16_load")


class Recorder:
    """Writes each step's result as soon as it exists: DIR/<step>.json and DIR/probe.md."""

    def __init__(self, out: str):
        self.out = out
        os.makedirs(out, exist_ok=True)

    def __call__(self, step: str, result: dict) -> dict:
        with open(os.path.join(self.out, f"{step}.json"), "w") as f:
            json.dump(result, f, indent=1, default=str)
        line = f"{step}: " + ", ".join(f"{k}={v}" for k, v in result.items()
                                       if not isinstance(v, (dict, list)))
        with open(os.path.join(self.out, "probe.md"), "a") as f:
            f.write(line + "\n")
        print(line, flush=True)
        return result


def _torch_cuda():
    try:
        import torch
        return torch if torch.cuda.is_available() else None
    except ImportError:
        return None


def launch(n_calls: int, simulated: bool) -> dict:
    """Host microseconds per launch, three ways (see the module's docstring)."""
    k = cuda_probe_kernels()
    torch = _torch_cuda()
    n = 1024
    per = {}

    def timed(name, fn):
        fn()                                        # compile / first-call costs
        cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n_calls):
            fn()
        per[name] = (time.perf_counter() - t) / n_calls * 1e6
        cuda.synchronize()

    d = cuda.to_device(np.zeros(n, np.float32))
    if torch is not None:
        x = torch.zeros(n, device="cuda")

        timed("today_us", lambda: k.launch_today(x))
        view = cuda.as_cuda_array(x, sync=False)
        stream = cuda.external_stream(torch.cuda.current_stream().cuda_stream)
        configured = k.add_one_configured(n, stream)
        timed("prepared_us", lambda: configured(view))
        torch.cuda.synchronize()
        ok = bool((x == 2 * n_calls + 2).all().item())
    else:
        ok = None                                   # the simulator: numba arrays only
    configured = k.add_one_configured(n)
    timed("numba_array_us", lambda: configured(d))
    return {**{k: round(v, 1) for k, v in per.items()}, "calls": n_calls,
            "torch_counts_ok": ok, "simulated": simulated}


def graph(simulated: bool) -> dict:
    """A numba kernel captured into a CUDA graph on torch's stream, replayed twice with new
    inputs, each replay checked against eager."""
    torch = _torch_cuda()
    if simulated or torch is None:
        return {"skipped": "no CUDA graphs here (numba's CUDA simulator, or no torch CUDA)"}
    scale = cuda_probe_kernels().scale
    n = 1 << 20
    x, y = torch.zeros(n, device="cuda"), torch.zeros(n, device="cuda")
    vx, vy = cuda.as_cuda_array(x, sync=False), cuda.as_cuda_array(y, sync=False)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):                   # warm up (compile) off the capture
        scale[n // 256, 256, cuda.external_stream(side.cuda_stream)](vx, vy, 3.0)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        stream = cuda.external_stream(torch.cuda.current_stream().cuda_stream)
        scale[n // 256, 256, stream](vx, vy, 3.0)
    errs = []
    for seed in (1, 2):
        x.copy_(torch.randn(n, device="cuda", generator=torch.Generator("cuda").manual_seed(seed)))
        g.replay()
        torch.cuda.synchronize()
        errs.append(float((y - 3.0 * x).abs().max().item()))
    t = time.perf_counter()
    for _ in range(100):
        g.replay()
    torch.cuda.synchronize()
    return {"captured": True, "max_abs_err": max(errs), "ok": max(errs) == 0.0,
            "replay_host_us": round((time.perf_counter() - t) / 100 * 1e6, 1)}


def bf16_load(kib: int, simulated: bool, peak_gbs: float | None) -> dict:
    """GB/s of a bf16 read-and-sum kernel at three load widths; the sums must agree."""
    n = kib * 1024 // 2                             # bf16 elements
    rng = np.random.default_rng(0)
    vals = rng.standard_normal(n).astype(np.float32)
    bits = (vals.view(np.uint32) >> 16).astype(np.uint16).view(np.int16)   # truncated bf16
    d16 = cuda.to_device(bits)
    views = {name: (kernel, d16.view(as_type))
             for name, (kernel, as_type) in cuda_probe_kernels().BF16_SUMS.items()}
    threads, blocks = (64, 2) if simulated else (256, 4 * 132)
    out = cuda.device_array(threads * blocks, np.float32)
    rows, sums = {}, {}
    for name, (kernel, arr) in views.items():
        kernel[blocks, threads](arr, out)           # compile, warm
        cuda.synchronize()
        reps = 1 if simulated else 20
        start, end = cuda.event(), cuda.event()
        start.record()
        for _ in range(reps):
            kernel[blocks, threads](arr, out)
        end.record()
        end.synchronize()
        sec = max(start.elapsed_time(end) / 1e3 / reps, 1e-9)   # the simulator says -1
        sums[name] = float(out.copy_to_host().astype(np.float64).sum())
        gbs = n * 2 / sec / 1e9
        rows[name] = {"gbs": round(gbs, 1),
                      "peak_share": round(gbs / peak_gbs, 3) if peak_gbs else None}
    ref = float(((bits.astype(np.int32) & 0xFFFF) << 16).astype(np.uint32).view(np.float32)
                .astype(np.float64).sum())
    agree = all(math.isclose(s, ref, rel_tol=1e-3, abs_tol=1e-2 * math.sqrt(n))
                for s in sums.values())
    return {"kib": kib, "sums_agree": agree, "rows": rows, "simulated": simulated,
            **{name.split(" (")[0]: r["gbs"] for name, r in rows.items()}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m inferlab.bench.gpu_probe", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "gpu-probe-out"))
    ap.add_argument("--dry-run", action="store_true", help="tiny sizes (numba's simulator)")
    ap.add_argument("--peak-gbs", type=float, default=None, help="HBM bandwidth, GB/s")
    ap.add_argument("--steps", default=",".join(STEPS))
    args = ap.parse_args(argv)
    simulated = bool(os.environ.get("NUMBA_ENABLE_CUDASIM"))
    record, failed = Recorder(args.out), 0
    small = args.dry_run or simulated
    run = {"launch": lambda: launch(20 if small else 2000, simulated),
           "graph": lambda: graph(simulated),
           "bf16_load": lambda: bf16_load(16 if small else 256 * 1024, simulated, args.peak_gbs)}
    for step in args.steps.split(","):
        try:
            res = run[step]()
        except Exception as e:                      # a result too: the next step still runs
            res, failed = {"error": f"{type(e).__name__}: {e}",
                           "trace": traceback.format_exc()[-2000:]}, failed + 1
        record(step, res)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
