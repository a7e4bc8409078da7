"""Static HTML exports that show every view offline: ``inferlab export-html NB``.

A view's output holds two pictures of it: the live widget
(``application/vnd.jupyter.widget-view+json``) and a PNG of its figure (``image/png``,
``widgets/_base.py``). nbconvert's HTML exporter prefers the widget whenever the notebook
saved its widget state, and renders it with JavaScript fetched from a CDN: a reader with no
network sees an empty box where each view was. ``StaticViews`` is an nbconvert
preprocessor that keeps the PNG and drops the widget where both exist (a widget without a
picture, such as an un-run Lab, becomes a one-line note), then drops the saved widget state
so the page loads no widget JavaScript at all. The notebook file itself is not changed.

    inferlab export-html notebooks/00_tour.ipynb            # -> notebooks/00_tour.html
    jupyter nbconvert --to html \\
        --HTMLExporter.preprocessors='["inferlab.lab.static_export.StaticViews"]' NB.ipynb
"""
from __future__ import annotations

import html
import pathlib

from nbconvert.preprocessors import Preprocessor

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
NOTE = ("<p><em>{text}: an interactive widget; open the notebook in Jupyter and run it "
        "to use it.</em></p>")


class StaticViews(Preprocessor):
    """Widget outputs become their static picture (the PNG beside them); see the module."""

    def preprocess(self, nb, resources):
        nb, resources = super().preprocess(nb, resources)
        widgets = nb.metadata.get("widgets", {})
        widgets.pop(WIDGET_STATE, None)
        if not widgets:
            nb.metadata.pop("widgets", None)
        return nb, resources

    def preprocess_cell(self, cell, resources, index):
        for out in cell.get("outputs", []):
            data = out.get("data")
            if not data or WIDGET_VIEW not in data:
                continue
            del data[WIDGET_VIEW]
            if "image/png" not in data and "text/html" not in data:
                text = str(data.get("text/plain", "widget"))
                data["text/html"] = NOTE.format(text=html.escape(text))
        return cell, resources


def export_html(notebook, out=None) -> pathlib.Path:
    """Write ``notebook`` as a self-contained HTML page (pictures inline as base64 PNG)."""
    import nbformat
    from nbconvert import HTMLExporter
    src = pathlib.Path(notebook)
    out = pathlib.Path(out) if out else src.with_suffix(".html")
    exporter = HTMLExporter()
    exporter.register_preprocessor(StaticViews(), enabled=True)
    body, _ = exporter.from_notebook_node(nbformat.read(src, as_version=4),
                                          resources={"metadata": {"name": src.stem}})
    out.write_text(body, encoding="utf-8")
    return out
