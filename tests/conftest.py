import os
import shutil
import tempfile

import pytest
import tiers

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# inferlab sets OpenMP's wait policy itself on import (inferlab/threads.py), before anything here
# loads torch; the kernels, servers and browsers the tests start inherit it
import inferlab  # noqa: E402,F401
# Measure once, read many: each chapter's measurement runs once per test session, and the
# fixtures, the tests and the notebook kernels nbval starts all read it (lab/measure_cache.py).
# Set it yourself to keep the measurements across sessions while you work on a figure.
_MEASURE_CACHE = None
if not os.environ.get("INFERLAB_MEASURE_CACHE"):
    _MEASURE_CACHE = os.environ["INFERLAB_MEASURE_CACHE"] = tempfile.mkdtemp(
        prefix="inferlab-measure-")


def pytest_sessionfinish(session, exitstatus):
    if _MEASURE_CACHE:
        shutil.rmtree(_MEASURE_CACHE, ignore_errors=True)


@pytest.fixture(scope="session")
def smollm2():
    """The real SmolLM2-135M-Instruct, loaded once (engines share the cached weights)."""
    from inferlab.model.loader import load_model
    return load_model(None)


@pytest.fixture
def tiny_engine():
    import inferlab as il
    return il.Engine("tiny", num_blocks=64, block_size=4)


@pytest.fixture(scope="session")
def claims_smoke():
    """`inferlab claims --smoke`, in process, measured once per test session: test_claims judges
    it, and the chapter content tests read their chapter's measurement from it (each chapter's
    ``measure_for_claims(smoke=True)``) instead of measuring the same thing again."""
    from inferlab.lab import claims
    return claims.run_all(smoke=True)



@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """The default tier unless INFERLAB_TIER says otherwise (tests/tiers.py); a test that
    reads the session's claims measurement runs the real model: it is slow (make test-fast
    leaves it out)."""
    for item in items:
        if "claims_smoke" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
    tiers.select(config, items)


def pytest_report_header(config):
    return tiers.header(config)


@pytest.fixture(scope="session")
def jupyter(tmp_path_factory):
    """One JupyterLab for every browser test of the session (tests/shared_lab.py); its
    kernels run notebooks in smoke mode."""
    from inferlab.tools.jupyter import CHROMIUM, jupyterlab
    from shared_lab import SharedLab
    if not os.path.exists(CHROMIUM):
        pytest.fail("needs Debian chromium: run `make chromium` (make test installs it)")
    import playwright  # noqa: F401 - a dev dependency: missing means a broken setup
    root = tmp_path_factory.mktemp("jupyter")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("INFERLAB_SMOKE", "1")            # the kernels inherit the server's env
        with jupyterlab(root) as (url, token):
            yield SharedLab(url, token, root)
