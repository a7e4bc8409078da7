"""kernels/gpu_check.sh, the one script a lent GPU runs, dry-run here in numba's CUDA
simulator at tiny shapes: every step it will take on the GPU, so that a move that breaks it
fails in CI and not in the rare GPU session."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.full("tests/test_kernels_cudasim.py::test_cuda_kernels_in_simulator")
def test_gpu_check_dry_run_takes_every_step():
    env = {**os.environ, "PYTHON": sys.executable, "INFERLAB_TIER": "all"}   # its pytest runs
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    proc = subprocess.run(["bash", "kernels/gpu_check.sh", "--dry-run"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    for step in ("== environment", "== 1. kernel tests", "== 2. bench_cuda",
                 "== 3. engine steps of an 8B-shaped model", "== 4. engine tokens/s",
                 "== gpu_check exit status: 0"):
        assert step in out, (step, out[-3000:])
    assert "passed" in out and " failed" not in out
    assert out.count(" ok") >= 3 and "FAIL" not in out          # correctness at tiny shapes
    for dtype in ("float32", "float16", "bfloat16"):            # each kernel type checked, timed
        assert len(re.findall(rf"\b{dtype} +max abs err .* ok", out)) == 2, dtype
        assert re.search(rf"-> {dtype} +\(in place\) ok", out), dtype
        assert f"| {dtype} |" in out, dtype
    assert "inferlab engine" in out and "tok/s" in out
    steps = [line for line in out.splitlines() if line.startswith(("| prefill", "| decode"))]
    assert len(steps) == 3 and "inferlab Engine.step()" in out, steps   # 8B steps, priced
    assert all(float(line.split("|")[c]) > 0 for line in steps for c in (2, 3, 4)), steps


def test_gpu_probe_dry_run_writes_each_answer(tmp_path):
    """kernels/gpu_probe.sh in numba's CUDA simulator: every step runs (the graph step says
    the simulator has no graphs) and each answer is in the output folder."""
    env = {**os.environ, "PYTHON": sys.executable}
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    proc = subprocess.run(["bash", "kernels/gpu_probe.sh", "--dry-run", str(tmp_path)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    import json
    launch = json.loads((tmp_path / "launch.json").read_text())
    assert "numba_array_us" in launch and launch["simulated"] is True, launch
    assert "simulator" in json.loads((tmp_path / "graph.json").read_text())["skipped"]
    load = json.loads((tmp_path / "bf16_load.json").read_text())
    assert load["sums_agree"] is True and len(load["rows"]) == 3, load      # the sums agree
    assert (tmp_path / "env.txt").read_text().count("numba") >= 1
    assert [line.split(":")[0] for line in (tmp_path / "probe.md").read_text().splitlines()] \
        == ["launch", "graph", "bf16_load"]
