"""The engine's own threading policy, in force before torch's and numba's OpenMP start.

OpenMP's worker threads spin while they wait for work (libgomp's default). Alone on the
machine that saves a few microseconds a step; beside a browser, a notebook's drawing or any
other busy process on a 2-core machine the spinning threads starve everyone, the engine
included: 5-30x slower steps (docs/results/omp-wait-amd.txt). So ``import inferlab`` asks
OpenMP to sleep while it waits (``OMP_WAIT_POLICY=PASSIVE``) -- in ``make lab``, a user's own
JupyterLab, VS Code, a script, Binder and the tests alike.

OpenMP reads the setting once, when the library loads (``import torch``): ``apply()`` runs
from ``inferlab/__init__.py``, before anything imports torch. An explicit setting wins: a
user's own ``OMP_WAIT_POLICY`` (or ``GOMP_SPINCOUNT``) in the environment is left as it is.
Where torch was imported before inferlab, the policy comes too late; ``state()`` says so
and the first ``Engine()`` warns once.
"""
from __future__ import annotations

import os
import sys
import warnings

POLICY = {"OMP_WAIT_POLICY": "PASSIVE"}
USER_KNOBS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")

_state: dict = {}
_warned = False


def apply() -> dict:
    """Set the policy in this process's environment unless the user set one or OpenMP has
    already loaded; returns ``state()``. Idempotent."""
    if _state:
        return state()
    user = {k: os.environ[k] for k in USER_KNOBS if k in os.environ}
    late = "torch" in sys.modules
    if user:
        source = "user"
    elif late:
        source = "too late"
    else:
        os.environ.update(POLICY)
        source = "inferlab"
    _state.update(source=source, user=user, torch_first=late)
    return state()


def state() -> dict:
    """{'source': 'inferlab' | 'user' | 'too late', 'wait_policy': what OpenMP read, ...}."""
    s = dict(_state) or {"source": "not applied", "user": {}, "torch_first": "torch" in sys.modules}
    s["wait_policy"] = os.environ.get("OMP_WAIT_POLICY", "default (spin)")
    return s


def for_engine(cpus: int) -> None:
    """What an ``Engine()`` asks of the threads as it starts: a warning, once per process,
    where the policy came too late (torch loaded first); no more torch threads than the
    ``cpus`` this process may use (a container, Binder, reports fewer than the machine's)."""
    global _warned
    import torch
    text = late_warning()
    if text and not _warned:
        _warned = True
        warnings.warn(text, RuntimeWarning, stacklevel=3)
    if torch.get_num_threads() > cpus:
        torch.set_num_threads(cpus)


def late_warning() -> str | None:
    """The sentence the first Engine() warns with when the policy came too late."""
    if state()["source"] != "too late":
        return None
    return ("torch was imported before inferlab, so OpenMP started with its default wait "
            "policy: its threads spin while they wait, and beside a browser or any other busy "
            "process on this machine that makes every engine step several times slower. "
            "Import inferlab first (before torch), or set OMP_WAIT_POLICY=PASSIVE in the "
            "environment before Python starts.")
