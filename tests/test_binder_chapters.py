"""Every chapter's smoke run as on Binder: each notebook in turn in one pod (a cgroup of 2 GB,
no swap, one CPU, holding JupyterLab, the kernel and whatever they start; inferlab/tools/
pod.py), under binder/start, opened in a real browser outside it, Run All
(inferlab/bench/binder_pod.py). Each must run every cell with a clean console while the
whole pod's memory peak stays under POD_PEAK_LIMIT. The tour's own run in a pod is the
default tier's tests/test_browser_notebooks.py::test_the_tour_runs_with_a_clean_console.
"""
import pathlib

import pytest

from test_browser_notebooks import TOUR, pod_problems, view_kinds, view_selector

ROOT = pathlib.Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.full("tests/test_browser_notebooks.py::test_the_tour_runs_with_a_clean_console")
def test_every_chapter_runs_in_a_binder_pod():
    from inferlab.bench import binder_pod
    from inferlab.tools import pod
    why = pod.unavailable()
    if why:
        pytest.skip(f"no Binder pod can be made here: {why}")
    names = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb") if p.name != TOUR)
    sel = {n: {k: view_selector(k) for k in view_kinds(ROOT / "notebooks" / n)} for n in names}
    out = binder_pod.run(names, selectors=sel, timeout_s=900)
    problems = [p for n in names for p in pod_problems(n, out["notebooks"][n])]
    assert not problems, "\n".join(problems)
