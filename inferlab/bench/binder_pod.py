"""The notebooks as a Binder pod runs them, reproduced here: memory, first view, Run All.

    python -m inferlab.bench.binder_pod                       # the tour, numba cache as it is
    python -m inferlab.bench.binder_pod --cold --out docs/results/binder-pod-amd.json
    python -m inferlab.bench.binder_pod --notebooks all       # the tour and every chapter

A Binder pod is one cgroup of ~2 GB (no swap) and a CPU share for everything in it: the
Jupyter server, the kernel, the headless Chrome kaleido starts for each view's PNG. Here
(inferlab/tools/pod.py) the same: JupyterLab starts inside a cgroup of ``--memory`` and
``--cpus`` under binder/start (its threads, OpenMP policy and smoke-size workloads), from the
interpreter given (``--python``: a venv binder/postBuild built, tests/test_binder.py), with an
empty numba cache with ``--cold`` (the image's cache built on another CPU). A real browser
outside the pod (an attendee's) opens each notebook in turn and runs all its cells. As on
Binder, no vLLM is installed (``INFERLAB_VLLM_VENV`` names none).

Per notebook: the pod's peak working set (what Binder's limit counts: usage less the file
cache that drops at once) and the largest RSS per kind of process, seconds from opening the
notebook to the first view drawn (a view whose plot has drawn once), seconds for Run All,
cells run, a cell's error, the console's errors. Times are reported, never asserted: this
machine is shared and noisy (tests assert memory and that every cell ran).
"""
from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import sys
import tempfile
import time

from inferlab.tools.jupyter import (CELLS_STATE, DRAWN, LabClient, browser_page, jupyterlab,
                                    make_lab_env, run_all)
from inferlab.tools.pod import Pod, gb

ROOT = pathlib.Path(__file__).resolve().parents[2]
START = ROOT / "binder" / "start"
TOUR = "00_tour.ipynb"
FIRST_VIEW = """() => [...document.querySelectorAll('.il-view')]
  .some(v => parseInt(v.dataset.draws || '0', 10) > 0)"""


def pod_env(python: str, cold_dir: str | None = None, base: dict | None = None) -> dict:
    """The server's environment in the pod: what ``make lab`` gives (not the tests'
    settings), offline, the interpreter's bin first on PATH (binder/start runs ``python``),
    and with ``cold_dir`` an empty numba cache."""
    env = dict(base if base is not None else make_lab_env(), HF_HUB_OFFLINE="1")
    for k in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):
        env.pop(k, None)
    env["PATH"] = f"{os.path.dirname(python)}:{env.get('PATH', '')}"
    if cold_dir is not None:
        env["NUMBA_CACHE_DIR"] = cold_dir
    return env


def _run_one(page, url: str, token: str, name: str, timeout_s: float, selectors: dict) -> dict:
    t0 = time.monotonic()
    run_all(page, url, token, f"nb/{name}")
    started = time.monotonic()
    first = None
    state: dict = {}
    while time.monotonic() - started < timeout_s:
        state = page.evaluate(CELLS_STATE)
        if first is None and page.evaluate(FIRST_VIEW):
            first = time.monotonic() - t0
        if state["errors"] or (state["cells"] and state["done"] == state["cells"]
                               and not state["busy"]):
            break
        page.wait_for_timeout(250)
    run_s = time.monotonic() - started
    drawn: dict = {}
    end = time.monotonic() + 120
    while selectors and time.monotonic() < end:       # every view drew at least once
        drawn = page.evaluate(DRAWN, selectors)
        if first is None and page.evaluate(FIRST_VIEW):
            first = time.monotonic() - t0
        if all(n > 0 for n in drawn.values()):
            break
        page.wait_for_timeout(500)
    return {"cells": state.get("cells", 0), "done": state.get("done", 0),
            "cell_errors": state.get("errors", []), "first_view_s": first and round(first, 1),
            "run_all_s": round(run_s, 1), "drawn": drawn}


def run(names=(TOUR,), python: str = sys.executable, cold: bool = False, memory="2G",
        cpus: float = 1.0, selectors=None, timeout_s: float = 900, env: dict | None = None,
        log=print) -> dict:
    """Each notebook of ``names`` (in notebooks/) in turn in one pod: {name: its numbers}
    plus "server_idle_bytes" (the pod with JupyterLab alone). ``selectors``: {name: {view
    kind: CSS selector}} of the views each must draw."""
    from playwright.sync_api import sync_playwright
    selectors = selectors or {}
    out: dict = {"memory_limit": memory, "cpus": cpus, "cold_numba_cache": cold,
                 "notebooks": {}}
    with tempfile.TemporaryDirectory(prefix="inferlab-pod-") as tmp:
        root = pathlib.Path(tmp)
        (root / "nb").mkdir()
        for name in names:
            shutil.copy(ROOT / "notebooks" / name, root / "nb" / name)
        cold_dir = str(root / "numba-cache") if cold else None
        server_env = pod_env(python, cold_dir, env)
        server_env.setdefault("INFERLAB_VLLM_VENV", str(root / "no-vllm-on-binder"))
        with Pod(memory, cpus) as pod, jupyterlab(
                root, env=server_env, python=python,
                wrap=["bash", str(START)], preexec_fn=pod.enter) as (url, token):
            time.sleep(2)
            out["server_idle_bytes"] = pod.working_set()
            client = LabClient(url, token)
            with sync_playwright() as p:
                for name in names:
                    pod.reset()
                    errors: list[str] = []
                    browser, page = browser_page(p, errors)
                    try:
                        res = _run_one(page, url, token, name, timeout_s,
                                       selectors.get(name, {}))
                    except Exception as e:  # noqa: BLE001 - a notebook that could not run
                        res = {"cells": -1, "done": 0, "drawn": {},
                               "cell_errors": [f"{type(e).__name__}: {e}"]}
                    finally:
                        browser.close()
                    res.update(pod.report(), console_errors=errors)
                    client.shutdown_kernels()
                    out["notebooks"][name] = res
                    log(line(name, res))
    return out


def line(name: str, r: dict) -> str:
    procs = ", ".join(f"{k} {gb(v)}" for k, v in r.get("by_process", {}).items())
    return (f"{name}: {r.get('done')}/{r.get('cells')} cells; pod peak {gb(r.get('peak_bytes'))} "
            f"({procs}); first view {r.get('first_view_s')} s; Run All {r.get('run_all_s')} s; "
            f"OOM kills {r.get('oom_kills')}; console errors {len(r.get('console_errors', []))}")


# before and after issue 43 (the whole pod, the tour): the same notebook, three ways
SCENARIOS = {
    "before: PNGs through Chrome, kernels for the image's CPU (a miss here)":
        (dict(INFERLAB_STATIC_IMAGES="1", INFERLAB_NATIVE_KERNELS="1"), True),
    "now: no Chrome, the image's x86-64-v3 kernels": ({}, False),
    "now, a host the image's kernels do not fit (empty cache)": ({}, True),
}


def image_cache(python: str, env: dict, where: str) -> str:
    """A numba cache as binder/postBuild leaves it in the image (binder/kernels.sh, then
    ``inferlab cache warm``), in ``where``."""
    import subprocess
    env = dict(pod_env(python, None, env), NUMBA_CACHE_DIR=where)
    subprocess.run(["bash", "-c", f". {START.parent / 'kernels.sh'} && {python} -m inferlab.cli "
                    "cache warm"], env=env, check=True, capture_output=True, text=True)
    return where


def scenarios(names=(TOUR,), python: str = sys.executable, log=print, **kw) -> dict:
    """``SCENARIOS``, one pod each, in order: {scenario: run(...)}."""
    out = {}
    with tempfile.TemporaryDirectory(prefix="inferlab-image-") as tmp:
        base = dict(make_lab_env(), NUMBA_CACHE_DIR=image_cache(python, make_lab_env(), tmp))
        for what, (extra, cold) in SCENARIOS.items():
            log(f"--- {what}")
            out[what] = run(names, python=python, cold=cold, env=dict(base, **extra), log=log,
                            **kw)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m inferlab.bench.binder_pod", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--notebooks", nargs="*", default=[TOUR],
                    help="notebook names in notebooks/, or 'all' (default: the tour)")
    ap.add_argument("--python", default=sys.executable, help="the pod's interpreter")
    ap.add_argument("--cold", action="store_true", help="start with an empty numba cache")
    ap.add_argument("--scenarios", action="store_true",
                    help="before and after: " + "; ".join(SCENARIOS))
    ap.add_argument("--memory", default="2G")
    ap.add_argument("--cpus", type=float, default=1.0)
    ap.add_argument("--out", help="write a result file (docs/results/binder-pod-<cpu>.json)")
    a = ap.parse_args(argv)
    names = a.notebooks
    if names == ["all"]:
        names = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    names = [n if n.endswith(".ipynb") else n + ".ipynb" for n in names]
    kw = dict(python=a.python, memory=a.memory, cpus=a.cpus)
    res = (scenarios(names, **kw) if a.scenarios else run(names, cold=a.cold, **kw))
    from inferlab.bench.common import save_result
    save_result("inferlab.bench.binder_pod", argv, res, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
