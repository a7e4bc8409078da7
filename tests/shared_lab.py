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

from inferlab.tools.jupyter import LabClient


class SharedLab(LabClient):
    def __init__(self, url: str, token: str, root: pathlib.Path):
        super().__init__(url, token)
        self.root = pathlib.Path(root)

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
