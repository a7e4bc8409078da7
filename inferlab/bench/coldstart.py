"""`inferlab bench coldstart`: what a user waits for, from a new Python to the first token.

Each run is a fresh process: ``import inferlab`` + ``Engine()`` + one greedy token, each
phase timed inside it. Variants, interleaved A B A B so the machine's noise hits all alike:

* ``engine files``: the default start, weights memory-mapped from the engine's own file in the
  weights cache (model/engine_files.py), numba kernels already cached for this CPU;
* ``transformers``: the same with ``INFERLAB_ENGINE_FILES=0``, the start before it
  (transformers' ``from_pretrained`` on the cached entry, then fusing and packing);
* ``new CPU`` (``--new-cpu N`` runs): an empty ``NUMBA_CACHE_DIR``, as on a machine whose CPU
  numba has not compiled for (a Binder pod on another host than its image was built on).

Reports median and range per phase, the CPU's model name, the load before and after, and
writes everything with the command and date to a JSON result file (``--out``).
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from inferlab.lab.protocol import cpu_isa_flags, cpu_name

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import inferlab as il
t1 = time.perf_counter()
eng = il.Engine()
t2 = time.perf_counter()
eng.generate(["What is the capital of France?"], il.SamplingParams(max_tokens=1),
             use_tqdm=False)
t3 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "engine": t2 - t1, "first token": t3 - t2,
                  "total": t3 - t0, "origin": eng.loaded.origin,
                  "linear": eng.runner.linear_backend}))
"""
PHASES = ("import", "engine", "first token", "total")


def _run(env_extra: dict) -> dict:
    env = {**os.environ, **env_extra}
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                       timeout=600)
    if p.returncode:
        raise RuntimeError(f"cold-start child failed:\n{p.stderr[-3000:]}")
    res = json.loads(p.stdout.strip().splitlines()[-1])
    res["process"] = time.perf_counter() - t          # interpreter start and exit included
    res["said"] = [line for line in p.stderr.splitlines() if line.startswith("inferlab:")]
    return res


def main(repeats: int = 4, new_cpu: int = 2, out_path: str | None = None, out=print) -> dict:
    variants = {"engine files": {}, "transformers": {"INFERLAB_ENGINE_FILES": "0"}}
    load0 = os.getloadavg()[0]
    _run({})                                           # the weights cache and kernels exist
    runs: dict[str, list[dict]] = {k: [] for k in variants}
    for _ in range(repeats):
        for name, env in variants.items():
            runs[name].append(_run(env))
    if new_cpu:
        runs["new CPU (empty numba cache)"] = []
        for _ in range(new_cpu):
            with tempfile.TemporaryDirectory() as d:
                runs["new CPU (empty numba cache)"].append(_run({"NUMBA_CACHE_DIR": d}))
    load1 = os.getloadavg()[0]
    summary = {name: {ph: {"median": statistics.median(r[ph] for r in rs),
                           "min": min(r[ph] for r in rs), "max": max(r[ph] for r in rs)}
                      for ph in (*PHASES, "process")} for name, rs in runs.items()}
    cpu = cpu_name()
    out(f"cold start: fresh processes, A B A B x {repeats}; CPU {cpu}, {os.cpu_count()} cores; "
        f"load {load0:.2f} before, {load1:.2f} after")
    out("| start | import (s) | Engine() (s) | first token (s) | total (s) | process (s) |")
    out("|---|---:|---:|---:|---:|---:|")
    for name, s in summary.items():
        cell = lambda ph: f"{s[ph]['median']:.2f} ({s[ph]['min']:.2f}-{s[ph]['max']:.2f})"  # noqa: E731
        out(f"| {name} | " + " | ".join(cell(ph) for ph in (*PHASES, "process")) + " |")
    said = runs.get("new CPU (empty numba cache)", [{}])[0].get("said", [])
    if said:
        out("a new CPU says: " + " / ".join(said))
    command = "inferlab bench coldstart" + (f" --repeats {repeats - 1}" if repeats != 4 else "")
    command += f" --out {out_path}" if out_path else ""      # (the CLI passes --repeats + 1)
    result = {"command": command,
              "date": time.strftime("%Y-%m-%d %H:%M"), "cpu": cpu, "flags": cpu_isa_flags(),
              "cores": os.cpu_count(),
              "load_before": load0, "load_after": load1, "summary": summary, "runs": runs}
    if out_path:
        os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
        with open(out_path, "w") as f:
            json.dump(result, f, indent=1)
        out(f"written to {out_path}")
    return result
