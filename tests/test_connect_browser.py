"""The vLLM prefix-cache view drawn in headless chromium, without JupyterLab: its ESM loaded
with a stand-in anywidget model holding the view's synced state, from a trace built out of
the golden KV frames of a real vLLM run (stored, evicted, cleared) plus connector warnings.
It draws every node, shows the notes and the warnings, answers hover, and logs no error.
"""
import base64
import json
import os
import pathlib

import pytest

from inferlab.connect.feeds.hash_tree import HashTree
from inferlab.connect.wire.kv_events import decode_frame
from inferlab.core.events import StepRecord
from inferlab.observe.trace import Trace

pytestmark = pytest.mark.browser
FIX = pathlib.Path(__file__).parent / "fixtures"

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


def golden_trace() -> Trace:
    frames = json.loads((FIX / "vllm_kv_frames.json").read_text())["frames"]
    tree = HashTree(1)
    trace = Trace({"clock": "wall (vLLM)", "config": {"kv_ids": "vllm-block-hashes",
                                                      "dp_ranks": 1},
                   "vllm_warnings": ["KV events from ipc:///x: 2 batches of KV events lost "
                                     "(seq 3..4) (no replay endpoint was given)"]})
    for k, f in enumerate(frames):
        b = decode_frame([base64.b64decode(p) for p in f])
        kv = [e for ev in b.events for e in tree.apply(0, ev)]
        trace(StepRecord(step=k, t_start=k * 0.1, t_end=k * 0.1 + 0.05, wall_duration=0.05,
                         sim_duration=None, clock="wall (vLLM)", batch=[],
                         num_batched_tokens=0, token_budget=2048, emitted=[],
                         request_events=[], kv_events=kv, kv_blocks_used=3,
                         kv_blocks_total=40, kv_tokens_used=96, kv_slots_allocated=96,
                         num_running=1, num_waiting=0, block_size=32))
    return trace


def synced_state(view) -> dict:
    out = {}
    for name in view.keys:
        v = getattr(view, name)
        if isinstance(v, bytes):
            out[name] = {"__b64": base64.b64encode(v).decode()}
        elif isinstance(v, (str, int, float, bool, list, dict, type(None))):
            out[name] = v
    return out


def test_the_prefix_cache_view_draws_in_chromium(tmp_path):
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
            page.wait_for_function("document.querySelector('.il-vllm-kv').dataset.draws > 0",
                                   timeout=10000)
            root = page.locator(".il-vllm-kv")
            assert int(root.get_attribute("data-nodes")) == len(view.nodes())
            assert root.get_attribute("data-warnings") == "1"
            text = root.inner_text()
            assert "no request and no physical block" in text and "batches of KV events lost" \
                in text and f"{s['cached']} blocks cached" in text
            n = view.nodes()[0]                      # hover the first node: its tooltip
            box = page.locator(".il-vkv-canvas").bounding_box()
            # the view's own geometry (vllm_kv.js): its root is the 900 px #out div
            dx = max(6, min(80, (900 - 22 - 16) / max(m["depth"] for m in view.nodes())))
            page.mouse.move(box["x"] + 4 + (n["depth"] - 0.5) * dx,
                            box["y"] + 2 + (n["row"] + 0.5) * 18)
            assert f"block #{n['id']}" in page.locator(".il-tooltip").inner_text()
            page.screenshot(path=str(tmp_path / "vllm_prefix_cache.png"))
        finally:
            browser.close()
    assert not errors, errors
