"""Browser test: a real JupyterLab in Debian's chromium runs a notebook with every view.

Checks each view renders its own DOM during a live run, the replayed KV map's scrubber
round-trips through Python, the Lab's run and stop buttons work, the console stays clean,
in the light and the dark theme. Screenshots go to a temp dir and docs/screenshots/.
"""
import json
import os
import pathlib
import re
import shutil
import tempfile
import urllib.request

import pytest

from inferlab.tools.jupyter import CHROMIUM, browser_page, run_all, write_notebook

pytestmark = pytest.mark.browser
ROOT = pathlib.Path(__file__).resolve().parents[1]
# screenshots land in build/ (gitignored) to be looked at; the README's curated copies live in
# docs/screenshots and are updated by hand, never by a test run
SHOTS = ROOT / "build" / "screenshots"

CELLS = [
    # 0: engine, warmed up so the first step's JIT compile does not dominate the timeline
    "import inferlab as il\nfrom inferlab.widgets import *\nfrom inferlab.sim.workloads import "
    "synthetic, run_workload, Poisson, Uniform\neng = il.Engine('tiny', num_blocks=48, block_size=4, "
    "max_num_seqs=4, max_num_batched_tokens=24)\n_ = eng.generate(['warm up'], "
    "il.SamplingParams(max_tokens=2), use_tqdm=False)",
    "ts = TokenStream(eng, title='Token stream (live)'); ts",
    "tl = SchedulerTimeline(eng, title='Scheduler timeline (live)'); tl",
    "kv = KVBlockMap(eng, title='KV cache blocks (live)'); kv",
    "wl = synthetic(10, prompt_len=Uniform(8, 40), output_len=Uniform(6, 20), arrival=Poisson(400.0), "
    "shared_prefix=0.3, seed=3)\nouts = run_workload(eng, wl, progress=False)\n"
    "for v in (ts, tl, kv): v.detach()\nlen(outs)",
    "trace = tl.trace\nreplay = KVBlockMap(trace, title='KV cache blocks (replay)'); replay",
    "cmp = BatchingComparison.run(synthetic(8, prompt_len=16, output_len=Uniform(4, 24), seed=0), "
    "('static', dict(scheduler='static')), ('continuous', dict(scheduler='continuous')), "
    "model='tiny', num_blocks=64, block_size=4, max_num_seqs=4); cmp",
    # one request at a time: ~3,000 steps, so Stop lands mid-run however fast a step is
    "lab = Lab('tiny', workload_kind='random tokens: synthetic', num_requests=200, rate=0.0, "
    "max_num_seqs=1); lab",
]


def _notebook(path):
    write_notebook(path, CELLS)


@pytest.fixture(scope="module")
def lab_server(tmp_path_factory):
    if not os.path.exists(CHROMIUM):
        pytest.fail("needs Debian chromium: run `make chromium` (make test installs it)")
    import playwright  # noqa: F401 - a dev dependency: missing means a broken setup
    from inferlab.tools.jupyter import jupyterlab   # one way to start a lab, shared
    root = tmp_path_factory.mktemp("labroot")
    _notebook(root / "views.ipynb")
    with jupyterlab(root) as (url, token):
        yield url, token, root


def _set_theme(url, token, theme):
    _put_setting(url, token, "themes", {"theme": theme})


def _put_setting(url, token, plugin, value):
    req = urllib.request.Request(
        f"{url}/lab/api/settings/@jupyterlab/apputils-extension:{plugin}",
        data=json.dumps({"raw": json.dumps(value)}).encode(), method="PUT",
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=10)


def _shot(page, selector, name, shots):
    loc = page.locator(selector).first
    loc.scroll_into_view_if_needed()
    path = shots / name
    loc.screenshot(path=str(path))
    SHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(path, SHOTS / name)


def test_views_in_jupyterlab(lab_server, tmp_path):
    from playwright.sync_api import sync_playwright
    url, token, root = lab_server
    errors = []
    with sync_playwright() as p:
        browser, page = browser_page(p, errors)
        try:
            draws = _drive(page, url, token, tmp_path)
        except Exception:
            page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
            shutil.copy(tmp_path / "failure.png", pathlib.Path(tempfile.gettempdir(), "il_browser_failure.png"))
            raise
        browser.close()
    _set_theme(url, token, "JupyterLab Light")
    bad = [e for e in errors if "inferlab" in e or "anywidget" in e.lower() or "il-" in e
           or "Uncaught" in e]
    assert not bad, bad
    # every kind of view drew (how fast is `inferlab bench widgets`' business, not a test's)
    assert sum(n > 0 for n in draws) >= 4, draws
    for name in ("token_stream.png", "scheduler_timeline.png", "kv_block_map.png", "lab.png",
                 "batching_comparison.png", "scheduler_timeline_dark.png"):
        assert (tmp_path / name).stat().st_size > 5000


def _drive(page, url, token, tmp_path):
        _put_setting(url, token, "notification", {"fetchNews": "false"})
        run_all(page, url, token, "views.ipynb")
        # live: each view shows real content while the workload runs
        page.wait_for_selector(".il-token-stream .il-chip", timeout=90_000)
        page.wait_for_selector(".il-timeline canvas", timeout=30_000)
        page.wait_for_selector(".il-kv-map .js-plotly-plot", timeout=30_000)
        page.wait_for_function(
            "document.querySelectorAll('.il-lab-run').length > 0", timeout=120_000)
        page.wait_for_selector(".il-compare .il-cmp-table td", timeout=60_000)
        page.wait_for_function("[...document.querySelectorAll('.il-token-stream .il-stats')]"
                               ".some(e => /10 requests/.test(e.textContent))", timeout=60_000)
        # replay: move the scrubber; Python recomputes the map at that step and sends it back
        replay = ".il-kv-map >> nth=1"
        page.locator(replay).scroll_into_view_if_needed()
        page.eval_on_selector_all(".il-kv-map .il-scrub-input", """els => {
            const e = els[1]; e.value = 3; e.dispatchEvent(new Event('input')); }""")
        page.wait_for_function("document.querySelectorAll('.il-kv-map')[1].dataset.shown === '3'",
                               timeout=20_000)
        # hover the live timeline: a tooltip names a request
        tl = page.locator(".il-timeline canvas").first
        tl.scroll_into_view_if_needed()
        box = tl.bounding_box()
        tl.hover(position={"x": box["width"] * 0.3, "y": 5})
        for name, sel in [("token_stream.png", ".il-token-stream"),
                          ("scheduler_timeline.png", ".il-timeline"),
                          ("kv_block_map.png", ".il-kv-map >> nth=1"),
                          ("batching_comparison.png", ".il-compare")]:
            _shot(page, sel, name, tmp_path)
        # the Lab: run starts a background run, stop stops it
        page.locator(".il-lab-run").scroll_into_view_if_needed()
        page.click(".il-lab-run")
        page.wait_for_function("/running/.test(document.querySelector('.il-lab-status')"
                               ".textContent)", timeout=60_000)
        # Stop as soon as the run goes (waiting for the views to draw first could let a fast
        # run end before the click)
        page.click(".il-lab-stop")
        try:
            page.wait_for_function("/stopped/.test(document.querySelector('.il-lab-status')"
                                   ".textContent)", timeout=60_000)
        finally:
            status = page.inner_text(".il-lab-status")
            print("Lab status:", status)
        assert re.search(r"stopped: run 1, \d+/200 requests finished", status), status
        _shot(page, ".il-lab", "lab.png", tmp_path)
        # dark theme, switched live from the Settings menu: the views recolour
        page.click(".lm-MenuBar-itemLabel:text-is('Settings')")
        page.hover(".lm-Menu-itemLabel:text-is('Theme')")
        page.click(".lm-Menu-itemLabel:text-is('JupyterLab Dark')")
        page.wait_for_function("document.body.dataset.jpThemeLight === 'false'", timeout=30_000)
        page.wait_for_timeout(1500)
        assert page.evaluate("document.body.dataset.jpThemeLight") == "false"
        # the canvases redraw in the new theme: the timeline's request labels turn light
        # (they were left dark-on-dark until the next data change)
        labels = page.evaluate("""() => {
            const c = document.querySelector('.il-timeline canvas');
            const d = c.getContext('2d').getImageData(0, 0, 50, c.height).data;
            let m = 0;
            for (let i = 0; i < d.length; i += 4) m = Math.max(m, (d[i] + d[i + 1] + d[i + 2]) / 3 * d[i + 3] / 255);
            return m; }""")
        assert labels > 100, f"timeline labels drawn dark on the dark theme (brightest {labels:.0f})"
        _shot(page, ".il-timeline", "scheduler_timeline_dark.png", tmp_path)
        _shot(page, ".il-kv-map >> nth=1", "kv_block_map_dark.png", tmp_path)
        return page.evaluate("[...document.querySelectorAll('.il-view')]"
                             ".map(e => parseInt(e.dataset.draws || '0', 10))")
