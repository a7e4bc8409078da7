"""The engine's threading policy (inferlab/threads.py) is in force however it is run: in
a fresh process with nothing set (what `make lab`, a user's JupyterLab or a script gives it),
in a Jupyter kernel started the way `make lab` starts one, and never over the user's own
setting. What OpenMP itself does is read from libgomp's own report (OMP_DISPLAY_ENV=VERBOSE):
how many times a waiting thread spins before it sleeps (GOMP_SPINCOUNT; 0 under the passive
policy, 300,000 by default: libgomp reports OMP_WAIT_POLICY as 'PASSIVE' either way)."""
import os
import subprocess
import sys

import pytest

from inferlab.threads import USER_KNOBS

KNOBS = (*USER_KNOBS, "OMP_DISPLAY_ENV")
# OMP_DISPLAY_ENV makes libgomp print the settings it read, once, when torch loads it
PROBE = ("import inferlab, torch\n"
         "from inferlab import threads\n"
         "torch.ones(256, 256) @ torch.ones(256, 256)\n"
         "print('source', threads.state()['source'])\n")


def _clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in KNOBS}
    return {**env, "OMP_DISPLAY_ENV": "VERBOSE", **extra}


def _run(code: str, **extra) -> str:
    proc = subprocess.run([sys.executable, "-c", code], env=_clean_env(**extra),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def _spins(out: str) -> int:
    """How many times libgomp lets a waiting thread spin, as it reports it."""
    line = next((ln for ln in out.splitlines() if "GOMP_SPINCOUNT" in ln and "=" in ln), None)
    assert line is not None, out[-3000:]
    return int(line.split("=", 1)[1].strip().strip("'"))


def test_a_fresh_process_gets_the_passive_policy_from_inferlab():
    out = _run(PROBE)
    assert "source inferlab" in out
    assert _spins(out) == 0                         # waiting threads sleep at once


def test_the_users_own_setting_wins():
    out = _run(PROBE, OMP_WAIT_POLICY="ACTIVE")
    assert "source user" in out
    assert _spins(out) > 300_000                    # ACTIVE: spin (almost) forever


def test_torch_first_is_too_late_and_the_engine_says_so():
    out = _run("import torch\nimport warnings\nwarnings.simplefilter('always')\n"
               "import inferlab as il\nfrom inferlab import threads\n"
               "print('source', threads.state()['source'])\n"
               "il.Engine('tiny', num_blocks=16)\n")
    assert "source too late" in out
    assert "torch was imported before inferlab" in out
    assert _spins(out) == 300_000                   # too late: libgomp's default spinning


@pytest.mark.slow
def test_a_kernel_started_as_make_lab_starts_it_has_the_policy():
    """A kernel from jupyter_client with the environment `make lab` gives (no knob set):
    importing inferlab in it is all it takes."""
    from jupyter_client.manager import start_new_kernel
    os_env = _clean_env()
    km, kc = start_new_kernel(kernel_name="python3", env=os_env)
    try:
        msgs = []
        kc.execute_interactive("import inferlab, os, torch\n"
                               "from inferlab import threads\n"
                               "print(threads.state()['source'], os.environ['OMP_WAIT_POLICY'])",
                               timeout=120, output_hook=msgs.append)
        text = "".join(m["content"].get("text", "") for m in msgs
                       if m["msg_type"] == "stream")
        assert text.split() == ["inferlab", "PASSIVE"], (text, msgs[-3:])
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
