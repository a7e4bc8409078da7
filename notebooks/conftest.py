"""pytest collects the notebooks (nbval): run them in smoke mode, small and fast."""
import os
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
import tiers  # noqa: E402 - tests/tiers.py: the same tiers when notebooks/ runs alone

os.environ["INFERLAB_SMOKE"] = "1"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# inferlab's OpenMP wait policy (inferlab/threads.py), inherited by nbval's kernels
import inferlab  # noqa: E402,F401


@pytest.hookimpl(trylast=True)            # after -m / -k have deselected what they deselect
def pytest_collection_modifyitems(config, items):
    """A notebook that tests/test_browser_notebooks.py runs in this same session is not run a
    second time by nbval: that test runs it (smoke mode, Run All in JupyterLab) and fails on
    any cell's error, as nbval would (--nbval-lax: no outputs are compared, there are no
    NBVAL_CHECK_OUTPUT cells), and on a console error besides. Without the browser test (make
    test-fast, -m "not browser", a run of notebooks/ alone) nbval runs every notebook."""
    if tiers.ALL_ITEMS not in config.stash:     # notebooks/ alone: tests/conftest.py not loaded
        tiers.select(config, items)
    browser = [i for i in items if i.nodeid.startswith("tests/test_browser_notebooks.py::")]
    if not browser:
        return
    runs = browser[0].module.RUNS
    in_browser = {n for i in browser for n in runs.get(i.originalname, [])}
    drop = [i for i in items if i.nodeid.startswith("notebooks/")
            and i.nodeid.split("::")[0].rsplit("/", 1)[-1] in in_browser]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [i for i in items if i not in drop]
