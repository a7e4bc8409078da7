"""One JupyterLab for every browser test of a session (DESIGN.md, Tests: measure once, read
many): the ``jupyter`` fixture in conftest.py starts it on first use; each test module works in
a folder of its own under the lab's root and opens its notebooks in a workspace of their own
(nothing another test opened comes back), and its kernels are shut down when it is done.

    def test_x(jupyter):
        with jupyter.folder("views") as (url, token, folder):
            write_notebook(folder / "views.ipynb", CELLS)
            run_all(page, url, token, "views/views.ipynb")
"""
from __future__ import annotations

import contextlib
import json
import pathlib
import shutil
import urllib.request


class SharedLab:
    def __init__(self, url: str, token: str, root: pathlib.Path):
        self.url, self.token, self.root = url, token, pathlib.Path(root)

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

    @contextlib.contextmanager
    def folder(self, name: str):
        """(url, token, folder): a fresh folder ``name`` under the lab's root; on the way out
        every kernel is shut down and the lab's theme is light again."""
        folder = self.root / name
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        try:
            yield self.url, self.token, folder
        finally:
            self.shutdown_kernels()
            self.api("/lab/api/settings/@jupyterlab/apputils-extension:themes", "PUT",
                     {"raw": json.dumps({"theme": "JupyterLab Light"})})
