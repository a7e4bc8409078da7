"""What compiling numba's kernels for x86-64-v3 instead of the exact CPU costs, in a Binder pod.

    python -m inferlab.bench.binder_kernels --repeats 3 --out docs/results/binder-kernels-amd.json

binder/kernels.sh has numba compile for x86-64-v3 (AVX2, FMA), so the kernels postBuild put
in the image are found on any host (no compile before the first view); the exact CPU's
kernels may use more (AVX-512 here). Each side runs in its own process in a pod of 2 GB and
one CPU under binder/start (``INFERLAB_NATIVE_KERNELS=1`` for the exact CPU), each with its
own warm numba cache, alternating A B A B: SmolLM2 decoding 48 tokens for one request and for
eight at once, tokens per second; medians and spread per side, their ratio.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from inferlab.bench.binder_pod import START
from inferlab.tools.pod import Pod

WORK = r"""
import json, time
import inferlab as il
eng = il.Engine(num_blocks=256)
eng.generate(["warm up"], il.SamplingParams(max_tokens=4), use_tqdm=False)
p = il.SamplingParams(max_tokens=48, ignore_eos=True)
out = {}
for name, prompts in (("1 request", ["Write a story about a cat."]),
                      ("8 requests", [f"Tell me about the number {i}." for i in range(8)])):
    t = time.perf_counter()
    outs = eng.generate(prompts, p, use_tqdm=False)
    out[name] = sum(len(o.token_ids) for o in outs) / (time.perf_counter() - t)
print("RESULT " + json.dumps(out))
"""
SIDES = {"x86-64-v3": {}, "exact CPU": {"INFERLAB_NATIVE_KERNELS": "1"}}


def run(repeats: int = 3, log=print) -> dict:
    got: dict = {s: [] for s in SIDES}
    with tempfile.TemporaryDirectory(prefix="inferlab-kernels-") as tmp, Pod("2G", 1) as pod:
        for r in range(repeats + 1):                 # round 0 compiles each side's cache
            for side, extra in SIDES.items():
                env = dict(os.environ, **extra, HF_HUB_OFFLINE="1",
                           NUMBA_CACHE_DIR=os.path.join(tmp, side.replace(" ", "-")))
                env.pop("NUMBA_CPU_NAME", None)
                env.pop("NUMBA_CPU_FEATURES", None)
                p = subprocess.run(["bash", str(START), sys.executable, "-c", WORK], env=env,
                                   preexec_fn=pod.enter, capture_output=True, text=True)
                line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
                if p.returncode or not line:
                    raise RuntimeError(f"{side}: {p.stderr[-2000:]}")
                if r:
                    got[side].append(json.loads(line[0][7:]))
                    log(f"round {r} {side}: {got[side][-1]}")
    out: dict = {"sides": {}, "ratio_v3_over_exact": {}}
    for side, runs in got.items():
        out["sides"][side] = {k: {"median": statistics.median(x[k] for x in runs),
                                  "min": min(x[k] for x in runs), "max": max(x[k] for x in runs)}
                              for k in runs[0]}
    for k in out["sides"]["x86-64-v3"]:
        out["ratio_v3_over_exact"][k] = round(out["sides"]["x86-64-v3"][k]["median"]
                                              / out["sides"]["exact CPU"][k]["median"], 3)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m inferlab.bench.binder_kernels",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    res = run(a.repeats)
    print(json.dumps(res, indent=1))
    from inferlab.bench.common import save_result
    save_result("inferlab.bench.binder_kernels", argv, res, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
