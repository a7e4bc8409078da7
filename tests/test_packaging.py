"""The wheel carries inferlab.kernels and inferlab.widgets (with their .js/.css files)."""
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_installs_kernels_and_widgets(tmp_path):
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir",
                    str(tmp_path / "dist"), str(ROOT)], check=True, capture_output=True)
    wheel = next((tmp_path / "dist").glob("inferlab-*.whl"))
    env = tmp_path / "venv"
    # The fresh venv sees this venv's dependencies (torch, numpy...) through a .pth line,
    # which does not run this venv's editable-install hook; the wheel goes in with --no-deps,
    # so what imports as inferlab is exactly what the wheel carries.
    venv.create(env, with_pip=True)
    py = env / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    deps = [p for p in sys.path if p.endswith("site-packages")]
    Path(site, "zz_deps.pth").write_text("\n".join(deps) + "\n")
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True)
    code = (
        "import inferlab, inferlab.kernels, inferlab.widgets, pathlib, sys;"
        "w = pathlib.Path(inferlab.widgets.__file__).parent;"
        "assert 'site-packages' in inferlab.__file__, inferlab.__file__;"
        "js = sorted(p.name for p in w.glob('*.js')); css = sorted(p.name for p in w.glob('*.css'));"
        "print(js, css);"
        "assert js and css;"
        "import inferlab.kernels.reference, inferlab.kernels.gemm_cpu, inferlab.kernels.decode_cpu;"
        "from inferlab.sim.chat_requests import bundled;"
        "assert len(bundled()) >= 40 and 'site-packages' in inferlab.sim.__file__;"
        "import inferlab.connect.wire.kv_events, inferlab.tools.jupyter, inferlab.serve.app;"
        "assert (pathlib.Path(inferlab.connect.__file__).parent / 'plugin' / 'stat_logger.py').exists()")
    r = subprocess.run([str(py), "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
