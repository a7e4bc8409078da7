"""OpenMP's wait policy against the engine's speed: each policy in a fresh process, A B A B,
on a quiet machine and beside a busy neighbour (one process spinning on one core: what a
browser drawing live views or another job does to a 2-core machine).

    inferlab bench threads [--repeats 3] [--out docs/results/threads-amd.json]

A run: SmolLM2 (fp32), a warm-up, then one request of 32 tokens (batch 1) and eight of 32 at
once (batch 8), tokens per second of each, TTFT of the first. Policies: libgomp's default
(spin 300,000 times, then sleep; set as GOMP_SPINCOUNT=300000 so inferlab's own policy steps
aside), spinning 10,000 times, and passive (sleep at once: what ``import inferlab`` sets,
inferlab/threads.py).
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

from inferlab.threads import USER_KNOBS

from .common import busy_neighbour, table, write_result

POLICIES = {"spin (libgomp default)": {"GOMP_SPINCOUNT": "300000"},
            "spin 10k": {"GOMP_SPINCOUNT": "10000"},
            "passive (inferlab)": {"OMP_WAIT_POLICY": "PASSIVE"}}

RUN = r"""
import json, time
import inferlab as il
eng = il.Engine(num_blocks=64)
p = il.SamplingParams(max_tokens=32, ignore_eos=True)
eng.generate(["warm up please"], il.SamplingParams(max_tokens=4), use_tqdm=False)
t = time.perf_counter(); o = eng.generate(["Tell me about the sea."], p, use_tqdm=False)[0]
b1 = 32 / (time.perf_counter() - t)
t = time.perf_counter()
eng.generate([f"Tell me about item {i}." for i in range(8)], p, use_tqdm=False)
b8 = 8 * 32 / (time.perf_counter() - t)
print("RESULT", json.dumps({"b1_tok_s": b1, "b8_tok_s": b8, "ttft_ms": o.metrics.ttft * 1e3}))
"""


def one_run(policy: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in USER_KNOBS}
    proc = subprocess.run([sys.executable, "-c", RUN], env={**env, **policy},
                          capture_output=True, text=True, timeout=600)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"a run failed: {proc.stderr[-2000:]}")
    return {**json.loads(line[7:]), "load": round(os.getloadavg()[0], 2)}


def run(repeats: int = 3, out=print) -> dict:
    res: dict = {}
    for machine in ("quiet", "busy"):
        runs: dict = {name: [] for name in POLICIES}
        with busy_neighbour(machine == "busy"):
            for r in range(repeats):                      # A B C A B C: noise hits all alike
                for name, policy in POLICIES.items():
                    runs[name].append(one_run(policy))
                    last = runs[name][-1]
                    out(f"{machine} {r + 1}/{repeats} {name}: "
                        f"{last['b1_tok_s']:.1f} / {last['b8_tok_s']:.1f} tok/s")
        med = {n: {k: statistics.median(x[k] for x in rs) for k in ("b1_tok_s", "b8_tok_s",
                                                                     "ttft_ms")}
               for n, rs in runs.items()}
        res[machine] = {"runs": runs, "median": med}
        table(out, ["policy", "batch 1 tok/s", "batch 8 tok/s", "TTFT ms"],
              [[n, f"{m['b1_tok_s']:.1f}", f"{m['b8_tok_s']:.1f}", f"{m['ttft_ms']:.0f}"]
               for n, m in med.items()])
    return res


def main(repeats: int = 3, out_path: str | None = None) -> int:
    res = run(repeats)
    if out_path:
        cmd = f"inferlab bench threads --repeats {repeats} --out {out_path}"
        print("written to", write_result(out_path, cmd, res))
    return 0
