"""`inferlab bench profile`: where real engine steps spend their time, fused forward vs the
op-by-op reference, for decode at batch 1 / 8 / 32 and a mixed step (31 sequences decoding
while a 512-token prompt is prefilled).

The parts are timed inside real ``Engine.step()`` calls through the forwards' named timing
points (``ModelRunner.timing``: nothing is patched; with no timer they cost nothing
measurable, BENCHMARKS.md). numba code is invisible to torch's profiler, hence timers rather
than ``torch.profiler``. The two forwards alternate on one engine (A B A B, ``use_path``);
each figure is a median. A batch-1 fused step is one numba call: its one part is
"one-call decode".
"""
from __future__ import annotations

import collections
import contextlib
import os
import statistics
import time

PARTS = ("linear", "lm head", "attention", "rotary + kv write", "norms + adds", "silu",
         "one-call decode")


def _timer(spent):
    """A timer for ``ModelRunner.timing``: adds each part's seconds to ``spent``."""
    @contextlib.contextmanager
    def part(name):
        t = time.perf_counter()
        try:
            yield
        finally:
            spent[name] += time.perf_counter() - t
    return part


def _run_steps(eng, add, warm: int, steps: int, spent) -> list[dict]:
    """Add requests (``add``), run ``warm`` steps, time the parts of the next ``steps`` (one
    dict per step, ms), then run until every request finishes."""
    add()
    for _ in range(warm):
        eng.step()
    rows = []
    for _ in range(steps):
        spent.clear()
        t = time.perf_counter()
        with eng.runner.timing(_timer(spent)):
            eng.step()
        rows.append({"step": (time.perf_counter() - t) * 1e3,
                     **{k: v * 1e3 for k, v in spent.items()}})
    while eng.has_unfinished_requests():
        eng.step()
    return rows


def main(model=None, repeats: int = 2, out=print) -> dict:
    import numpy as np

    import inferlab as il
    eng = il.Engine(model, max_num_seqs=32, enable_prefix_caching=False)
    if not eng.runner.plan.fused_available:
        raise SystemExit(f"the fused forward needs a numba linear backend and numba attention; "
                         f"this engine has {eng.runner.linear_backend} / {eng.runner.backend}")
    rng = np.random.default_rng(0)
    spent = collections.defaultdict(float)

    def decode(batch):
        sp = il.SamplingParams(max_tokens=12, ignore_eos=True)
        return lambda: [eng.add_request(rng.integers(3, eng.vocab_size, 64).tolist(), sp)
                        for _ in range(batch)]

    def mixed():
        sp = il.SamplingParams(max_tokens=12, ignore_eos=True)
        for _ in range(31):
            eng.add_request(rng.integers(3, eng.vocab_size, 64).tolist(), sp)
        for _ in range(2):
            eng.step()
        eng.add_request(rng.integers(3, eng.vocab_size, 512).tolist(),
                        il.SamplingParams(max_tokens=2))

    cases = {"decode, batch 1": (decode(1), 3, 5), "decode, batch 8": (decode(8), 3, 5),
             "decode, batch 32": (decode(32), 3, 5),
             "mixed: 31 decoding + 512-token prompt": (mixed, 0, 1)}
    results = collections.defaultdict(list)
    out(f"{eng.model_name} fp32, linear backend {eng.runner.linear_backend}, load "
        f"{os.getloadavg()[0]:.2f}; median of {repeats} x the steps, fused and op by op alternated")
    for _ in range(repeats):
        for case, (add, warm, steps) in cases.items():
            for fused in (True, False):
                eng.runner.use_path("fused" if fused else "reference")
                results[case, fused] += _run_steps(eng, add, warm, steps, spent)
    eng.runner.use_path("fused")
    cols = ("step", "forward") + PARTS
    out("case | forward | " + " | ".join(cols) + " | rest of forward (ms)")
    table = {}
    for (case, fused), rows in results.items():
        med = {c: statistics.median(r.get(c, 0.0) for r in rows) for c in cols}
        med["rest"] = med["forward"] - sum(med[p] for p in PARTS)
        table[case, "fused" if fused else "op by op"] = med
        out(f"{case} | {'fused' if fused else 'op by op'} | "
            + " | ".join(f"{med[c]:.1f}" for c in cols) + f" | {med['rest']:.1f}")
    out(f"load after {os.getloadavg()[0]:.2f}")
    return table
