"""Update rate of the views' live plots: a 2,000-step, 200-request trace from the real engine
(tiny model) is loaded into KVBlockMap, SchedulerTimeline, TokenStream and a
BatchingComparison (the trace against itself) in a real JupyterLab (Debian's chromium,
headless, driven by playwright); each view's scrubber is moved through evenly spread steps
and each update of its plotly FigureWidget is timed *in the page*:

- ``draw``: from the scrubber's move to the plot redrawn (``dataset.drawMs``, set by ilPlot
  in common.js): the round trip through the kernel, which builds the figure at that step and
  sends what changed, plus plotly.js redrawing it;
- ``frame``: the requestAnimationFrame interval of the frame the plot changed in (style,
  layout and paint; 16.7 ms at 60 Hz when nothing overruns);
- ``latency``: from the scrubber's input event until the page has the new plot; its inverse
  over the run is the ``rate``: plot updates a second, one after the other.

    python -m inferlab.bench.widgets        # or: inferlab bench widgets

Needs jupyterlab, playwright (Python) and /usr/bin/chromium (Debian's; no browser download).
"""
from __future__ import annotations

import contextlib
import json
import os
import pathlib
import sys
import tempfile
import time

from ..core.shapes import cdiv
from ..tools.jupyter import CHROMIUM, browser_page, jupyterlab, run_all, write_notebook

BUDGET_MS = 50.0


# --- the trace -------------------------------------------------------------------------
def make_trace(path, num_requests: int = 200, min_steps: int = 2000, seed: int = 5):
    """Run ``num_requests`` synthetic requests through the tiny model (4 at a time, 256 KV
    blocks of 4 tokens, 30% shared prefixes) and save the recorded trace as JSON."""
    import inferlab as il
    from inferlab.observe.trace import Trace
    from inferlab.sim.workloads import Uniform, run_workload, synthetic
    eng = il.Engine("tiny", max_num_seqs=4, num_blocks=256, block_size=4)
    # ignore_eos: steps depend on the scheduler only; ~42 tokens x 200 / 4 seqs + prefills
    wl = synthetic(num_requests, prompt_len=Uniform(8, 48), output_len=Uniform(22, 62),
                   shared_prefix=0.3, prefix_groups=4, seed=seed)
    trace = Trace.record(eng, workload=wl.description)
    run_workload(eng, wl, progress=False)
    trace.stop()
    if len(trace.records) < min_steps:
        raise RuntimeError(f"trace has {len(trace.records)} steps, wanted >= {min_steps}")
    trace.save(path)
    return len(trace.records), len(trace.request_ids)


# --- JupyterLab ------------------------------------------------------------------------
def _notebook(path: pathlib.Path, trace_path: str):
    cells = [
        "from inferlab.observe.trace import Trace\nfrom inferlab.widgets import KVBlockMap, "
        "SchedulerTimeline, TokenStream, BatchingComparison, _base\n_base.STATIC_IMAGES = False   # widgets only: no PNG beside "
        f"them\ntrace = Trace.load({str(trace_path)!r}); len(trace)",
        "kv = KVBlockMap(trace, title='KV cache blocks (replay)'); kv",
        "tl = SchedulerTimeline(trace, title='Scheduler timeline (replay)'); tl",
        "ts = TokenStream(trace, title='Token stream (replay)'); ts",
        "cmp = BatchingComparison(trace, trace, labels=['run', 'same run'], "
        "title='Batching comparison (replay)'); cmp",
    ]
    write_notebook(path, cells)


# --- measuring in the page ---------------------------------------------------------------
# Moves one view's scrubber through `positions`; after each input event waits until the view
# has drawn (for the KV map: the map of that step, which comes back from the kernel).
SCRUB_JS = """async ({sel, positions, waitShown}) => {
  const root = document.querySelector(sel);
  const input = root.querySelector('.il-scrub-input');
  const frames = []; let on = true;
  const loop = (ts) => { frames.push(ts); if (on) requestAnimationFrame(loop); };
  requestAnimationFrame(loop);
  let drawFrame = null;
  const mo = new MutationObserver(() => { drawFrame = document.timeline.currentTime; });
  mo.observe(root, {attributes: true, attributeFilter: ['data-draws']});
  const raf = () => new Promise(r => requestAnimationFrame(r));
  const tick = () => new Promise(r => setTimeout(r, 1));
  const out = [];
  try {
    for (const k of positions) {
      const draws0 = parseInt(root.dataset.draws || '0', 10);
      drawFrame = null;
      const t0 = performance.now();
      input.value = k; input.dispatchEvent(new Event('input'));
      while (!(parseInt(root.dataset.draws || '0', 10) > draws0 &&
               (!waitShown || root.dataset.shown === String(k)))) {
        if (performance.now() - t0 > 30000) throw new Error('no draw for step ' + k);
        await tick();
      }
      const t1 = performance.now();
      const f0 = drawFrame;
      await raf(); await raf();
      const next = frames.find(ts => ts > f0);
      out.push({step: k, draw: parseFloat(root.dataset.drawMs), latency: t1 - t0,
                frame: next !== undefined && f0 !== null ? next - f0 : null});
    }
  } finally { on = false; mo.disconnect(); }
  return out;
}"""

VIEWS = {"KVBlockMap": (".il-kv-map", True), "SchedulerTimeline": (".il-timeline", False),
         "TokenStream": (".il-token-stream", False), "BatchingComparison": (".il-compare", False)}


def _stats(xs):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return {}
    def pct(p):   # nearest rank
        return xs[min(len(xs) - 1, max(0, cdiv(p * len(xs), 100) - 1))]
    return {"median": pct(50), "p90": pct(90), "max": xs[-1], "n": len(xs)}


def measure(url, token, nb_name, num_positions, shots=None):
    from playwright.sync_api import sync_playwright
    errors = []
    with sync_playwright() as p:
        browser, page = browser_page(p, errors)
        try:
            run_all(page, url, token, nb_name)
            for sel, _ in VIEWS.values():
                page.wait_for_selector(f"{sel} .js-plotly-plot", timeout=180_000)
            page.wait_for_timeout(1000)
            res, n = {}, 0
            for name, (sel, wait_shown) in VIEWS.items():
                m = int(page.wait_for_function(
                    f"(() => {{ const e = document.querySelector('{sel} .il-scrub-input');"
                    " return e && parseInt(e.max, 10) > 0 ? parseInt(e.max, 10) + 1 : 0; })()",
                    timeout=120_000).json_value())
                n = max(n, m)
                positions = sorted({round(i * (m - 1) / max(1, num_positions - 1))
                                    for i in range(num_positions)})
                warm = [m // 3, 2 * m // 3, m - 1]
                page.locator(sel).first.scroll_into_view_if_needed()
                page.evaluate(SCRUB_JS, {"sel": sel, "positions": warm, "waitShown": wait_shown})
                rows = page.evaluate(SCRUB_JS, {"sel": sel, "positions": positions,
                                                "waitShown": wait_shown})
                total_s = sum(r["latency"] for r in rows) / 1e3
                res[name] = {"steps": m, "rate_per_s": len(rows) / total_s if total_s else 0.0,
                             "draw_ms": _stats([r["draw"] for r in rows]),
                             "frame_ms": _stats([r["frame"] for r in rows]),
                             "latency_ms": _stats([r["latency"] for r in rows]),
                             "rows": rows}
                if shots is not None:
                    page.locator(sel).first.screenshot(path=str(pathlib.Path(shots) /
                                                                f"bench_{name}.png"))
            info = page.evaluate("({ua: navigator.userAgent, dpr: devicePixelRatio, "
                                 "kvPlotW: document.querySelector('.il-kv-map .js-plotly-plot').clientWidth})")
        except Exception:
            if shots is not None:
                page.screenshot(path=str(pathlib.Path(shots) / "bench_failure.png"),
                                full_page=True)
            raise
        finally:
            browser.close()
    return {"steps": n, "positions": len(positions), "views": res, "browser": info,
            "console_errors": errors}


def run(num_requests: int = 200, num_positions: int = 80, min_steps: int = 2000,
        out: str | None = None, root: str | None = None, verbose: bool = True) -> dict:
    """Make the trace, start JupyterLab, scrub both views, return (and print) the stats."""
    if not os.path.exists(CHROMIUM):
        raise RuntimeError(f"needs Debian's chromium at {CHROMIUM}: apt-get install -y chromium")
    with contextlib.ExitStack() as stack:
        if root is None:
            root = stack.enter_context(tempfile.TemporaryDirectory(prefix="il-bench-widgets-"))
        root = pathlib.Path(root)
        trace_path = root / "trace.json"
        made = {}

        def make():
            t = time.perf_counter()
            made["steps"], made["requests"] = make_trace(trace_path, num_requests, min_steps)
            made["seconds"] = time.perf_counter() - t
            if verbose:
                print(f"trace: {made['steps']} steps, {made['requests']} requests, "
                      f"{trace_path.stat().st_size / 1e6:.1f} MB JSON, made in "
                      f"{made['seconds']:.0f} s", flush=True)

        _notebook(root / "bench.ipynb", str(trace_path))
        with jupyterlab(root, started=make) as (url, token):
            res = measure(url, token, "bench.ipynb", num_positions, shots=root)
    res["trace"] = made
    res["budget_ms"] = BUDGET_MS
    if verbose:
        print(f"{res['positions']} scrubber positions over {res['steps']} steps "
              f"(browser: dpr {res['browser']['dpr']})")
        print(f"{'view':<18} {'metric':<11} {'median':>8} {'p90':>8} {'max':>8}")
        for name, v in res["views"].items():
            print(f"{name:<18} {'rate':<11} {v['rate_per_s']:8.1f} plot updates/s "
                  f"({v['steps']} scrubber steps)")
            for m in ("draw_ms", "frame_ms", "latency_ms"):
                s = v[m]
                print(f"{name:<18} {m:<11} {s['median']:8.1f} {s['p90']:8.1f} {s['max']:8.1f}")
        if res["console_errors"]:
            print("console errors:", res["console_errors"][:5])
    if out:
        pathlib.Path(out).write_text(json.dumps(res, indent=1))
    return res


def main(argv=None) -> int:
    import argparse
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--positions", type=int, default=80)
    p.add_argument("--out", default=None, help="write the full results (JSON) here")
    a = p.parse_args(argv)
    res = run(num_requests=a.requests, num_positions=a.positions, out=a.out)
    ok = all(v["frame_ms"]["p90"] < BUDGET_MS and v["draw_ms"]["p90"] < BUDGET_MS
             for v in res["views"].values())
    print("PASS" if ok else "MISS", f"(p90 < {BUDGET_MS:.0f} ms per update)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
