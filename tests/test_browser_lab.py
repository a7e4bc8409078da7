"""Browser test of the Lab's what-if loop in a real JupyterLab (Debian chromium): two runs
with different knobs, chosen and run through the page, each adding a row to the runs table,
then Compare puts them side by side. The console stays clean."""
import shutil

import pytest

from inferlab.tools.jupyter import browser_page, run_all, write_notebook

pytestmark = pytest.mark.browser

CELLS = ["from inferlab.widgets import Lab\n"
         "lab = Lab('tiny', num_requests=3, max_tokens=6, num_blocks=64); lab"]


@pytest.fixture(scope="module")
def lab_server(jupyter):
    """The session's JupyterLab (tests/shared_lab.py), this module's folder in it."""
    with jupyter.folder("labruns") as (url, token, root):
        write_notebook(root / "lab.ipynb", CELLS)
        yield url, token


def _run_and_wait(page, n):
    page.click(".il-lab-run")
    page.wait_for_function(f"/run {n},/.test(document.querySelector('.il-lab-status')"
                           ".textContent)", timeout=120_000)
    page.wait_for_function(f"document.querySelectorAll('.il-lab-runs tbody tr').length === {n}",
                           timeout=30_000)


@pytest.mark.full("tests/test_browser_notebooks.py::test_the_tour_runs_with_a_clean_console")
def test_two_lab_runs_then_the_comparison(lab_server, tmp_path):
    from playwright.sync_api import sync_playwright
    url, token = lab_server
    errors = []
    with sync_playwright() as p:
        browser, page = browser_page(p, errors)
        try:
            run_all(page, url, token, "labruns/lab.ipynb")
            page.wait_for_selector(".il-lab-run", timeout=120_000)
            _run_and_wait(page, 1)
            page.select_option(".il-lab-block-size select", "4")      # one knob changed
            _run_and_wait(page, 2)
            head = page.inner_text(".il-lab-runs thead")
            assert "block_size" in head and "TTFT p99" in head, head
            cells = page.eval_on_selector_all(
                ".il-lab-runs tbody tr", "rows => rows.map(r => r.children[1].textContent)")
            assert cells == ["16", "4"], cells
            page.click(".il-lab-compare")
            page.wait_for_selector(".il-lab-deltas td", timeout=60_000)
            deltas = page.inner_text(".il-lab-deltas")
            assert "block_size" in deltas and "run 2 / run 1" in deltas
            page.wait_for_function("document.querySelectorAll('.il-lab .il-kv-map').length >= 3",
                                   timeout=60_000)
            loc = page.locator(".il-lab").first
            loc.scroll_into_view_if_needed()
            loc.screenshot(path=str(tmp_path / "lab_compare.png"))
        except Exception:
            page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
            shutil.copy(tmp_path / "failure.png", "/tmp/il_lab_failure.png")
            raise
        browser.close()
    bad = [e for e in errors if "inferlab" in e or "anywidget" in e.lower() or "il-" in e
           or "Uncaught" in e]
    assert not bad, bad
    assert (tmp_path / "lab_compare.png").stat().st_size > 5000
