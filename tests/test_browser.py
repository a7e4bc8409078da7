"""Browser test: a real JupyterLab in Debian's chromium runs a notebook with every view.

Checks each view draws its plotly plot during a live run, the replayed KV map's scrubber
round-trips through Python, the plot's title and legend are those of ``view.figure()``, the
Lab's run and stop buttons work, the console stays clean, in the light and the dark theme
(the plots recolour). Screenshots go to a temp dir and build/screenshots/.
"""
import json
import pathlib
import re
import shutil
import tempfile
import urllib.request

import pytest

from inferlab.lab import palette
from inferlab.tools.jupyter import browser_page, run_all, write_notebook
from waiting import wait_until

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
    # vLLM's prefix cache from the golden KV frames of a real vLLM run (tests/vllm_golden.py)
    f"import sys\nsys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})\n"
    "from vllm_golden import golden_trace\n"
    "vkv = VllmPrefixCache(golden_trace(), title='vLLM prefix cache (replay)'); vkv",
    # what each view's figure() says, for the browser to match (title, legend entries)
    "import json\nshown = lambda f: [t.name for t in f.data if t.showlegend is not False] "
    "if f.layout.showlegend is not False else []\n"
    "json.dump({k: {'title': v.figure().layout.title.text, 'legend': shown(v.figure())} for k, v "
    "in {'ts': ts, 'tl': tl, 'kv': replay, 'cmp': cmp, 'vkv': vkv}.items()}, "
    "open('expected.json', 'w')); 'written'",
    # one request at a time, real chat prompts answered until 256 tokens (the random model
    # seldom stops): ~50,000 steps, over a minute here, so Stop lands mid-run even when a busy
    # browser sees "running" and clicks seconds late (200 random-token requests, ~3,000
    # steps, were over in 5 s and done before the click)
    "lab = Lab('tiny', workload_kind='chat requests', num_requests=200, rate=0.0, "
    "max_num_seqs=1, max_tokens=256); lab",
]
# each view's root element in the page (the Lab's own views come after these), tagged
# with an id ("#il-view-ts", ...) once they are all there
ROOTS = {"ts": (".il-token-stream", 0), "tl": (".il-timeline", 0), "kv": (".il-kv-map", 1),
         "cmp": (".il-compare", 0), "vkv": (".il-vllm-kv", 0)}

def _notebook(path):
    write_notebook(path, CELLS)


@pytest.fixture(scope="module")
def lab_server(jupyter):
    """The session's JupyterLab (tests/shared_lab.py), this module's folder in it."""
    with jupyter.folder("views") as (url, token, root):
        _notebook(root / "views.ipynb")
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
            draws, acks = _drive(page, url, token, tmp_path, root)
        except Exception:
            page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
            shutil.copy(tmp_path / "failure.png", pathlib.Path(tempfile.gettempdir(), "il_browser_failure.png"))
            raise
        browser.close()
    _set_theme(url, token, "JupyterLab Light")
    bad = [e for e in errors if "inferlab" in e or "anywidget" in e.lower() or "il-" in e
           or "Uncaught" in e]
    assert not bad, bad
    # every view drew, each named (how fast is `inferlab bench widgets`' business, not a test's)
    assert set(draws) == set(ROOTS) | set(LAB_VIEWS), draws
    assert all(n > 0 for n in draws.values()), draws
    # the page answers the Lab's redraws ("drawn"): the kernel sends the next one then
    # (widgets/_plot.py, Throttle; tests/test_live_updates.py tests the kernel's side)
    assert all(n > 0 for n in acks.values()), acks
    for name in ("token_stream.png", "scheduler_timeline.png", "kv_block_map.png", "lab.png",
                 "batching_comparison.png", "vllm_prefix_cache.png",
                 "scheduler_timeline_dark.png"):
        assert (tmp_path / name).stat().st_size > 5000


# the Lab's own views, by their root's class
LAB_VIEWS = ("lab:il-timeline", "lab:il-kv-map", "lab:il-token-stream")
# JS: how many times each view drew, or answered a redraw (what="acks"), as common.js counts
# them on its root
DRAWS = """([keys, lab, what]) => {
    const n = e => e ? parseInt(e.dataset[what] || '0', 10) : -1, out = {};
    for (const k of keys) out[k] = n(document.querySelector('#il-view-' + k));
    for (const k of lab) out[k] = n(document.querySelector('.il-lab .' + k.slice(4)));
    return out; }"""


def _tag(page) -> None:
    page.evaluate("""roots => { for (const [k, [sel, i]] of Object.entries(roots))
        document.querySelectorAll(sel)[i].id = 'il-view-' + k; }""", ROOTS)


PLOT_TEXT = """sel => {
    const root = document.querySelector(sel);
    const t = root.querySelector('.js-plotly-plot .gtitle');
    return {title: t ? t.textContent : '',
            legend: [...root.querySelectorAll('.legendtext')].map(e => e.textContent)}; }"""


def _plain(html: str) -> str:
    """A plotly title as its SVG text reads: tags gone (a <br> is a new line, which plotly
    ends with a zero-width space), no spaces."""
    text = re.sub(r"<[^>]+>", "", html or "").replace("\u200b", "")   # plotly's line ends
    return re.sub(r"\s+", "", text)


def _same_as_figure(page, key: str, expected: dict) -> None:
    """The plot's title and legend entries in the page are those of ``figure()``."""
    want = {"title": _plain(expected["title"]), "legend": sorted(expected["legend"])}
    assert want["title"] and want["legend"], (key, want)
    got = {}

    def same() -> bool:             # the last redraw may still be on its way (throttled)
        seen = page.evaluate(PLOT_TEXT, f"#il-view-{key}")
        got.update(title=_plain(seen["title"]), legend=sorted(seen["legend"]))
        return got == want

    wait_until(same, 60, interval=0.25, sleep=lambda s: page.wait_for_timeout(s * 1000),
               what=lambda: f"{key}'s plot to show {want}; it shows {got}")


def _rgb(hex_colour: str) -> str:
    h = hex_colour.lstrip("#")
    return "rgb({}, {}, {})".format(*(int(h[i:i + 2], 16) for i in (0, 2, 4)))


THEME_JS = """sel => {
    const p = document.querySelector(sel + ' .js-plotly-plot');
    const svg = p.querySelector('.main-svg'), t = p.querySelector('.gtitle');
    return {bg: getComputedStyle(svg).backgroundColor, fg: t ? t.style.fill : ''}; }"""


def _drive(page, url, token, tmp_path, root):
        _put_setting(url, token, "notification", {"fetchNews": "false"})
        run_all(page, url, token, "views/views.ipynb")
        # live: each view shows real content while the workload runs
        page.wait_for_selector(".il-token-stream .js-plotly-plot .point", timeout=90_000, state="attached")
        page.wait_for_selector(".il-timeline .js-plotly-plot .point", timeout=30_000, state="attached")
        page.wait_for_selector(".il-kv-map .js-plotly-plot", timeout=30_000)
        page.wait_for_function(
            "document.querySelectorAll('.il-lab-run').length > 0", timeout=120_000)
        page.wait_for_selector(".il-compare .il-cmp-table td", timeout=60_000)
        page.wait_for_selector(".il-vllm-kv .js-plotly-plot .point", timeout=60_000, state="attached")
        # every request has its lane in the token stream (the box scrolls, none is cut)
        page.wait_for_function("document.querySelector('.il-token-stream')"
                               ".querySelectorAll('.ytick').length === 10", timeout=60_000)
        # each plot says what its view's figure() says: the same title and legend entries
        _tag(page)
        page.wait_for_function("() => !!document.querySelector('#il-view-vkv .gtitle')",
                               timeout=60_000)
        wait_until((root / "expected.json").exists, 60, interval=0.25,
                   sleep=lambda s: page.wait_for_timeout(s * 1000),
                   what="the notebook to write each view's figure() to expected.json")
        expected = json.loads((root / "expected.json").read_text())
        assert set(expected) == set(ROOTS)
        for key, exp in expected.items():
            _same_as_figure(page, key, exp)
        # replay: move the scrubber; Python recomputes the map at that step and sends it back
        page.locator("#il-view-kv").scroll_into_view_if_needed()
        page.eval_on_selector_all(".il-kv-map .il-scrub-input", """els => {
            const e = els[1]; e.value = 3; e.dispatchEvent(new Event('input')); }""")
        page.wait_for_function("document.querySelectorAll('.il-kv-map')[1].dataset.shown === '3'",
                               timeout=20_000)
        # hover a bar of the live timeline: plotly's hover label names its request and phase
        bar = page.locator("#il-view-tl .barlayer .point path").first
        bar.scroll_into_view_if_needed()
        bar.hover(force=True)
        page.wait_for_function("/ from .* steps /.test(document.querySelector('#il-view-tl "
                               ".hoverlayer')?.textContent || '')", timeout=10_000)
        for name, key in [("token_stream.png", "ts"), ("scheduler_timeline.png", "tl"),
                          ("kv_block_map.png", "kv"), ("batching_comparison.png", "cmp"),
                          ("vllm_prefix_cache.png", "vkv")]:
            _shot(page, f"#il-view-{key}", name, tmp_path)
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
        light = page.evaluate(THEME_JS, "#il-view-tl")
        assert light == {"bg": _rgb(palette.NEUTRAL["light"]["bg"]),
                         "fg": _rgb(palette.NEUTRAL["light"]["fg"])}, light
        # dark theme, switched live from the Settings menu: the views recolour
        page.click(".lm-MenuBar-itemLabel:text-is('Settings')")
        page.hover(".lm-Menu-itemLabel:text-is('Theme')")
        page.click(".lm-Menu-itemLabel:text-is('JupyterLab Dark')")
        page.wait_for_function("document.body.dataset.jpThemeLight === 'false'", timeout=30_000)
        assert page.evaluate("document.body.dataset.jpThemeLight") == "false"
        # every plot is redrawn in the dark template: its paper and its text change colour
        dark = {"bg": _rgb(palette.NEUTRAL["dark"]["bg"]), "fg": _rgb(palette.NEUTRAL["dark"]["fg"])}
        for key in ROOTS:
            page.wait_for_function(f"(() => {{ const c = ({THEME_JS})('#il-view-{key}'); "
                                   f"return c.bg === {dark['bg']!r} && c.fg === {dark['fg']!r}; }})()",
                                   timeout=20_000)
        for name, key in [("scheduler_timeline_dark.png", "tl"), ("kv_block_map_dark.png", "kv"),
                          ("token_stream_dark.png", "ts"), ("batching_comparison_dark.png", "cmp"),
                          ("vllm_prefix_cache_dark.png", "vkv")]:
            _shot(page, f"#il-view-{key}", name, tmp_path)
        return (page.evaluate(DRAWS, [list(ROOTS), list(LAB_VIEWS), "draws"]),
                page.evaluate(DRAWS, [[], list(LAB_VIEWS), "acks"]))
