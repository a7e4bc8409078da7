"""Chapter 15, third part: where a server's memory goes.

Measured in a fresh Python process of its own (so no other engine of the notebook is
counted): its resident memory after the imports, after the engine is built (idle, the KV
cache already reserved, as a serving engine does), and at its peak under a batch of
requests (the kernel's high-water mark, reset just before). The engine's own accounting
splits it: the bytes of its weight tensors (with the copies packed for the GEMM), the bytes
of its KV cache tensors; the peak under load minus idle is activations and workspace; the
rest of idle is everything else (the Python runtime, torch, the tokenizer, compiled
kernels). Beside it, the same split projected for an 8B model on an 80 GB GPU.

    python -m inferlab.lab.chapters._ch15_memory '{"model": null, "num_blocks": 512, ...}'
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from ..verdicts import FAILS, HOLDS, HOLDS_SMALLER, Verdict, pct

PARTS = ("weights", "KV cache", "activations and workspace", "everything else")


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _high_water() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _reset_high_water() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def weight_bytes(weights, linear=None) -> tuple[int, int]:
    """(bytes of the weight tensors, bytes of the copies packed for a linear backend),
    each storage counted once (a tied LM head is the embedding). With ``linear`` (an engine's
    ``model.linear``) only the copies that backend uses: the store is shared by every engine
    on the same weights, and may hold another backend's copies."""
    seen, plain = set(), 0
    tensors = [weights.embed, weights.norm, weights.lm_head, weights.inv_freq]
    for layer in weights.layers:
        tensors += [getattr(layer, n) for n in ("input_norm", "wqkv", "bqkv", "wo",
                                                "post_norm", "w_gate_up", "w_down")]
    for t in tensors:
        if t is not None and t.untyped_storage().data_ptr() not in seen:
            seen.add(t.untyped_storage().data_ptr())
            plain += t.untyped_storage().nbytes()
    packed = 0
    for v in (weights.packed.values() if linear is None else linear.packed_copies()):
        for t in (v if isinstance(v, (list, tuple)) else [v]):
            packed += _nbytes(t)
    return plain, packed


def _nbytes(t) -> int:
    """A packed weight's bytes: its storage's, or for oneDNN's opaque tensors (bf16 packed
    for its GEMM: no storage to ask) its elements'; numba's packed arrays know theirs."""
    import torch
    if not isinstance(t, torch.Tensor):
        return getattr(t, "nbytes", 0)
    try:
        return t.untyped_storage().nbytes()
    except (NotImplementedError, RuntimeError):
        return t.numel() * t.element_size()


def worker(args: dict) -> dict:
    """Runs in the child process: build the engine, read its memory idle and under load."""
    import numba  # noqa: F401 - the libraries an engine loads, counted before it
    import torch  # noqa: F401
    import transformers  # noqa: F401

    import inferlab as il
    base = _rss()
    eng = il.Engine(args["model"], num_blocks=args["num_blocks"], seed=0,
                    max_num_seqs=args["requests"])
    plain, packed = weight_bytes(eng.loaded.weights, eng.runner.model.linear)
    # the whole KV budget resident, as a serving engine reserves it on a GPU: on a CPU the
    # engine's KV pages become resident only as blocks are written (model/runner.kv_zeros)
    eng.runner.k_cache.zero_()
    eng.runner.v_cache.zero_()
    kv = eng.runner.k_cache.nbytes + eng.runner.v_cache.nbytes
    idle = _rss()
    reset = _reset_high_water()
    sampled = [idle]
    unsubscribe = eng.subscribe(lambda rec: sampled.append(_rss()))
    import numpy as np
    rng = np.random.default_rng(0)
    prompts = [rng.integers(3, 49152, size=args["prompt_len"]).tolist()
               for _ in range(args["requests"])]
    eng.generate(prompts, il.SamplingParams(max_tokens=args["decode"], ignore_eos=True),
                 use_tqdm=False)
    unsubscribe()
    hwm = _high_water() if reset else None
    st = eng.stats()
    return {"model": eng.model_name, "runtime": base, "idle": idle,
            "peak": max([hwm or 0, *sampled]), "peak_from": "kernel high-water mark (VmHWM)"
            if hwm else "resident memory sampled at every step's end",
            "weights": plain, "weights_packed": packed, "kv": kv,
            "kv_peak_used": st.peak_kv_blocks_used * kv // eng.num_blocks,
            "num_blocks": eng.num_blocks, "linear_backend": eng.runner.linear_backend,
            "load": {k: args[k] for k in ("requests", "prompt_len", "decode")}}


def measure_memory(model, num_blocks: int, requests: int, prompt_len: int, decode: int) -> dict:
    """The breakdown, measured in a child process (``worker``)."""
    args = dict(model=model, num_blocks=num_blocks, requests=requests, prompt_len=prompt_len,
                decode=decode)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    out = subprocess.run([sys.executable, "-m", __name__, json.dumps(args)], env=env,
                         capture_output=True, text=True, timeout=600)
    if out.returncode:
        raise RuntimeError(f"memory worker failed ({out.returncode}): {out.stderr[-2000:]}")
    r = json.loads(out.stdout.strip().splitlines()[-1])
    weights = r["weights"] + r["weights_packed"]
    act = max(r["peak"] - r["idle"], 0)
    rest = r["idle"] - weights - r["kv"]
    r["parts_idle"] = dict(zip(PARTS, (weights, r["kv"], 0, rest)))
    r["parts_load"] = dict(zip(PARTS, (weights, r["kv"], act, rest)))
    r["projection"] = project_8b()
    return r


def project_8b(gpu_bytes: float = 80e9, utilization: float = 0.9, batched_tokens: int = 8192,
               max_seqs: int = 256, other: float = 1.5e9) -> dict:
    """The same parts for llama-3-8b in bf16 on one 80 GB GPU, as a vLLM-style engine lays it
    out: the weights; activations and workspace for one step of ``batched_tokens`` tokens
    (the widest intermediate, q/k/v and the output, bf16, plus fp32 logits for ``max_seqs``
    sequences); ``other`` for the CUDA context, cuBLAS workspace and graphs (an assumed
    1.5 GB); the KV cache gets what is left of ``utilization`` of the GPU, the rest stays
    free. Arithmetic from the published shape, not a measurement."""
    from inferlab.core.shapes import kv_bytes_per_token, model_shape
    from inferlab.core.shapes import weight_bytes as shape_weight_bytes
    s = model_shape("llama-3-8b")
    weights = shape_weight_bytes(s, 2)
    width = 2 * s.intermediate_size + s.hidden_size * 2 + (s.num_heads + 2 * s.num_kv_heads) \
        * s.head_dim
    act = batched_tokens * width * 2 + max_seqs * s.vocab_size * 4
    kv = gpu_bytes * utilization - weights - act - other
    per = kv_bytes_per_token(s, 2)
    return {"model": s.name, "gpu_bytes": gpu_bytes, "utilization": utilization,
            "parts": dict(zip(PARTS, (weights, kv, act, other))),
            "free": gpu_bytes * (1 - utilization), "kv_tokens": int(kv // per),
            "kv_bytes_per_token": per, "batched_tokens": batched_tokens}


def memory_lines(m: dict) -> list[str]:
    mb = lambda b: f"{b / 1e6:,.0f} MB"
    li, ll = m["parts_idle"], m["parts_load"]
    lines = [f"memory of one engine process ({m['model']}, {m['num_blocks']} KV blocks; "
             f"measured in a process of its own): {mb(m['idle'])} resident idle, "
             f"{mb(m['peak'])} at the peak under {m['load']['requests']} requests of "
             f"{m['load']['prompt_len']} prompt tokens ({m['peak_from']})",
             f"  weights {mb(li['weights'])} ({mb(m['weights'])} of tensors + "
             f"{mb(m['weights_packed'])} packed for the {m['linear_backend']} GEMM), KV cache "
             f"{mb(li['KV cache'])} reserved (the load used {mb(m['kv_peak_used'])} of it), "
             f"activations and workspace {mb(ll['activations and workspace'])} under load, "
             f"everything else {mb(li['everything else'])} (of it {mb(m['runtime'])} "
             "the Python runtime and libraries before the engine)"]
    p = m["projection"]
    gb = lambda b: f"{b / 1e9:.1f} GB"
    lines.append(f"  projection, {p['model']} bf16 on an 80 GB GPU (90% given to the engine): "
                 + ", ".join(f"{k} {gb(v)}" for k, v in p["parts"].items())
                 + f", left free {gb(p['free'])}; the KV cache holds {p['kv_tokens']:,} tokens")
    return lines


def judge_memory(d: dict) -> Verdict:
    """Weights and KV cache against the process's peak under load: most of it (half or more)
    holds; a third or more, smaller; less, not here."""
    m = d["memory"]
    parts = m["parts_load"]
    total = sum(parts.values())
    share = (parts["weights"] + parts["KV cache"]) / total
    v = HOLDS if share >= 0.5 else HOLDS_SMALLER if share >= 1 / 3 else FAILS
    p = m["projection"]
    pp, gpu = p["parts"], p["gpu_bytes"]
    mb = lambda b: f"{b / 1e6:,.0f} MB"
    return Verdict(v, f"one engine process ({m['model']}) peaked at {mb(total)} resident under "
                   f"{m['load']['requests']} requests: weights {mb(parts['weights'])}, KV cache "
                   f"{mb(parts['KV cache'])} (reserved at start), together {pct(share)}; "
                   f"activations and workspace {mb(parts['activations and workspace'])}, "
                   f"everything else {mb(parts['everything else'])} (resident memory and the "
                   f"engine's tensor sizes, measured in a process of its own); projection for "
                   f"{p['model']} bf16 on an 80 GB GPU: weights {pct(pp['weights'] / gpu)}, KV "
                   f"cache {pct(pp['KV cache'] / gpu)}, activations "
                   f"{pct(pp['activations and workspace'] / gpu)}, the rest "
                   f"{pct(pp['everything else'] / gpu)} and {pct(p['free'] / gpu)} left free",
                   measured=f"weights + KV {pct(share)} of {mb(total)}",
                   points=(*((k, v_ / 1e6) for k, v_ in parts.items()),
                           ("peak under load", total / 1e6, "total")),
                   unit="MB resident at the peak", clock="resident memory (bytes), not a clock",
                   chart="stack")


if __name__ == "__main__":
    print(json.dumps(worker(json.loads(sys.argv[1]))))
