"""Recording to disk: memory of a long recording, how soon steps reach the file, load time.

    python -m inferlab.bench.recording [--steps 100000] [--keep 2000]

1. Memory (tracemalloc, Python allocations) of recordings fed ``--steps`` real step records:
   a file-backed Trace (``Trace.record(..., path=...)``, the last ``keep`` steps in memory)
   and, for up to 20,000 steps, an in-memory one. The records come from a real run of the
   tiny model (with a synthetic workload), decoded afresh for every step (so none is
   shared) with request ids made unique per pass, so the request table grows as in a long
   run.
2. Flush latency on a live engine (wall clock): for every step, the time from its hook call
   to its line being in the file (a poller reads the file every 5 ms), with the default
   ``flush_interval=1.0`` and requests so long that only the timer flushes.
3. Load time of the ``--steps`` file: ``Trace.load`` decodes and validates every line.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import tempfile
import threading
import time
import tracemalloc

import msgspec


def source_lines(n_requests: int = 48):
    """The step lines of a real run of the tiny model (a list of bytes, one per step)."""
    import inferlab as il
    from inferlab.observe.trace import Trace
    from inferlab.sim.workloads import Uniform, run_workload, synthetic
    eng = il.Engine("tiny", num_blocks=256, block_size=16, max_num_seqs=8,
                    max_num_batched_tokens=256, clock="H100")
    with tempfile.TemporaryDirectory(prefix="il-bench-rec-") as d:
        path = os.path.join(d, "src.trace.jsonl")
        with Trace.record(eng, path=path):
            run_workload(eng, synthetic(n_requests, prompt_len=Uniform(16, 200),
                                        output_len=Uniform(16, 160), seed=0), progress=False)
        with open(path, "rb") as f:
            return [ln for ln in f.read().split(b"\n")[1:] if ln.startswith(b'{"step"')]


_RID = re.compile(rb'"r(\d+)"')


def fresh_records(lines, n: int):
    """``n`` StepRecords decoded afresh from ``lines`` (cycled), steps renumbered, request ids
    unique per pass."""
    from inferlab.observe.trace_format import Step, step_from_file
    dec = msgspec.json.Decoder(Step)
    for i in range(n):
        k, rep = i % len(lines), i // len(lines)
        line = lines[k]
        if rep:                                   # request ids "r12" -> "p3-r12"
            line = _RID.sub(b'"p%d-r\\1"' % rep, line)
        rec = step_from_file(dec.decode(line))
        rec.step = i
        yield rec


class _Engine:
    """What Trace.record reads; the records are fed by hand."""

    class config:            # noqa: N801
        block_size = 16
    model_name, clock_name, num_blocks = "tiny (records replayed)", "H100", 256

    def subscribe(self, fn):
        return lambda: None


def memory(lines, steps: int, keep: int, path: str | None, every: int = 10_000) -> dict:
    from inferlab.observe.trace import Trace
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        trace = (Trace.record(_Engine(), path=path, keep=keep) if path
                 else Trace.record(_Engine()))
        marks, t0 = {}, time.perf_counter()
        for i, rec in enumerate(fresh_records(lines, steps), 1):
            trace(rec)
            if i % every == 0 or i == steps:
                marks[i] = tracemalloc.get_traced_memory()[0] - base
        seconds = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    trace.stop()
    return {"marks": marks, "peak": peak, "per_step_us": seconds / steps * 1e6,
            "requests": len(trace.requests), "in_memory": getattr(trace.records, "in_memory",
                                                                  len(trace.records))}


def hook_cost(lines, n: int, path: str, repeats: int = 3) -> dict:
    """Seconds per step a Trace's hook takes (records decoded beforehand; no tracemalloc),
    in memory vs to a file; the median of ``repeats`` interleaved runs."""
    from inferlab.observe.trace import Trace
    recs = list(fresh_records(lines, n))
    out = {"memory": [], "file": []}
    for _ in range(repeats):
        for name in out:
            tr = Trace.record(_Engine(), path=path if name == "file" else None)
            t0 = time.perf_counter()
            for r in recs:
                tr(r)
            out[name].append((time.perf_counter() - t0) / n)
            tr.stop()
    return {k: statistics.median(v) for k, v in out.items()}


def flush_latency(path: str, seconds_each: float = 0.004) -> dict:
    """Each step's wait between its hook call and its line in the file (wall clock)."""
    import inferlab as il
    from inferlab.observe.trace import Trace
    eng = il.Engine("tiny", num_blocks=512, block_size=16, max_num_seqs=4)
    trace = Trace.record(eng, path=path)
    seen: list[float] = []                 # hook time of step i
    on_disk: dict[int, float] = {}         # number of step lines in the file -> first seen
    eng.subscribe(lambda rec: seen.append(time.monotonic()))
    done = threading.Event()

    def poll():
        while not done.is_set():
            with open(path, "rb") as f:
                n = f.read().count(b'\n{"step"')
            on_disk.setdefault(n, time.monotonic())
            time.sleep(0.005)
    t = threading.Thread(target=poll, daemon=True)
    t.start()
    for _ in range(4):
        eng.add_request("a long answer", il.SamplingParams(max_tokens=1500, ignore_eos=True))
    t0 = time.monotonic()
    while eng.has_unfinished_requests() and time.monotonic() - t0 < 8.0:
        eng.step()
        time.sleep(seconds_each)            # a step of a bigger model takes longer
    n_steps, flushes = len(seen), trace.writer.flushes
    time.sleep(1.5)                         # the timer writes the last ones
    done.set()
    t.join()
    eng.abort_all()
    trace.stop()
    counts = sorted(on_disk)
    waits = []
    for i, t_hook in enumerate(seen[:n_steps]):
        first = next((on_disk[c] for c in counts if c > i), None)
        if first is not None:
            waits.append(max(0.0, first - t_hook))
    return {"steps": n_steps, "flushes": flushes, "max_wait": max(waits),
            "median_wait": statistics.median(waits), "seconds": time.monotonic() - t0}


def load_time(path: str, repeats: int = 3) -> dict:
    from inferlab.observe.trace import Trace
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        tr = Trace.load(path)
        times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    n = sum(1 for _ in tr.records)
    read_all = time.perf_counter() - t0
    return {"median": statistics.median(times), "all": times, "steps": len(tr),
            "iterate_all": read_all, "n": n, "mb": os.path.getsize(path) / 1e6}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m inferlab.bench.recording")
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--keep", type=int, default=2000)
    a = ap.parse_args(argv)
    lines = source_lines()
    print(f"source: {len(lines)} real steps of the tiny model, cycled with fresh ids")
    with tempfile.TemporaryDirectory(prefix="il-bench-rec-") as d:
        path = os.path.join(d, "long.trace.jsonl")
        disk = memory(lines, a.steps, a.keep, path)
        mem_steps = min(a.steps, 20_000)
        mem = memory(lines, mem_steps, a.keep, None, every=mem_steps // 2)
        print("\n| recording | steps | memory at the end | per 1,000 steps (2nd half) | "
              "requests |\n|---|---:|---:|---:|---:|")
        for name, r, n in ((f"to a file, keep={a.keep}", disk, a.steps),
                           ("in memory only", mem, mem_steps)):
            m = r["marks"]
            ks = sorted(m)
            half = [k for k in ks if k >= n // 2][0]
            per_k = (m[n] - m[half]) / (n - half) * 1000
            print(f"| {name} | {n:,} | {m[n] / 2**20:.1f} MiB | {per_k / 1024:.1f} KiB | "
                  f"{r['requests']:,} |")
        print("\nmemory of the file-backed recording every 10,000 steps (MiB): "
              + ", ".join(f"{disk['marks'][k] / 2**20:.1f}" for k in sorted(disk["marks"])))
        hc = hook_cost(lines, 20_000, os.path.join(d, "cost.trace.jsonl"))
        print(f"\nhook cost per step (20,000 steps, median of 3, no tracemalloc): in memory "
              f"{hc['memory'] * 1e6:.1f} µs, to a file {hc['file'] * 1e6:.1f} µs")
        lt = load_time(path)
        print(f"\nload {lt['steps']:,} steps ({lt['mb']:.0f} MB): median {lt['median']:.2f} s "
              f"of {', '.join(f'{t:.2f}' for t in lt['all'])} s; reading all steps back: "
              f"{lt['iterate_all']:.2f} s")
        fl = flush_latency(os.path.join(d, "live.trace.jsonl"))
        print(f"\nflush (flush_interval=1.0 s, no request ended): {fl['steps']} steps in "
              f"{fl['seconds']:.1f} s, {fl['flushes']} flushes; a step waited for the file "
              f"{fl['median_wait'] * 1e3:.0f} ms median, {fl['max_wait'] * 1e3:.0f} ms at most")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
