"""Browser test: the notebooks run (Run All, smoke mode) in a real JupyterLab in Debian's
chromium with a clean console: no page error, no console error.

Which notebooks: every one takes ~22 minutes on this 2-CPU machine (all 15 were clean on
2026-11-30, load 5-8), so by default the tour runs and, after it, each notebook that shows a
kind of widget no notebook before it showed (an inferlab view by the class its source imports
from inferlab.widgets, since the committed outputs keep no anywidget state; an ipywidgets model
by its name in the widget state saved with the outputs). Every kind of widget that any notebook
shows is in the page and has drawn (its draw counter) at least once here; a notebook whose
source uses widgets but whose committed outputs hold none runs too, so a new widget notebook
joins by itself. The notebooks run here are not run again by nbval in the same session (notebooks/
conftest.py); the others are. ``INFERLAB_BROWSER_NOTEBOOKS=widgets`` runs every notebook with
widgets (the tour, 00_quickstart, 04, 05, 12 and 14 on 2026-12-02: ~8 minutes at load 5-8),
``all`` runs every notebook, and a space-separated list of names runs those.

Tiers (tests/tiers.py): the default tier runs the tour (its Lab holds most of the views); the
full tier runs the others the selection picked and checks, with the tour, that every kind of
widget was drawn.

One lab serves the notebooks in turn (copies in a temporary root, so autosave never touches
the committed files); each opens in a fresh workspace, runs to its last cell, waits for its
views to draw, and has its kernel shut down before the next one starts.
"""
import json
import os
import pathlib
import re
import shutil
import tempfile

import pytest

from inferlab.tools.jupyter import CELLS_STATE, DRAWN, browser_page, make_lab_env
from waiting import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.slow]
ROOT = pathlib.Path(__file__).resolve().parents[1]
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
TOUR = "00_tour.ipynb"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def has_widgets(nb: pathlib.Path) -> bool:
    src = nb.with_suffix(".py")
    code = src.read_text(encoding="utf-8") if src.exists() else ""
    return (WIDGET_VIEW in nb.read_text(encoding="utf-8") or "inferlab.widgets" in code
            or "ipywidgets" in code)


def view_kinds(nb: pathlib.Path) -> set[str]:
    """The inferlab views a notebook shows: the classes its source imports from
    inferlab.widgets (the committed outputs keep no anywidget state: nb_outputs strips it)."""
    import inferlab.widgets as views
    src = nb.with_suffix(".py")
    code = src.read_text(encoding="utf-8") if src.exists() else ""
    names = set()
    for m in re.finditer(r"from inferlab\.widgets(?:\.\w+)? import (\([^)]*\)|[^\n]+)", code):
        names |= set(re.findall(r"\w+", m.group(1)))
    # and the views the tour's ``tour()`` hands out (inferlab/lab/replay_tour.py: the engine,
    # BatchingComparison and the Lab, live or replaying)
    for m in re.finditer(r"^([\w ,]+)=\s*tour\(", code, re.M):
        names |= set(re.findall(r"\w+", m.group(1)))
    return names & (set(views.__all__) - {"View"})


def widget_kinds(nb: pathlib.Path) -> set[str]:
    """The kinds of widget the notebook shows: its inferlab views by class, and every other
    widget model by its name, from the widget state saved with the committed outputs."""
    meta = json.loads(nb.read_text(encoding="utf-8"))["metadata"]
    state = meta.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    return view_kinds(nb) | {f"{m['model_module']}.{m['model_name']}" for m in state.values()
                             if m["model_module"] != "anywidget"}


def view_selector(kind: str) -> str:
    """A view's root element in the page: the class its ESM gives it (the Lab: .il-lab)."""
    import inferlab.widgets as views
    if kind == "Lab":
        return ".il-lab"
    return "." + re.search(r'"il-view (il-[a-z-]+)"', getattr(views, kind)._esm).group(1)


def covering(every: list[pathlib.Path]) -> list[pathlib.Path]:
    """The tour, then each widget notebook that shows a kind not shown by one before it (a
    widget notebook with no saved widget state: kinds unknown, so it runs)."""
    tour = [p for p in every if p.name == TOUR]
    chosen, seen = list(tour), set().union(*map(widget_kinds, tour))
    for p in every:
        if p.name == TOUR or not has_widgets(p):
            continue
        kinds = widget_kinds(p)
        if not kinds or kinds - seen:
            chosen.append(p)
            seen |= kinds
    return sorted(chosen)


def notebooks() -> list[str]:
    every = sorted((ROOT / "notebooks").glob("*.ipynb"))
    pick = os.environ.get("INFERLAB_BROWSER_NOTEBOOKS", "").split()
    if pick == ["all"]:
        return [p.name for p in every]
    if pick == ["widgets"]:
        return [p.name for p in every if p.name == TOUR or has_widgets(p)]
    if pick:
        return [p.name for p in every if p.name in pick or p.stem in pick]
    return [p.name for p in covering(every)]


NOTEBOOKS = notebooks()
CELL_TIMEOUT_MS = 300_000       # one notebook, start to last cell, on a busy 2-CPU machine

@pytest.fixture(scope="module")
def lab(jupyter):
    """The session's JupyterLab (tests/shared_lab.py; smoke mode), copies of the notebooks in
    this module's folder; the lab itself, to shut each notebook's kernel down."""
    with jupyter.folder(FOLDER) as (url, token, root):
        for name in NOTEBOOKS:
            shutil.copy(ROOT / "notebooks" / name, root / name)
        yield url, token, jupyter


FOLDER = "notebooks"


def run_all(page, url, token, name) -> dict:
    """Open ``name`` in a fresh workspace, Run All, wait for the last cell; its cell state."""
    page.goto(f"{url}/lab/workspaces/t{abs(hash(name))}/tree/{FOLDER}/{name}?reset&token={token}")
    page.wait_for_selector(".jp-Notebook", timeout=90_000)
    try:                                        # "Select Kernel" on first open
        page.wait_for_selector(".jp-Dialog .jp-mod-accept", timeout=10_000)
        page.click(".jp-Dialog .jp-mod-accept")
    except Exception:  # noqa: BLE001 - no dialog this time
        pass
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=90_000)
    page.click(".lm-MenuBar-itemLabel:text-is('Run')")
    page.click(".lm-Menu-itemLabel:text-is('Run All Cells')")
    state = {}

    def finished():
        state.update(page.evaluate(CELLS_STATE))
        return state["errors"] or (state["cells"] and state["done"] == state["cells"]
                                   and not state["busy"])

    wait_until(finished, CELL_TIMEOUT_MS / 1000, interval=1,
               sleep=lambda s: page.wait_for_timeout(s * 1000),
               what=lambda: f"Run All in {name}: {state['done']} of {state['cells']} cells run")
    if state["errors"]:
        return state
    # each view the notebook shows is in the page and has drawn (its draw counter)
    selectors = {k: view_selector(k) for k in view_kinds(ROOT / "notebooks" / name)}
    drawn: dict = {}

    def all_drawn() -> bool:
        drawn.update(page.evaluate(DRAWN, selectors))
        return all(n > 0 for n in drawn.values())

    try:
        wait_until(all_drawn, 120, interval=0.5, sleep=lambda s: page.wait_for_timeout(s * 1000))
    except TimeoutError:
        pass                                    # reported below, view by view
    state["drawn"] = dict(drawn)
    return state


def run_in_browser(lab, names: list[str]) -> tuple[list[str], list[str], set[str]]:
    """Each notebook in turn, Run All in a fresh page: (problems, report lines, view kinds
    that drew)."""
    from playwright.sync_api import sync_playwright
    url, token, jupyter = lab
    problems, report, drew = [], [], set()
    with sync_playwright() as p:
        for name in names:
            errors: list[str] = []
            browser, page = browser_page(p, errors)
            try:
                state = run_all(page, url, token, name)
            except Exception as e:  # noqa: BLE001 - record it, go on with the next notebook
                state = {"cells": -1, "done": 0, "errors": [f"{type(e).__name__}: {e}"]}
                page.screenshot(path=str(pathlib.Path(tempfile.gettempdir(),
                                                      f"il_nb_failure_{name}.png")))
            finally:
                browser.close()
                jupyter.shutdown_kernels()
            report.append(f"{name}: {state.get('done')}/{state.get('cells')} cells, "
                          f"{len(errors)} console errors")
            if state.get("errors"):
                problems.append(f"{name}: a cell failed: {state['errors'][0]}")
            elif state.get("cells", 0) <= 0 or state["done"] != state["cells"]:
                problems.append(f"{name}: ran {state.get('done')} of {state.get('cells')} cells")
            else:
                problems += [f"{name}: the {k} view " + ("is not in the page" if n < 0
                                                          else "never drew")
                             for k, n in state["drawn"].items() if n <= 0]
                drew |= {k for k, n in state["drawn"].items() if n > 0}
            problems += [f"{name}: console: {e}" for e in errors]
    print("\n".join(report))
    return problems, report, drew


# which notebooks each test runs (notebooks/conftest.py: nbval leaves these to the browser)
RUNS = {"test_the_tour_runs_with_a_clean_console": [n for n in NOTEBOOKS if n == TOUR],
        "test_notebooks_run_with_a_clean_console": [n for n in NOTEBOOKS if n != TOUR]}


POD_PEAK_LIMIT = 1.8e9      # the whole pod (server + kernel + anything it starts), of 2 GB


def pod_problems(name: str, res: dict) -> list[str]:
    """What went wrong in one notebook's run in a pod (inferlab/bench/binder_pod.py)."""
    from inferlab.tools.pod import gb
    out = [f"{name}: a cell failed: {e}" for e in res["cell_errors"][:1]]
    if not out and (res["cells"] <= 0 or res["done"] != res["cells"]):
        out.append(f"{name}: ran {res['done']} of {res['cells']} cells")
    out += [f"{name}: the {k} view " + ("is not in the page" if n < 0 else "never drew")
            for k, n in res["drawn"].items() if n <= 0]
    out += [f"{name}: console: {e}" for e in res["console_errors"]]
    if res["oom_kills"]:
        out.append(f"{name}: the pod's memory limit killed a process ({res['oom_kills']}x)")
    if res["peak_bytes"] > POD_PEAK_LIMIT:
        out.append(f"{name}: the pod's memory peaked at {gb(res['peak_bytes'])} (limit "
                   f"{gb(POD_PEAK_LIMIT)}): {res['by_process']}")
    return out


def test_the_tour_runs_with_a_clean_console(request):
    """The default tier: the tour, whose Lab holds most of the views; each of them drew. It
    runs as on Binder (the short version of tests/test_binder.py): JupyterLab, its kernel and
    whatever they start in a cgroup of 2 GB and one CPU (inferlab/tools/pod.py), under
    binder/start (its kernels for this CPU), from the project's environment; the whole pod's
    memory peak stays under
    POD_PEAK_LIMIT. Where no cgroup can be made (not root), it runs in the session's lab and
    says so."""
    from inferlab.bench import binder_pod
    from inferlab.tools import pod
    names = RUNS["test_the_tour_runs_with_a_clean_console"]
    assert names or os.environ.get("INFERLAB_BROWSER_NOTEBOOKS")
    if not names:
        return
    why = pod.unavailable()
    if why is None:
        sel = {k: view_selector(k) for k in view_kinds(ROOT / "notebooks" / TOUR)}
        # the kernels for this CPU, which the rest of the session compiles and uses anyway
        # (x86-64-v3's, binder/kernels.sh, are tests/test_binder.py's: a compile of their own)
        env = dict(make_lab_env(), INFERLAB_NATIVE_KERNELS="1")
        out = binder_pod.run([TOUR], selectors={TOUR: sel}, env=env,
                             timeout_s=CELL_TIMEOUT_MS / 1000)
        res = out["notebooks"][TOUR]
        problems = pod_problems(TOUR, res)
        assert set(res["drawn"]) == set(sel) or problems
        assert not problems, "\n".join(problems + ["", binder_pod.line(TOUR, res)])
        return
    print(f"no Binder pod here ({why}): the tour runs in the session's lab, memory unchecked")
    problems, report, drew = run_in_browser(request.getfixturevalue("lab"), names)
    assert view_kinds(ROOT / "notebooks" / TOUR) <= drew or problems
    assert not problems, "\n".join(problems + ["", *report])


@pytest.mark.full("tests/test_browser_notebooks.py::test_the_tour_runs_with_a_clean_console")
def test_notebooks_run_with_a_clean_console(lab):
    """The full tier: every other notebook the selection picked; with the tour (the test
    above), every kind of widget any notebook shows is drawn."""
    names = RUNS["test_notebooks_run_with_a_clean_console"]
    problems, report, drew = run_in_browser(lab, names)
    if not os.environ.get("INFERLAB_BROWSER_NOTEBOOKS"):     # every kind of widget drawn
        every = sorted((ROOT / "notebooks").glob("*.ipynb"))
        shown = set().union(*(widget_kinds(p) for p in every))
        run = set().union(*(widget_kinds(ROOT / "notebooks" / n) for n in [TOUR, *names]))
        assert shown <= run, sorted(shown - run)
        views = set().union(*(view_kinds(p) for p in every))
        assert views >= {"Lab", "TokenStream", "VllmPrefixCache"}, views   # read from sources
        drew |= view_kinds(ROOT / "notebooks" / TOUR)     # drawn by the tour's own test
        assert views <= drew or problems, sorted(views - drew)             # and drawn here
    assert not problems, "\n".join(problems + ["", *report])
