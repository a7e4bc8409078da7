"""The README's screenshots, taken from a real JupyterLab running the real model.

    python -m inferlab.tools.showcase [--out docs/screenshots] [--numbers FILE.json]
    python -m inferlab.tools.showcase --vllm     # the views watching a live vLLM server

A notebook of the five views over SmolLM2-135M-Instruct (real weights, real prompts, the wall
clock) runs in JupyterLab in Debian's chromium; each view is photographed once its run is
over, in the light theme (and the timeline and the block map in the dark one). The
workloads are chosen so that each view shows its point: several requests interleaving, the
KV blocks filling and freeing, and static batching visibly behind continuous batching (the
output lengths vary widely, so a static batch waits for its longest member). Browser
console errors fail the run. JupyterLab runs in the environment ``make lab`` gives it (no
setting of the tests': the engine's own threading policy in force), so the pictures show
what a user gets. Look at the pictures before committing them. ``--vllm`` runs
notebook 12 (``make vllm`` first) and photographs its views watching a live vLLM server: the
scheduler timeline built from vLLM's step reports and the prefix-cache view of its KV events.
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile

from .jupyter import browser_page, jupyterlab, make_lab_env, run_all, write_notebook

QUESTIONS = ["Name three rivers in Europe.", "What is 17 times 3?",
             "Translate 'good morning' into Spanish.", "Why is the sky blue?",
             "Give one use of copper.", "Write a haiku about rain.",
             "What does a CPU do?", "Suggest a name for a cat."]

CELLS = [
    "import inferlab as il\nfrom inferlab.widgets import *\nfrom inferlab.sim import workloads as wl\n"
    "eng = il.Engine(num_blocks=64, max_num_seqs=4, max_num_batched_tokens=256)\n"
    "_ = eng.generate(['warm up'], il.SamplingParams(max_tokens=2), use_tqdm=False)",
    "ts = TokenStream(eng, title='Token stream: SmolLM2-135M, 8 chat requests'); ts",
    "tl = SchedulerTimeline(eng, title='Scheduler timeline: max 4 running'); tl",
    "kv = KVBlockMap(eng, title='KV cache: 64 blocks of 16 tokens'); kv",
    f"qs = {QUESTIONS!r}\n"
    "outs = eng.generate([[{'role': 'user', 'content': q}] for q in qs],\n"
    "                    il.SamplingParams(max_tokens=40), use_tqdm=False)\n"
    "for v in (ts, tl, kv): v.detach()\n"
    "recs = kv.trace.records\n"
    "kv.cursor = max(range(len(recs)), key=lambda k: recs[k].kv_blocks_used)\n"
    "[o.text[:30] for o in outs]",
    # static waits for each batch's longest request; continuous refills at once
    "work = wl.synthetic(16, prompt_len=wl.Uniform(16, 48), output_len=wl.Uniform(4, 96), seed=1)\n"
    "cmp = BatchingComparison.run(work, ('static', dict(scheduler='static')),\n"
    "                             ('continuous', dict(scheduler='continuous')),\n"
    "                             model=None, max_num_seqs=4, num_blocks=128)\ncmp",
    "lab = Lab(None, num_requests=12, rate=0.0); lab",
]

SHOTS = [("token_stream.png", ".il-token-stream"), ("scheduler_timeline.png", ".il-timeline"),
         ("kv_block_map.png", ".il-kv-map"), ("batching_comparison.png", ".il-compare")]


def _shot(page, selector: str, path: pathlib.Path) -> None:
    loc = page.locator(selector).first
    loc.scroll_into_view_if_needed()
    page.wait_for_timeout(500)
    loc.screenshot(path=str(path))
    print(f"wrote {path}")


VLLM_NOTEBOOK = pathlib.Path(__file__).resolve().parents[2] / "notebooks" / "12_on_vllm.ipynb"


def _vllm_views(page, out: pathlib.Path) -> None:
    page.wait_for_selector(".il-compare .il-cmp-table td", timeout=600_000)
    page.wait_for_timeout(2000)
    _shot(page, ".il-timeline", out / "vllm_timeline.png")
    _shot(page, ".il-vllm-kv", out / "vllm_prefix_cache.png")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="docs/screenshots")
    ap.add_argument("--vllm", action="store_true", help="notebook 12's views on a live vLLM")
    ap.add_argument("--numbers", default="docs/results/showcase-amd.json",
                    help="where the numbers the pictures show go (JSON, for the README)")
    a = ap.parse_args(argv)
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright
    errors: list[str] = []
    if a.vllm:
        import shutil
        with tempfile.TemporaryDirectory(prefix="inferlab-showcase-") as root, \
                jupyterlab(pathlib.Path(root)) as (url, token), sync_playwright() as p:
            shutil.copy(VLLM_NOTEBOOK, pathlib.Path(root) / "on_vllm.ipynb")
            browser, page = browser_page(p, errors, width=1100, scale=2)
            run_all(page, url, token, "on_vllm.ipynb")
            _vllm_views(page, out)
            browser.close()
        return _report(errors)
    with tempfile.TemporaryDirectory(prefix="inferlab-showcase-") as root, \
            jupyterlab(pathlib.Path(root), env=make_lab_env()) as (url, token), \
            sync_playwright() as p:
        write_notebook(pathlib.Path(root) / "showcase.ipynb", CELLS)
        # wide enough that the Lab's right column (its sliders' values) is not clipped
        browser, page = browser_page(p, errors, width=1400, scale=2)
        run_all(page, url, token, "showcase.ipynb")
        # the token stream's plot has a lane for each of the eight requests
        page.wait_for_function("[...document.querySelectorAll('.il-token-stream')]"
                               ".some(e => e.querySelectorAll('.ytick').length === 8)",
                               timeout=300_000)
        page.wait_for_selector(".il-compare .il-cmp-table td", timeout=600_000)
        page.wait_for_selector(".il-lab-run", timeout=120_000)
        page.wait_for_timeout(2000)
        # a picture shows every lane: the token stream's scroll box is let out to full height
        page.add_style_tag(content=".il-ts-plot { max-height: none !important; }")
        for name, sel in SHOTS:
            _shot(page, sel, out / name)
        numbers = {"comparison": _table(page, ".il-compare .il-cmp-table")}
        page.locator(".il-lab-run").scroll_into_view_if_needed()
        page.click(".il-lab-run")
        page.wait_for_function("/finished|done|stopped|error/.test(document.querySelector("
                               "'.il-lab-status').textContent)", timeout=300_000)
        # the Lab is taller than the window: an element's screenshot shows only what the
        # notebook's scroll box lets through, so the window is made tall enough for all of it
        tall = page.locator(".il-lab").first.bounding_box()["height"] + 400
        page.set_viewport_size({"width": 1400, "height": int(max(900, tall))})
        page.wait_for_timeout(1500)
        _shot(page, ".il-lab", out / "lab.png")
        numbers["lab"] = _table(page, ".il-lab-runs")
        page.set_viewport_size({"width": 1400, "height": 900})
        page.click(".lm-MenuBar-itemLabel:text-is('Settings')")
        page.hover(".lm-Menu-itemLabel:text-is('Theme')")
        page.click(".lm-Menu-itemLabel:text-is('JupyterLab Dark')")
        page.wait_for_function("document.body.dataset.jpThemeLight === 'false'", timeout=30_000)
        page.wait_for_timeout(1500)
        _shot(page, ".il-timeline", out / "scheduler_timeline_dark.png")
        _shot(page, ".il-kv-map", out / "kv_block_map_dark.png")
        page.click(".lm-MenuBar-itemLabel:text-is('Settings')")
        page.hover(".lm-Menu-itemLabel:text-is('Theme')")
        page.click(".lm-Menu-itemLabel:text-is('JupyterLab Light')")
        browser.close()
    if a.numbers:
        from inferlab.lab.protocol import write_result
        cmd = f"python -m inferlab.tools.showcase --out {a.out} --numbers {a.numbers}"
        print("wrote", write_result(a.numbers, cmd, numbers))
    return _report(errors)


def _table(page, selector: str) -> dict:
    """A table the page shows, as {first cell of a row: {column: cell}}: the numbers the
    pictures show, for the README's caption (``inferlab results render``)."""
    rows = page.eval_on_selector_all(f"{selector} tr", "rs => rs.map(r => [...r.children]"
                                     ".map(c => c.textContent.trim()))")
    head, body = rows[0], rows[1:]
    return {r[0]: dict(zip(head[1:], r[1:])) for r in body}


def _report(errors: list[str]) -> int:
    bad = [e for e in errors if "favicon" not in e]
    for e in bad:
        print(f"browser console error: {e}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
