"""inferlab beside vLLM: the same token ids through both engines, each in a process of its own.

    inferlab bench vllm     tok/s of inferlab and of vLLM's CPU build on the engine benchmark's
                            workload, and their ratio
    python -m inferlab.bench.vllm worker --engine vllm|inferlab|transformers --model DIR
                            a worker: JSON commands in on stdin, one JSON reply per line out
                            (`inferlab bench engine --alone` uses the inferlab and
                            transformers workers)

vLLM lives in .venv-vllm (``make vllm``); this module imports it only inside the worker path,
so the lab's venv imports it without vLLM. Both engines get the same prompt token ids (no
tokenizer can differ) and the same weights: vLLM reads the weights cache's transformers
directory, written from the GGUF that inferlab loads.

Timing: one long-lived worker per engine, started and warmed up (one untimed run of the same
workload) before any timing; then the parent sends "generate" to each in turn, A B A B, and
each worker times only its own ``generate`` call. The idle worker waits on a pipe; its CPU
time during the other's runs is measured and printed, so an idle engine that spins shows.
"""
from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from inferlab.errors import InferlabError
from ..connect.server import cpu_list   # one way to name our CPUs for vLLM

REPO = Path(__file__).resolve().parents[2]
BUSY_SHARE = 0.5       # other processes' load above this share of the CPUs: warn
START_TIMEOUT_S = 300.0


class VllmUnavailable(InferlabError, RuntimeError):
    """vLLM's venv is missing or its worker failed; the message says what to do."""


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


def _tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and all its descendants (from /proc)."""
    parent, ticks = {}, {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parent[int(p)] = int(fields[1])
            ticks[int(p)] = int(fields[11]) + int(fields[12])
    tree, grew = {pid}, True
    while grew:
        more = {c for c, pp in parent.items() if pp in tree} - tree
        tree |= more
        grew = bool(more)
    return sum(ticks.get(p, 0) for p in tree) / os.sysconf("SC_CLK_TCK")


class Worker:
    """A worker process (``engine``: 'vllm', 'inferlab' or 'transformers'); ``hello`` is its
    first reply."""

    def __init__(self, engine: str, python: str, args: list[str], env: dict | None = None):
        self.engine = engine
        self.log = tempfile.NamedTemporaryFile("w+", prefix=f"inferlab-{engine}-", suffix=".log")
        self.proc = subprocess.Popen(
            [python, "-m", "inferlab.bench.vllm", "worker", "--engine", engine, *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, env=env, text=True,
            start_new_session=True)
        self.hello = self._reply(START_TIMEOUT_S)

    def _reply(self, timeout: float) -> dict:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.close()
            self.log.seek(0)
            tail = self.log.read()[-3000:]
            raise VllmUnavailable(f"the {self.engine} worker gave no answer (exit code "
                                  f"{self.proc.returncode}); its log ends with:\n{tail}")
        return json.loads(line)

    def request(self, timeout: float = 1800.0, **cmd) -> dict:
        try:
            self.proc.stdin.write(json.dumps(cmd) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass                    # it died: _reply reports its log
        return self._reply(timeout)

    @contextlib.contextmanager
    def frozen(self):
        """SIGSTOP the worker's whole process group (vLLM's engine core polls while idle, a
        few % of a core that the other engine's OpenMP threads feel), SIGCONT after."""
        os.killpg(self.proc.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.killpg(self.proc.pid, signal.SIGCONT)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write('{"cmd": "quit"}\n')
                self.proc.stdin.close()
                self.proc.wait(60)
            except (OSError, subprocess.TimeoutExpired):
                os.killpg(self.proc.pid, 9)
                self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def start_vllm(model_dir: str, max_num_seqs: int = 256) -> Worker:
    return Worker("vllm", vllm_python(), ["--model", model_dir, "--max-num-seqs",
                                          str(max_num_seqs)], vllm_env())


def model_dir_for_vllm(loaded, scratch: str) -> str:
    """A transformers directory of ``loaded``'s weights: its weights-cache entry, else a copy
    written into ``scratch`` (the cache is off or unwritable)."""
    if loaded.cache_path:
        return loaded.cache_path
    from inferlab.model.hf_dir import write_dir_atomically
    out = os.path.join(scratch, "model")
    write_dir_atomically(loaded.hf_model, loaded.tokenizer, out, {"source": loaded.name})
    return out


def _tok_s(reply: dict) -> float:
    return sum(len(t) for t in reply["token_ids"]) / reply["seconds"]


def bench_vllm(num_requests=32, prompt_len=64, new_tokens=64, repeats=3, out=print,
               freeze_idle: bool = True) -> dict:
    """The engine benchmark's workload through inferlab and through vLLM, A B A B. With
    ``freeze_idle`` the engine not being timed is stopped (SIGSTOP) so each runs alone."""
    import numpy as np
    n_cpus = len(os.sched_getaffinity(0))
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="inferlab-vllm-") as scratch, \
            Worker("inferlab", sys.executable, ["--max-num-seqs", str(num_requests),
                                                "--export-to", scratch]) as ours:
        rng = np.random.default_rng(0)       # the prompts of `inferlab bench engine`
        prompts = [rng.integers(3, ours.hello["vocab_size"], prompt_len).tolist()
                   for _ in range(num_requests)]
        with start_vllm(ours.hello["model_dir"], num_requests) as theirs:
            workers = {"inferlab": ours, "vLLM": theirs}
            out(f"requests={num_requests} prompt={prompt_len} new={new_tokens} ignore_eos greedy "
                f"fp32, prefix caching off; inferlab torch threads {ours.hello['threads']}, "
                f"vLLM VLLM_CPU_OMP_THREADS_BIND={cpu_list()}; {theirs.hello['version']}; "
                f"median of {repeats} after a warm-up, A B A B; the idle engine "
                f"{'frozen (SIGSTOP)' if freeze_idle else 'left running'} while the other runs")
            cmd = dict(cmd="generate", prompts=prompts, max_tokens=new_tokens, ignore_eos=True)
            for w in workers.values():
                w.request(**cmd)                         # warm-up, untimed
            runs = {k: [] for k in workers}
            idle_cpu = {k: 0.0 for k in workers}
            t_start, cpu_start = time.perf_counter(), _all_cpu(workers)
            for _ in range(repeats):
                for name, w in workers.items():
                    other = "vLLM" if name == "inferlab" else "inferlab"
                    c0 = _tree_cpu_seconds(workers[other].proc.pid)
                    with workers[other].frozen() if freeze_idle else contextlib.nullcontext():
                        runs[name].append(w.request(**cmd))
                    idle_cpu[other] += _tree_cpu_seconds(workers[other].proc.pid) - c0
            wall = time.perf_counter() - t_start
            ours_cpu = (_all_cpu(workers) - cpu_start) / wall
    load_after = os.getloadavg()
    tok_s = {k: statistics.median(_tok_s(r) for r in v) for k, v in runs.items()}
    same = sum(a == b for a, b in zip(runs["inferlab"][0]["token_ids"],
                                      runs["vLLM"][0]["token_ids"]))
    for k, v in runs.items():
        rates = ", ".join(f"{_tok_s(r):.1f}" for r in v)
        out(f"  {k:10s} {tok_s[k]:8.1f} tok/s   (runs: {rates}; idle while the other ran: "
            f"{idle_cpu[k]:.2f} CPU-s)")
    ratio = tok_s["inferlab"] / tok_s["vLLM"]
    out(f"  inferlab / vLLM = {ratio:.2f}x    same greedy tokens on {same} of {num_requests} "
        "requests")
    others = load_after[0] - ours_cpu
    out(f"  load average before {load_before[0]:.2f}, after {load_after[0]:.2f} on {n_cpus} CPUs "
        f"(the workers kept {ours_cpu:.2f} CPUs busy)")
    warning = None
    if max(load_before[0], others) > BUSY_SHARE * n_cpus:
        warning = (f"WARNING: busy machine (load {load_before[0]:.1f} before, about "
                   f"{others:.1f} from other processes during the runs, on {n_cpus} CPUs): "
                   "these tok/s are not trustworthy")
        out(warning)
    return {"tok_s": tok_s, "ratio": ratio, "same_tokens": same, "runs": {
        k: [_tok_s(r) for r in v] for k, v in runs.items()}, "load_before": load_before,
        "load_after": load_after, "idle_cpu_s": idle_cpu, "warning": warning}


def _all_cpu(workers: dict) -> float:
    return sum(_tree_cpu_seconds(w.proc.pid) for w in workers.values())


# ---- the worker side (runs in .venv-vllm for vLLM, in the lab's venv for inferlab) ----------

def _vllm_engine(model_dir: str, max_num_seqs: int):
    import vllm
    from vllm import LLM, SamplingParams
    llm = LLM(model=model_dir, dtype="float32", enforce_eager=True, max_model_len=1024, seed=0,
              enable_prefix_caching=False, max_num_seqs=max_num_seqs, disable_log_stats=True)

    def generate(prompts, max_tokens, ignore_eos):
        sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=ignore_eos)
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts], sp, use_tqdm=False)
        return [list(o.outputs[0].token_ids) for o in outs]
    return generate, {"version": f"vLLM {vllm.__version__}", "model_dir": model_dir}


def _inferlab_engine(model: str | None, max_num_seqs: int, export_to: str | None):
    import torch

    import inferlab as il
    eng = il.Engine(model, max_num_seqs=max_num_seqs, enable_prefix_caching=False)

    def generate(prompts, max_tokens, ignore_eos):
        sp = il.SamplingParams(max_tokens=max_tokens, ignore_eos=ignore_eos)
        return [list(o.token_ids) for o in eng.generate(prompts, sp, use_tqdm=False)]
    model_dir = model_dir_for_vllm(eng.loaded, export_to) if export_to else None
    return generate, {"version": f"inferlab {il.__version__}", "model_dir": model_dir,
                      "vocab_size": eng.vocab_size, "threads": torch.get_num_threads()}


def _transformers_engine(model: str | None):
    import torch
    import transformers

    from inferlab.model.loader import load_model

    from .engine import hf_greedy_config
    hf = load_model(model).hf_model

    def generate(prompts, max_tokens, ignore_eos):        # one batch; the prompts' lengths
        ids = torch.tensor(prompts)                       # are equal: nothing to pad
        gc = hf_greedy_config(max_tokens, ignore_eos)
        with torch.inference_mode():
            out = hf.generate(ids, attention_mask=torch.ones_like(ids), generation_config=gc)
        return out[:, ids.shape[1]:].tolist()
    return generate, {"version": f"transformers {transformers.__version__}",
                      "threads": torch.get_num_threads()}


def serve(argv: list[str]) -> int:
    """Answer JSON commands on stdin, one JSON line each on the real stdout. Everything else
    that writes to stdout (vLLM's logs, its child processes) goes to stderr instead."""
    import argparse
    p = argparse.ArgumentParser(prog="python -m inferlab.bench.vllm worker")
    p.add_argument("--engine", choices=["vllm", "inferlab", "transformers"], required=True)
    p.add_argument("--model", default=None)
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--export-to", default=None)
    a = p.parse_args(argv)
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    if a.engine == "vllm":
        generate, hello = _vllm_engine(a.model, a.max_num_seqs)
    elif a.engine == "transformers":
        generate, hello = _transformers_engine(a.model)
    else:
        generate, hello = _inferlab_engine(a.model, a.max_num_seqs, a.export_to)
    reply.write(json.dumps({"ready": True, **hello}) + "\n")
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd.get("cmd") == "quit":
            break
        t = time.perf_counter()
        ids = generate(cmd["prompts"], cmd["max_tokens"], cmd.get("ignore_eos", True))
        reply.write(json.dumps({"seconds": time.perf_counter() - t, "token_ids": ids}) + "\n")
    return 0


if __name__ == "__main__":       # vLLM's CPU build spawns processes: keep this guard
    if sys.argv[1:2] != ["worker"]:
        sys.exit("usage: python -m inferlab.bench.vllm worker --engine vllm|inferlab ...")
    sys.exit(serve(sys.argv[2:]))
