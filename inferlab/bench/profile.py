"""`inferlab bench profile`: where real engine steps spend their time, fused forward vs the
op-by-op reference, for decode at batch 1 / 8 / 32 and a mixed step (31 sequences decoding
while a 512-token prompt is prefilled).

The parts are timed inside real ``Engine.step()`` calls: for the length of the benchmark the
linear layers (the engine's own ``Linear``), the attention kernels and the fused forward's
numba kernels are wrapped with timers, and put back afterwards. numba code is invisible to
torch's profiler, hence timers rather than ``torch.profiler``. The two forwards alternate on
one engine (A B A B); each figure is a median.
"""
from __future__ import annotations

import collections
import contextlib
import os
import statistics
import time

PARTS = ("linear", "lm head", "attention", "rotary + kv write", "norms + adds", "silu")


@contextlib.contextmanager
def _timers(model, spent):
    """Time the engine's parts into ``spent`` (name -> seconds) while the block runs."""
    from inferlab import kernels
    from inferlab.model import fused_ops

    def timed(name, fn):
        def call(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - t
        return call

    patches = [(fused_ops, "rms_rows", "norms + adds"), (fused_ops, "add_rms_rows", "norms + adds"),
               (fused_ops, "rotary_write", "rotary + kv write"),
               (fused_ops, "silu_mul", "silu"),          # fused only (op by op: in "rest")
               (fused_ops, "attention_sdpa", "attention"),
               (kernels, "write_kv", "rotary + kv write"),
               (kernels, "paged_attention_decode", "attention"),
               (kernels, "paged_attention_prefill", "attention")]
    saved = [(mod, attr, getattr(mod, attr)) for mod, attr, _ in patches]
    lin, forward = model.linear, model.forward
    try:
        for mod, attr, name in patches:
            setattr(mod, attr, timed(name, getattr(mod, attr)))
        model.linear = lambda x, w, b=None: timed(
            "lm head" if w is model.lm_head else "linear", lin)(x, w, b)
        model.forward = timed("forward", forward)
        yield
    finally:
        for mod, attr, fn in saved:
            setattr(mod, attr, fn)
        model.linear = lin
        del model.forward                       # the class's own method again


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
    m = eng.runner.model
    if not m.runs_fused(eng.runner.backend):
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
    with _timers(m, spent):
        for _ in range(repeats):
            for case, (add, warm, steps) in cases.items():
                for fused in (True, False):
                    m.fusable = fused
                    results[case, fused] += _run_steps(eng, add, warm, steps, spent)
    m.fusable = True
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
