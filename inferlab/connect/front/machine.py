"""What starting a vLLM server needs from this machine: vLLM's venv (``make vllm``), our CPUs
in vLLM's form, a free port, and the default model as a transformers directory vLLM loads.
Each says what is missing in a ``VllmServerError``.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from ...errors import InferlabError

REPO = Path(__file__).resolve().parents[3]
ENV_VENV = "INFERLAB_VLLM_VENV"


class VllmServerError(InferlabError, RuntimeError):
    """The vLLM server could not start, or stopped; the message ends with its log tail."""


def vllm_venv() -> Path:
    """$INFERLAB_VLLM_VENV, else ./.venv-vllm, else the repository's .venv-vllm."""
    env = os.environ.get(ENV_VENV)
    if env:
        return Path(env).expanduser().resolve()
    here = Path(".venv-vllm").resolve()
    return here if here.exists() else REPO / ".venv-vllm"


def vllm_python(venv: Path | None = None) -> Path:
    py = (venv or vllm_venv()) / "bin" / "python"
    if not os.access(py, os.X_OK):
        raise VllmServerError(f"vLLM's venv is missing ({py}). Build it with `make vllm` (vLLM's "
                              f"CPU build in .venv-vllm) or point {ENV_VENV} at one")
    return py


def cpu_list() -> str:
    """Our CPUs in VLLM_CPU_OMP_THREADS_BIND form ('0-1', '0,2-3')."""
    ids = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        list(range(os.cpu_count() or 1))
    runs, start = [], ids[0]
    for a, b in zip(ids, ids[1:] + [None]):
        if b != a + 1:
            runs.append(f"{start}-{a}" if a > start else f"{a}")
            start = b
    return ",".join(runs)


def check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as uvicorn: TIME_WAIT is free
        try:
            s.bind((host, port))
        except OSError as e:
            raise VllmServerError(f"port {port} on {host} is already in use ({e.strerror}): "
                                  "another server is listening there. Stop it, or pick another "
                                  "port (--port N, or port=None for a free one)") from None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def healthy(url: str, timeout: float = 2.0) -> bool:
    """Whether an OpenAI-style server at ``url`` answers ``/health`` with 200."""
    try:
        with urllib.request.urlopen(url + "/health", timeout=timeout) as r:
            return r.status == 200
    except (OSError, ValueError):
        return False


def wait_healthy(proc, url: str, name: str, log_tail, error: type, timeout: float) -> None:
    """Wait until the server process ``proc`` answers at ``url``; if it exits first or the
    time runs out, raise ``error`` with the end of its log (``log_tail()``)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        code = proc.poll()
        if code is not None:
            raise error(f"{name} exited with code {code} before it was ready ({url}); its log "
                        f"ends:\n{log_tail()}")
        if healthy(url):
            return
        time.sleep(0.5)
    raise error(f"{name} did not become ready within {timeout:.0f} s at {url}; its log "
                f"ends:\n{log_tail()}")


def default_model_dir(out=print) -> str:
    """The default model (SmolLM2-135M-Instruct, fp32) as a transformers directory vLLM loads:
    written once by ``inferlab export-hf`` under the cache dir ($INFERLAB_CACHE_DIR, else
    $XDG_CACHE_HOME/inferlab, else ~/.cache/inferlab), then reused."""
    root = os.environ.get("INFERLAB_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "inferlab")
    d = os.path.join(root, "vllm-models", "smollm2-135m-instruct-float32")
    if os.path.isfile(os.path.join(d, "config.json")):
        return d
    out(f"writing the default model for vLLM to {d} (once; ~30 s) ...")
    os.makedirs(os.path.dirname(d), exist_ok=True)
    r = subprocess.run([sys.executable, "-m", "inferlab.cli", "export-hf", d],
                       capture_output=True, text=True)
    if r.returncode != 0 or not os.path.isfile(os.path.join(d, "config.json")):
        tail = "\n".join((r.stdout + r.stderr).splitlines()[-15:])
        raise VllmServerError(f"could not write the model for vLLM to {d} (inferlab export-hf "
                              f"exited {r.returncode}):\n{tail}")
    return d
