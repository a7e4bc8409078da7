"""The pieces of Binder's pod, each checked on its own (the whole pod: tests/test_binder.py):
a cgroup that enforces its limits and is watched (inferlab/tools/pod.py), the engine reading
its own cgroup's limits (inferlab/model/resources.py), and binder/kernels.sh naming one CPU
level for numba so the image's kernel cache is found on any host."""
import os
import subprocess
import sys

import pytest

from inferlab.tools import pod

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAGS = "flags\t\t: fpu sse sse2 ssse3 sse4_1 sse4_2 popcnt {extra}\n"
V3 = "avx avx2 bmi1 bmi2 f16c fma abm movbe xsave"


def _kernels_env(**extra) -> dict:
    """binder/kernels.sh's exports, sourced in a clean shell with ``extra`` set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_CPU")}
    env.update(extra)
    out = subprocess.run(["bash", "-c", f". {ROOT}/binder/kernels.sh && env"], env=env,
                         capture_output=True, text=True, check=True).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if line.startswith("NUMBA_CPU"))


def test_kernels_sh_names_one_cpu_level_wherever_it_runs(tmp_path):
    """numba's cache key (its magic tuple) under kernels.sh holds no trace of the host: the
    same on every CPU with x86-64-v3's features, so the image's cache is found."""
    info = tmp_path / "cpuinfo"
    info.write_text(FLAGS.format(extra=V3 + " avx512f amx_tile"))
    got = _kernels_env(INFERLAB_CPUINFO=str(info))
    assert got["NUMBA_CPU_NAME"] == "x86-64-v3"
    magic = subprocess.run(
        [sys.executable, "-c", "from numba.core.registry import cpu_target as t; "
         "print(repr(t.target_context.codegen().magic_tuple()))"],
        env=dict(os.environ, **got), capture_output=True, text=True, check=True).stdout
    assert eval(magic)[1:] == ("x86-64-v3", got["NUMBA_CPU_FEATURES"])   # noqa: S307


def test_kernels_sh_leaves_a_cpu_without_avx2_and_a_native_request_alone(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(FLAGS.format(extra=V3.replace("avx2 ", "")))
    assert _kernels_env(INFERLAB_CPUINFO=str(info)) == {}
    info.write_text(FLAGS.format(extra=V3))
    assert _kernels_env(INFERLAB_CPUINFO=str(info), INFERLAB_NATIVE_KERNELS="1") == {}
    assert _kernels_env(INFERLAB_CPUINFO=str(info))["NUMBA_CPU_NAME"] == "x86-64-v3"


PROBE = ("from inferlab.model import resources as r; import numpy as np; "
         "print(r.cpu_count(), r.available_memory()); import sys; sys.stdout.flush(); "
         "a = np.ones(int(sys.argv[1]) // 8); print(a.sum()); import time; time.sleep(1.5)")


@pytest.mark.skipif(pod.unavailable() is not None, reason=str(pod.unavailable()))
def test_a_pod_enforces_its_limits_and_the_engine_reads_them():
    """Inside a pod of 256 MB and one CPU: the engine's resources see one CPU and less than
    256 MB of room; 100 MB fits and is seen in the pod's peak; 400 MB is killed by the pod's
    memory limit, and the report says so."""
    with pod.Pod("256M", 1) as p:
        ok = subprocess.run([sys.executable, "-c", PROBE, str(100 << 20)], capture_output=True,
                            text=True, preexec_fn=p.enter)
        assert ok.returncode == 0, ok.stderr[-2000:]
        cpus, room = ok.stdout.split()[:2]
        assert int(cpus) == 1 and 0 < int(room) < 256 << 20
        assert p.report()["peak_bytes"] > 100 << 20        # watched while it held them
        killed = subprocess.run([sys.executable, "-c", PROBE, str(400 << 20)],
                                capture_output=True, text=True, preexec_fn=p.enter)
        assert killed.returncode == -9
        assert p.report()["oom_kills"] >= 1
    assert not os.path.exists(p.dirs[0])                  # the cgroup is gone afterwards
