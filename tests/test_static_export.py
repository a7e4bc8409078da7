"""Offline static exports show every view as its picture (issue 12, item 8).

An executed notebook keeps its widget state, so nbconvert's HTML exporter shows each view as a
widget rendered by JavaScript from a CDN: empty boxes without network. ``StaticViews``
(``inferlab export-html``) keeps each view's PNG instead and loads no widget JavaScript.
"""
import re

import nbformat
import pytest
from nbclient import NotebookClient
from nbconvert import HTMLExporter

from inferlab.lab.static_export import WIDGET_STATE, WIDGET_VIEW, StaticViews

IMG = re.compile(r'<img [^>]*src="data:image/png;base64,')   # an inline picture
CELLS = [
    "import inferlab as il\nfrom inferlab.widgets import KVBlockMap, Lab\n"
    "eng = il.Engine('tiny', num_blocks=32, block_size=4)",
    "kv = KVBlockMap(eng)\n"
    "_ = eng.generate(['a b c'], il.SamplingParams(max_tokens=3, ignore_eos=True), use_tqdm=False)\n"
    "kv.detach()\nkv",
    "Lab()",                       # a widget with no picture (nothing has run in it)
]


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    path = tmp_path_factory.mktemp("export") / "views.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    nbformat.write(nb, path)
    return path, nb


def _html(nb, static: bool) -> str:
    exporter = HTMLExporter()
    if static:
        exporter.register_preprocessor(StaticViews(), enabled=True)
    body, _ = exporter.from_notebook_node(nbformat.from_dict(nb))
    return body


def test_executed_notebook_has_widget_and_png(executed):
    _, nb = executed
    data = nb.cells[1].outputs[-1]["data"]
    assert WIDGET_VIEW in data and "image/png" in data, sorted(data)
    assert data[WIDGET_VIEW]["model_id"] in nb.metadata["widgets"][WIDGET_STATE]["state"]


def test_plain_export_shows_the_widget_not_the_picture(executed):
    """What a reader got before: the widget wins, the picture is left out."""
    body = _html(executed[1], static=False)
    assert not IMG.search(body) and WIDGET_VIEW in body


def test_static_export_shows_each_view_as_its_png(executed):
    body = _html(executed[1], static=True)
    assert len(IMG.findall(body)) == 1               # the KV map's picture, inline
    assert WIDGET_VIEW not in body and WIDGET_STATE not in body
    assert "html-manager" not in body                # no widget JavaScript from a CDN
    assert "Lab(model=" in body and "interactive widget" in body


def test_export_html_command(executed, tmp_path):
    from inferlab.cli import main
    path, _ = executed
    out = tmp_path / "page.html"
    assert main(["export-html", str(path), "-o", str(out)]) == 0
    assert len(IMG.findall(out.read_text(encoding="utf-8"))) == 1
    assert WIDGET_VIEW in nbformat.read(path, as_version=4).cells[1].outputs[-1]["data"]
