"""The Lab's default run with its views live in JupyterLab + chromium beside the same run
headless, A B A B, under the environment ``make lab`` gives (the user's OpenMP settings taken
out: inferlab's own policy in force, inferlab/threads.py).

    inferlab bench lab [--repeats 3] [--out docs/results/lab-live-amd.json]

A run is what a new user does first: ``Lab()`` with its defaults (SmolLM2, the 12 bundled
chat requests, continuous, paged), Run, wait for "done". Live: the Lab shown in a notebook
in JupyterLab, Run clicked in the page (headless chromium, driven by playwright), all three
views drawing. Headless: the same Lab in a plain Python process, its views built, no page.
Each side has a warm-up run first. Per run: output tok/s, ITL p50/p99 and TTFT p99 (the runs
table's row), Run -> done (the click to the "done" status; in the page for the live runs),
the lag from the engine's last step to "done", and what the views sent: plot redraws and
trait pushes per step, FigureWidgets made, comm messages.
"""
from __future__ import annotations

import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

from .common import busy_neighbour, table, write_result


# --- in the kernel (or the headless process): one JSON line per finished run ----------------
class Probe:
    """Writes a row to ``path`` (JSON lines) each time ``lab`` says done: the runs table's
    numbers, the Lab's timing, and what its views sent during the run."""

    def __init__(self, lab, path, side: str):
        self.lab, self.path, self.side = lab, str(path), side
        self.messages = self.bytes = 0
        self._count_messages()
        self._last = self._counts()
        lab.status.observe(self._on_status, "value")

    def _count_messages(self) -> None:
        """Count (and size) every comm message this process sends."""
        cls = next((c for c in type(self.lab.comm).__mro__ if "publish_msg" in c.__dict__),
                   None)
        if cls is None:       # no kernel: nothing is sent
            return
        probe, publish = self, cls.publish_msg

        def counted(comm, msg_type, data=None, metadata=None, buffers=None, **keys):
            probe.messages += 1
            probe.bytes += len(json.dumps(data, default=str)) + sum(
                memoryview(b).nbytes for b in buffers or ())
            return publish(comm, msg_type, data, metadata, buffers, **keys)
        cls.publish_msg = counted

    def _counts(self) -> dict:
        c = {"messages": self.messages, "bytes": self.bytes}
        for v in self.lab.views:
            c[v.kind] = {"draws": v._redraw.count, "pushes": v.num_pushes,
                         "plots_made": v.plots_made}
        return c

    def _on_status(self, change) -> None:
        if not str(change["new"]).startswith(("done", "error", "stopped")):
            return
        lab, now = self.lab, self._counts()
        row = dict(lab.runs.rows[-1]) if str(change["new"]).startswith("done") else {}
        steps = max(1, int(row.get("steps", 1)))
        t = lab.timing
        out = {"side": self.side, "status": change["new"][:200],
               "load": round(os.getloadavg()[0], 2),
               **{k: row.get(k) for k in ("output_tok_s", "itl_p50_ms", "itl_p99_ms",
                                          "ttft_p99_ms", "steps", "output_tokens")},
               "run_to_done_s": t["done"] - t["start"] if "done" in t else None,
               "done_lag_s": t["done"] - t["engine_done"] if "done" in t else None,
               "messages": now["messages"] - self._last["messages"],
               "bytes": now["bytes"] - self._last["bytes"], "views": {}}
        for v in lab.views:
            d = {k: now[v.kind][k] - self._last[v.kind][k] for k in now[v.kind]}
            out["views"][v.kind] = {**d, "draws_per_step": d["draws"] / steps,
                                    "pushes_per_step": d["pushes"] / steps}
        self._last = now
        with open(self.path, "a") as f:
            f.write(json.dumps(out) + "\n")


def headless(path: str, runs: int = 2) -> None:
    """``runs`` runs of the default Lab in this process (the first a warm-up), no page."""
    from inferlab.widgets import Lab
    lab = Lab()
    Probe(lab, path, "headless")
    for _ in range(runs):
        lab.start()
        lab.thread.join()


# --- driving both sides ---------------------------------------------------------------------
# OpenMP's wait policy of each arm; {}: inferlab's own (passive, inferlab/threads.py); the
# libgomp default given as the user's setting (which inferlab leaves alone)
POLICIES = {"passive (inferlab)": {}, "spin (libgomp default)": {"GOMP_SPINCOUNT": "300000"}}


CELL = ("from inferlab.widgets import Lab\nfrom inferlab.bench.lab_live import Probe\n"
        "lab = Lab()\nprobe = Probe(lab, {path!r}, 'live')\nlab")

# click Run; wait until the status says run `n` ended; seconds in the page
CLICK_JS = """async (n) => {
  const t0 = performance.now();
  document.querySelector('button.il-lab-run').click();
  const ended = new RegExp('^(done|error|stopped)[^]*run ' + n + '\\\\b|^error');
  while (!ended.test(document.querySelector('.il-lab-status').innerText)) {
    if (performance.now() - t0 > 600000) throw new Error('no end of run ' + n);
    await new Promise(r => setTimeout(r, 20));
  }
  return (performance.now() - t0) / 1e3;
}"""


def _rows(path) -> list[dict]:
    p = pathlib.Path(path)
    return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []


def _wait_rows(path, n: int, timeout: float = 60.0) -> list[dict]:
    end = time.monotonic() + timeout
    while len(_rows(path)) < n and time.monotonic() < end:
        time.sleep(0.1)
    return _rows(path)


def _kernels(root: pathlib.Path) -> dict:
    """One kernel spec per policy (its environment), under ``root``/share: {policy: name}."""
    names = {}
    for i, (policy, env) in enumerate(POLICIES.items()):
        d = root / "share" / "kernels" / f"il-policy-{i}"
        d.mkdir(parents=True)
        (d / "kernel.json").write_text(json.dumps({
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": policy, "language": "python", "env": env}))
        names[policy] = d.name
    return names


class _Side:
    """One policy's live Lab (a notebook in its own page) and its headless runs."""

    def __init__(self, root, browser, url, token, policy, kernel, errors):
        from inferlab.tools.jupyter import run_all, write_notebook
        self.root, self.policy, self.n = root, policy, 0
        self.live_path = root / f"{kernel}.jsonl"
        write_notebook(root / f"{kernel}.ipynb", [CELL.format(path=str(self.live_path))],
                       kernel=kernel)
        self.page = browser.new_page(viewport={"width": 1280, "height": 900})
        self.page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: errors.append(str(e)))
        run_all(self.page, url, token, f"{kernel}.ipynb")
        self.page.wait_for_selector("button.il-lab-run:not([disabled])", timeout=300_000)
        self.page.wait_for_selector(".il-lab .js-plotly-plot", timeout=120_000)

    def live(self) -> dict:
        self.n += 1
        page_s = self.page.evaluate(CLICK_JS, self.n)
        row = _wait_rows(self.live_path, self.n)[-1]
        return {**row, "policy": self.policy, "page_run_to_done_s": page_s}

    def headless(self, env) -> dict:
        path = self.root / f"headless-{os.urandom(4).hex()}.jsonl"
        proc = subprocess.run([sys.executable, "-m", "inferlab.bench.lab_live", "--headless",
                               str(path)], env={**env, **POLICIES[self.policy]},
                              capture_output=True, text=True, timeout=900)
        if proc.returncode:
            raise RuntimeError(f"headless run failed: {proc.stderr[-2000:]}")
        return {**_rows(path)[-1], "policy": self.policy}


def run(repeats: int = 3, machines=("quiet", "busy"), out=print) -> dict:
    """Per machine (quiet; busy: beside one process spinning on a core), per policy: a live
    warm-up, then ``repeats`` x (headless, live) for each policy in turn (A B A B)."""
    from playwright.sync_api import sync_playwright

    from inferlab.tools.jupyter import CHROMIUM_ARGS, CHROMIUM, jupyterlab, make_lab_env
    env = make_lab_env()
    errors: list = []
    res: dict = {}
    with tempfile.TemporaryDirectory(prefix="il-bench-lab-") as root:
        root = pathlib.Path(root)
        kernels = _kernels(root)
        server_env = {**env, "JUPYTER_PATH": str(root / "share")}
        with jupyterlab(root, env=server_env) as (url, token), sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                sides = [_Side(root, browser, url, token, pol, kernels[pol], errors)
                         for pol in POLICIES]
                for s in sides:
                    s.live()                                   # warm-up
                for machine in machines:
                    rows: list = []
                    with busy_neighbour(machine == "busy"):
                        for r in range(repeats):
                            for s in sides:
                                for row in (s.headless(env), s.live()):
                                    rows.append({**row, "machine": machine})
                                    out(f"{machine} {r + 1}/{repeats} {_line(rows[-1])}")
                    res[machine] = {"runs": rows, "median": _medians(rows)}
            finally:
                browser.close()
    return {**res, "console_errors": errors[:20]}


KEYS = ("output_tok_s", "itl_p50_ms", "itl_p99_ms", "ttft_p99_ms", "run_to_done_s",
        "done_lag_s")


def _line(r: dict) -> str:
    draws = ", ".join(f"{k.split()[0].lower()} {v['draws_per_step']:.2f}"
                      for k, v in r["views"].items())
    page = f", page {r['page_run_to_done_s']:.1f} s" if "page_run_to_done_s" in r else ""
    return (f"{r['policy']}, {r['side']:>8}: {r['output_tok_s']:.1f} tok/s, ITL p50 "
            f"{r['itl_p50_ms']:.0f} ms, Run->done {r['run_to_done_s']:.1f} s (lag "
            f"{r['done_lag_s']:.2f} s{page}), draws/step {draws}, {r['messages']} messages "
            f"({r['bytes'] / 1e6:.1f} MB), load {r['load']}")


def _medians(rows: list) -> dict:
    """{policy: {side: median of each number}, with live / headless tok/s}."""
    med: dict = {}
    for policy in dict.fromkeys(r["policy"] for r in rows):
        m = med[policy] = {}
        for side in ("headless", "live"):
            rs = [r for r in rows if r["policy"] == policy and r["side"] == side]
            m[side] = {k: statistics.median(r[k] for r in rs) for k in KEYS}
        m["live"]["page_run_to_done_s"] = statistics.median(
            r["page_run_to_done_s"] for r in rows if r["policy"] == policy and r["side"] == "live")
        m["ratio_tok_s"] = m["live"]["output_tok_s"] / m["headless"]["output_tok_s"]
    return med


def main(repeats: int = 3, out_path: str | None = None) -> int:
    res = run(repeats)
    for machine in ("quiet", "busy"):
        print(f"{machine} machine (medians of {repeats})")
        table(print, ["policy", "side", "tok/s", "ITL p50 ms", "ITL p99 ms", "TTFT p99 ms",
                      "Run->done s", "lag s", "page Run->done s"],
              [[p, side, *(f"{m[side][k]:.2f}" for k in KEYS),
                f"{m[side].get('page_run_to_done_s', float('nan')):.2f}"]
               for p, m in res[machine]["median"].items() for side in ("headless", "live")])
        for p, m in res[machine]["median"].items():
            print(f"{p}: live / headless tok/s {m['ratio_tok_s']:.2f}")
    if res["console_errors"]:
        print("console errors:", res["console_errors"][:5])
    if out_path:
        cmd = f"inferlab bench lab --repeats {repeats} --out {out_path}"
        print("written to", write_result(out_path, cmd, res))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--headless"]:
        headless(sys.argv[2])
    else:
        sys.exit(main())
