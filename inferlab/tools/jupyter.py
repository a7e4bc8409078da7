"""Starting JupyterLab and a headless browser: the one way the benchmarks and tests do it.

    with jupyterlab(root) as (url, token):          # 127.0.0.1, free port, its own token
        with sync_playwright() as p:
            browser, page = browser_page(p, errors)   # Debian's chromium; errors collected

Debian's chromium (``make chromium``), never a browser download. The flags keep it from
calling out to Google's services, which a closed network refuses many times a second.
"""
from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
import socket
import subprocess
import sys
import time
import urllib.request

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def write_notebook(path, cells: list[str], kernel: str = "python3") -> None:
    """A notebook of code cells (not yet run) at ``path``, for a lab to open and run in the
    kernel named ``kernel``."""
    import nbformat
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": kernel, "display_name": kernel,
                                 "language": "python"}
    pathlib.Path(path).write_text(nbformat.writes(nb), encoding="utf-8")


def run_all(page, url: str, token: str, notebook: str, dialog_timeout_ms: int = 15_000) -> None:
    """Open ``notebook`` (a path under the lab's root) in JupyterLab and Run All Cells: accepts
    the "Select Kernel" dialog of a first open and waits for the kernel to be idle first. The
    notebook opens in a workspace of its own: nothing else opened in this lab comes back."""
    workspace = re.sub(r"[^A-Za-z0-9]+", "-", notebook)
    page.goto(f"{url}/lab/workspaces/{workspace}/tree/{notebook}?token={token}")
    page.wait_for_selector(".jp-Notebook", timeout=60_000)
    try:
        page.wait_for_selector(".jp-Dialog .jp-mod-accept", timeout=dialog_timeout_ms)
        page.click(".jp-Dialog .jp-mod-accept")
    except Exception:  # noqa: BLE001 - no dialog this time
        pass
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']",
                           timeout=60_000)
    page.click(".lm-MenuBar-itemLabel:text-is('Run')")
    page.click(".lm-Menu-itemLabel:text-is('Run All Cells')")


def browser_page(playwright, errors: list, width: int = 1280, height: int = 900,
                 scale: float = 1.0):
    """(browser, page) in headless chromium; console errors and page errors go to ``errors``.
    ``scale``: the device scale factor (2 for screenshots that stay sharp on a HiDPI page)."""
    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    page = browser.new_page(viewport={"width": width, "height": height},
                            device_scale_factor=scale)
    page.on("console", lambda m: errors.append(_said(m)) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    return browser, page


def _said(message) -> str:
    """A console error's text, with the address it came from (a failed resource names none
    in its text)."""
    url = (message.location or {}).get("url")
    return f"{message.text} [{url}]" if url else message.text


def make_lab_env() -> dict:
    """The environment ``make lab`` gives a JupyterLab: this process's, without the user's
    OpenMP settings (so inferlab's own policy is what is in force, inferlab/threads.py) and
    without the tests' settings (tests/conftest.py)."""
    from inferlab.threads import USER_KNOBS
    drop = (*USER_KNOBS, "TOKENIZERS_PARALLELISM", "INFERLAB_MEASURE_CACHE", "INFERLAB_TIER")
    return {k: v for k, v in os.environ.items() if k not in drop}


class LabClient:
    """A running JupyterLab's REST API, with its token."""

    def __init__(self, url: str, token: str):
        self.url, self.token = url, token

    def api(self, path: str, method: str = "GET", body: dict | None = None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.url}{path}", method=method, data=data,
                                     headers={"Authorization": f"token {self.token}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            out = r.read()
        return json.loads(out) if out else None

    def shutdown_kernels(self) -> None:
        for s in self.api("/api/sessions"):
            self.api(f"/api/sessions/{s['id']}", "DELETE")


# JS run in the page: the state of the open notebook's code cells.
CELLS_STATE = """() => {
  const nb = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook');
  if (!nb) return {cells: 0};
  const cells = [...nb.querySelectorAll('.jp-CodeCell')];
  const prompts = cells.map(c => (c.querySelector('.jp-InputArea-prompt') || {}).textContent || '');
  const errs = [...nb.querySelectorAll('[data-mime-type="application/vnd.jupyter.error"]')]
    .map(e => e.textContent.slice(0, 800));
  return {cells: cells.length, done: prompts.filter(p => /\\[\\d+\\]/.test(p)).length,
          busy: prompts.filter(p => p.includes('*')).length, errors: errs};
}"""

# JS: for each kind, the least number of draws among its views in the page (-1: none there);
# a view's root counts its plot's redraws (common.js), the Lab by the views inside it
DRAWN = """sels => { const out = {};
  for (const [k, sel] of Object.entries(sels)) {
    const roots = [...document.querySelectorAll(sel)];
    const views = roots.flatMap(r => r.matches('.il-view') ? [r] : [...r.querySelectorAll('.il-view')]);
    out[k] = views.length ? Math.min(...views.map(v => parseInt(v.dataset.draws || '0', 10))) : -1;
  }
  return out; }"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def jupyterlab(root: pathlib.Path, started=None, env: dict | None = None,
               python: str = sys.executable, wrap=(), preexec_fn=None):
    """A JupyterLab on 127.0.0.1 (free port, own token, ``root`` as its root dir); yields
    (url, token) once it answers; stopped by its own pid afterwards. ``started`` runs while
    the server boots (e.g. to make the trace); ``env``: the server's environment as it is
    (``make_lab_env()``: what ``make lab`` gives), else this process's, offline and with the
    tokenizers' threads off (the tests'). ``python``: the interpreter whose JupyterLab (and
    kernel) runs; ``wrap``: a launcher it runs under (``["bash", "binder/start"]``);
    ``preexec_fn``: runs in the server's process before it starts (``Pod.enter``)."""
    root = pathlib.Path(root)
    port, token = _free_port(), "inferlab-bench-" + os.urandom(8).hex()
    if env is None:
        env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env = dict(env, JUPYTERLAB_SETTINGS_DIR=str(root / ".settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(root / ".ws"), JUPYTER_CONFIG_DIR=str(root / ".cfg"))
    log = open(root / "lab.log", "w")
    proc = subprocess.Popen(
        [*wrap, python, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
         "--LabApp.news_url=None", "--ServerApp.open_browser=False"]
        + (["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []),
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=preexec_fn)
    url = f"http://127.0.0.1:{port}"
    try:
        if started is not None:
            started()
        for _ in range(240):
            if proc.poll() is not None:
                break
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        else:
            raise RuntimeError("JupyterLab did not start: "
                               + (root / "lab.log").read_text()[-2000:])
        if proc.poll() is not None:
            raise RuntimeError("JupyterLab exited: " + (root / "lab.log").read_text()[-2000:])
        req = urllib.request.Request(
            f"{url}/lab/api/settings/@jupyterlab/apputils-extension:notification",
            data=json.dumps({"raw": json.dumps({"fetchNews": "false"})}).encode(), method="PUT",
            headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=10)
        yield url, token
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
