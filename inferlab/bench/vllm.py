"""inferlab beside vLLM: the same token ids through both engines, each in a process of its own.

    inferlab bench vllm     tok/s of inferlab and of vLLM's CPU build on the engine benchmark's
                            workload, and their ratio

vLLM lives in .venv-vllm (``make vllm``); only its worker process (bench/worker.py, run by
that venv's Python) imports it, so the lab's venv imports this module without vLLM. Both
engines get the same prompt token ids (no tokenizer can differ) and the same weights: vLLM
reads the weights cache's transformers directory, written from the GGUF that inferlab loads.

Timing: one long-lived worker per engine, started and warmed up (one untimed run of the same
workload) before any timing; then the parent sends "generate" to each in turn, A B A B, and
each worker times only its own ``generate`` call. The idle worker waits on a pipe; its CPU
time during the other's runs is measured and printed, so an idle engine that spins shows.
"""
from __future__ import annotations

import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ..connect.front.machine import cpu_list   # one way to name our CPUs for vLLM
from ..lab.protocol import cpu_busy_seconds, others_cpus, others_warning
from .common import Worker, WorkerFailed, tok_s, tree_cpu_seconds

REPO = Path(__file__).resolve().parents[2]

VllmUnavailable = WorkerFailed      # vLLM's venv is missing or its worker failed


def vllm_python() -> str:
    """The interpreter of vLLM's own venv (INFERLAB_VLLM_PYTHON, else .venv-vllm/bin/python)."""
    py = os.environ.get("INFERLAB_VLLM_PYTHON") or str(REPO / ".venv-vllm" / "bin" / "python")
    if not os.access(py, os.X_OK):
        raise VllmUnavailable(f"vLLM's venv is missing ({py}). Build it with `make vllm` (about "
                              "2 minutes: vLLM's CPU build in .venv-vllm, apart from the lab's "
                              "venv, which never imports vLLM)")
    return py


def vllm_env() -> dict:
    """vLLM's CPU worker on every CPU we have (by default it binds one and keeps one for its
    scheduler), a 1 GB KV cache, offline, no usage reports."""
    return {**os.environ, "VLLM_CPU_OMP_THREADS_BIND": cpu_list(), "VLLM_CPU_KVCACHE_SPACE": "1",
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1", "TOKENIZERS_PARALLELISM": "false"}


def start_vllm(model_dir: str, max_num_seqs: int = 256, dtype: str = "float32") -> Worker:
    return Worker("vllm", vllm_python(), ["--model", model_dir, "--max-num-seqs",
                                          str(max_num_seqs), "--dtype", dtype], vllm_env())


def model_dir_for_vllm(loaded, scratch: str) -> str:
    """A transformers directory of ``loaded``'s weights: its weights-cache entry, else a copy
    written into ``scratch`` (the cache is off or unwritable)."""
    if loaded.cache_path:
        return loaded.cache_path
    from inferlab.model.hf_dir import write_dir_atomically
    out = os.path.join(scratch, "model")
    write_dir_atomically(loaded.hf_model, loaded.tokenizer, out, {"source": loaded.name})
    return out


def bench_vllm(num_requests=32, prompt_len=64, new_tokens=64, repeats=3, out=print,
               freeze_idle: bool = True, dtype: str = "float32") -> dict:
    """The engine benchmark's workload through inferlab and through vLLM, A B A B, both in
    ``dtype`` on the same weights. With ``freeze_idle`` the engine not being timed is stopped
    (SIGSTOP) so each runs alone."""
    import numpy as np
    n_cpus = len(os.sched_getaffinity(0))
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="inferlab-vllm-") as scratch, \
            Worker("inferlab", sys.executable, ["--max-num-seqs", str(num_requests),
                                                "--export-to", scratch, "--dtype", dtype]) as ours:
        rng = np.random.default_rng(0)       # the prompts of `inferlab bench engine`
        prompts = [rng.integers(3, ours.hello["vocab_size"], prompt_len).tolist()
                   for _ in range(num_requests)]
        with start_vllm(ours.hello["model_dir"], num_requests, dtype) as theirs:
            workers = {"inferlab": ours, "vLLM": theirs}
            out(f"requests={num_requests} prompt={prompt_len} new={new_tokens} ignore_eos greedy "
                f"{dtype}, prefix caching off; inferlab {ours.hello['plan']}, torch threads "
                f"{ours.hello['threads']}, "
                f"vLLM VLLM_CPU_OMP_THREADS_BIND={cpu_list()}; {theirs.hello['version']}; "
                f"median of {repeats} after a warm-up, A B A B; the idle engine "
                f"{'frozen (SIGSTOP)' if freeze_idle else 'left running'} while the other runs")
            cmd = dict(cmd="generate", prompts=prompts, max_tokens=new_tokens, ignore_eos=True)
            for w in workers.values():
                w.request(**cmd)                         # warm-up, untimed
            runs = {k: [] for k in workers}
            idle_cpu = {k: 0.0 for k in workers}
            t_start, cpu_start = time.perf_counter(), _all_cpu(workers)
            busy0 = cpu_busy_seconds()
            for _ in range(repeats):
                for name, w in workers.items():
                    other = "vLLM" if name == "inferlab" else "inferlab"
                    c0 = tree_cpu_seconds(workers[other].proc.pid)
                    with workers[other].frozen() if freeze_idle else contextlib.nullcontext():
                        runs[name].append(w.request(**cmd))
                    idle_cpu[other] += tree_cpu_seconds(workers[other].proc.pid) - c0
            wall = time.perf_counter() - t_start
            own_s = _all_cpu(workers) - cpu_start
            others = others_cpus(busy0, cpu_busy_seconds(), own_s, wall)
            ours_cpu = own_s / wall
    load_after = os.getloadavg()
    speed = {k: statistics.median(tok_s(r) for r in v) for k, v in runs.items()}
    same = sum(a == b for a, b in zip(runs["inferlab"][0]["token_ids"],
                                      runs["vLLM"][0]["token_ids"]))
    for k, v in runs.items():
        rates = ", ".join(f"{tok_s(r):.1f}" for r in v)
        out(f"  {k:10s} {speed[k]:8.1f} tok/s   (runs: {rates}; idle while the other ran: "
            f"{idle_cpu[k]:.2f} CPU-s)")
    ratio = speed["inferlab"] / speed["vLLM"]
    out(f"  inferlab / vLLM = {ratio:.2f}x    same greedy tokens on {same} of {num_requests} "
        "requests")
    out(f"  load average before {load_before[0]:.2f}, after {load_after[0]:.2f} on {n_cpus} CPUs "
        f"(the workers kept {ours_cpu:.2f} CPUs busy, other processes "
        f"{'unknown' if others is None else f'{others:.2f}'})")
    warning = others_warning(others, n_cpus, "the engines'", "tok/s")
    if warning:
        out(warning)
    return {"requests": num_requests, "prompt_len": prompt_len, "new_tokens": new_tokens,
            "dtype": dtype,
            "tok_s": speed, "ratio": ratio, "same_tokens": same, "runs": {
        k: [tok_s(r) for r in v] for k, v in runs.items()}, "load_before": load_before,
        "load_after": load_after, "others_cpus": others, "idle_cpu_s": idle_cpu,
        "warning": warning}


def _all_cpu(workers: dict) -> float:
    return sum(tree_cpu_seconds(w.proc.pid) for w in workers.values())
