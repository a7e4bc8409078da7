"""What the benchmarks share: their tables, timing and tok/s arithmetic, transformers' greedy
settings, and the worker processes that run one engine each (``inferlab bench vllm``,
``inferlab bench engine --alone``; the worker side is bench/worker.py).

Every bench module imports its shared pieces from here, and this module imports no other
bench module: no loops among the benchmarks, no private names borrowed across them.
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

from inferlab.errors import InferlabError
from inferlab.lab.protocol import cpu_name, result_meta, write_result  # noqa: F401 (the API)

START_TIMEOUT_S = 300.0


def save_result(prog: str, argv, res: dict, out: str | None) -> None:
    """A bench module's ``--out``: the result file, with the command line that made it."""
    if out:
        args = argv if argv is not None else sys.argv[1:]
        print("wrote", write_result(out, f"python -m {prog} " + " ".join(args), res))


@contextlib.contextmanager
def busy_neighbour(on: bool):
    """One process spinning on one core for the duration (nothing when ``on`` is false): what
    a browser drawing or another job does to a 2-core machine."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if on else None
    try:
        yield
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()


def table(out, header, rows) -> None:
    """Print ``rows`` under ``header`` with ``out``: the first column left-aligned, the
    others right-aligned, a dashed line under the header."""
    body = [[str(c) for c in r] for r in rows]
    widths = [max(len(x[j]) for x in [header, *body]) for j in range(len(header))]
    fmt = lambda line: "  ".join(c.ljust(w) if j == 0 else c.rjust(w)
                                 for j, (c, w) in enumerate(zip(line, widths)))
    out(fmt(header))
    out("  ".join("-" * w for w in widths))
    for r in body:
        out(fmt(r))


def median_time(fn, repeats: int) -> float:
    """Median wall seconds of ``repeats`` calls of ``fn``."""
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def tok_s(reply: dict) -> float:
    """Generated tokens per second of a worker's "generate" reply."""
    return sum(len(t) for t in reply["token_ids"]) / reply["seconds"]


def hf_greedy_config(new_tokens: int, ignore_eos: bool = True):
    """transformers' GenerationConfig for the benchmarks' greedy runs (exactly ``new_tokens``
    when ``ignore_eos``), shared by ``bench_engine`` and the transformers worker."""
    from transformers import GenerationConfig
    return GenerationConfig(max_new_tokens=new_tokens,
                            min_new_tokens=new_tokens if ignore_eos else 0, do_sample=False,
                            eos_token_id=None, pad_token_id=0)


# ---- worker processes (the parent's side) -------------------------------------------------

class WorkerFailed(InferlabError, RuntimeError):
    """A worker's venv is missing or the worker gave no answer; the message says what to do
    (bench/vllm.py calls it ``VllmUnavailable``)."""


def tree_cpu_seconds(pid: int) -> float:
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
    """A worker process (``engine``: 'vllm', 'inferlab' or 'transformers'; bench/worker.py)
    run by ``python``; JSON commands in, one JSON reply per line out. ``hello`` is its first
    reply."""

    def __init__(self, engine: str, python: str, args: list[str], env: dict | None = None):
        self.engine = engine
        self.log = tempfile.NamedTemporaryFile("w+", prefix=f"inferlab-{engine}-", suffix=".log")
        self.proc = subprocess.Popen(
            [python, "-m", "inferlab.bench.worker", "--engine", engine, *args],
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
            raise WorkerFailed(f"the {self.engine} worker gave no answer (exit code "
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
