"""The vLLM prefix-cache view's HTML in headless chromium, without JupyterLab: its ESM loaded
with a stand-in anywidget model holding the view's synced state, from a trace built out of
the golden KV frames of a real vLLM run (stored, evicted, cleared) plus connector warnings.
It shows vLLM's numbers, the notes and the warnings, and logs no error. The tree itself is
a plotly FigureWidget, a child widget that needs a widget manager: test_browser.py checks
it in a real JupyterLab (its title and legend against ``figure()``).
"""
import base64
import json
import os

import pytest
from vllm_golden import golden_trace

pytestmark = pytest.mark.browser

PAGE = """<!doctype html><html><head><style>%s</style></head><body>
<div id="out" style="width: 900px"></div>
<script type="module">
const state = %s;
const handlers = {};
const model = {
  get: (k) => { const v = state[k];
    if (v && v.__b64 !== undefined) { const s = atob(v.__b64); const u = new Uint8Array(s.length);
      for (let i = 0; i < s.length; i++) u[i] = s.charCodeAt(i); return new DataView(u.buffer); }
    return v; },
  set: (k, v) => { state[k] = v; }, save_changes: () => {},
  on: (ev, fn) => { (handlers[ev] = handlers[ev] || []).push(fn); },
};
const url = URL.createObjectURL(new Blob([%s], {type: "text/javascript"}));
const mod = await import(url);
mod.default.render({ model, el: document.getElementById("out") });
window.done = true;
</script></body></html>"""


def synced_state(view) -> dict:
    out = {}
    for name in view.keys:
        v = getattr(view, name)
        if isinstance(v, bytes):
            out[name] = {"__b64": base64.b64encode(v).decode()}
        elif isinstance(v, (str, int, float, bool, list, dict, type(None))):
            out[name] = v
    return out


def test_the_prefix_cache_view_shows_numbers_notes_and_warnings(tmp_path):
    from inferlab.tools.jupyter import CHROMIUM, browser_page
    from inferlab.widgets.vllm_kv import VllmPrefixCache
    if not os.path.exists(CHROMIUM):
        pytest.fail("needs Debian chromium: run `make chromium` (make test installs it)")
    from playwright.sync_api import sync_playwright
    view = VllmPrefixCache(golden_trace())
    view.cursor = 5                                  # after the evictions, before the reset
    s = view.summary
    assert s["cached"] > 0 and s["evicted"] > 0 and view.warnings
    html = PAGE % (view._css, json.dumps(synced_state(view)), json.dumps(view._esm))
    errors: list = []
    with sync_playwright() as p:
        browser, page = browser_page(p, errors, width=1000, height=900)
        try:
            page.set_content(html)
            page.wait_for_function("window.done === true", timeout=10000)
            root = page.locator(".il-vllm-kv")
            assert int(root.get_attribute("data-nodes")) == len(view.nodes()) > 0
            assert root.get_attribute("data-warnings") == "1"
            text = root.inner_text()
            assert "no request and no physical block" in text and "batches of KV events lost" \
                in text and f"{s['cached']} blocks cached" in text
            assert "vLLM KV usage 3/40 blocks" in text and "block = 32 tokens" in text
            page.screenshot(path=str(tmp_path / "vllm_prefix_cache.png"))
        finally:
            browser.close()
    assert not errors, errors
