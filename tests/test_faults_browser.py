"""Views survive a page reload (issue 15): a real JupyterLab in Debian's chromium.

An engine runs in a background thread with a live SchedulerTimeline; the notebook is saved
and the page reloaded mid-run. The view comes back with the current state (JupyterLab's
widget manager fetches each live model's traits from the kernel; every view keeps all its
state in traits, none only in custom messages) and keeps updating: the step count in its
scrubber grows after the reload.
"""
import pathlib
import re
import shutil
import tempfile

import pytest

from inferlab.tools.jupyter import browser_page, write_notebook

pytestmark = pytest.mark.browser

CELLS = [
    "import threading, time\nimport inferlab as il\nfrom inferlab.widgets import "
    "SchedulerTimeline\nfrom inferlab.sim.workloads import Uniform, run_workload, synthetic\n"
    "eng = il.Engine('tiny', num_blocks=64, block_size=4, max_num_seqs=2)",
    "tl = SchedulerTimeline(eng, title='live across a reload'); tl",
    "stop = threading.Event()\n"
    "def background():\n"
    "    for i in range(2000):   # not a wait: a long run, in small workloads\n"
    "        if stop.is_set():\n"
    "            return\n"
    "        run_workload(eng, synthetic(3, prompt_len=Uniform(8, 24), "
    "output_len=Uniform(4, 12), seed=i), progress=False)\n"
    "        time.sleep(0.1)\n"
    "threading.Thread(target=background, daemon=True).start()",
]
LABEL = ".il-timeline .il-scrub-label"


def steps_shown(page) -> int:
    m = re.search(r"step \d+/(\d+)", page.locator(LABEL).first.text_content() or "")
    return int(m.group(1)) if m else 0


def wait_steps_above(page, n: int, timeout: int):
    page.wait_for_function(
        f"(() => {{ const e = document.querySelector('{LABEL}');"
        f" const m = e && /step \\d+\\/(\\d+)/.exec(e.textContent);"
        f" return m && parseInt(m[1], 10) > {n}; }})()", timeout=timeout)


@pytest.mark.full("tests/test_browser.py::test_views_in_jupyterlab")
def test_views_come_back_after_a_reload_and_keep_updating(jupyter, tmp_path):
    from playwright.sync_api import sync_playwright

    from inferlab.tools.jupyter import run_all
    errors = []
    with jupyter.folder("reload") as (url, token, root), sync_playwright() as p:
        write_notebook(root / "reload.ipynb", CELLS)
        browser, page = browser_page(p, errors)
        page.on("dialog", lambda d: d.accept())          # "leave the page?" on reload
        try:
            run_all(page, url, token, "reload/reload.ipynb")
            wait_steps_above(page, 5, timeout=180_000)
            # the run goes on in its thread; the notebook (with the view's output) is saved
            page.keyboard.press("Control+s")
            page.wait_for_selector(".jp-mod-dirty", state="detached", timeout=30_000)
            page.wait_for_timeout(1000)
            before = steps_shown(page)
            page.evaluate("window.__il_before_reload = true")
            page.reload()
            page.wait_for_selector(".jp-Notebook", timeout=60_000)
            assert page.evaluate("window.__il_before_reload === undefined")   # a new page
            page.wait_for_selector(LABEL, timeout=120_000)       # the view is back ...
            after_reload = steps_shown(page)
            assert after_reload >= before, (before, after_reload)  # ... with today's state
            assert "live" in page.locator(".il-timeline .il-badge").first.text_content()
            wait_steps_above(page, after_reload + 5, timeout=120_000)   # ... and updating
            page.locator(".il-timeline").first.screenshot(path=str(tmp_path / "reload.png"))
        except Exception:
            page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
            shutil.copy(tmp_path / "failure.png",
                        pathlib.Path(tempfile.gettempdir(), "il_reload_failure.png"))
            raise
        finally:
            browser.close()
    bad = [e for e in errors if "inferlab" in e or "anywidget" in e.lower() or "il-" in e
           or "Uncaught" in e]
    assert not bad, bad
