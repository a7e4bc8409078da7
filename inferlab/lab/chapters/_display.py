"""Showing a chapter's figure in a notebook: one output that JupyterLab draws as the
interactive plotly figure (hover, zoom; the jupyterlab-plotly renderer that comes with plotly)
and GitHub, nbviewer or a plain Jupyter show as its PNG, the same figure rendered by kaleido.

The figure is shown in the article profile (``inferlab.lab.article``: the column width, text
at least 14 px, the clock as a short tag), its PNG at device scale 2; what the profile takes
out of the picture (the clock in full, the caveats) is printed under it, so the notebook
loses nothing and a figure copied out of it is the one an article would print.
"""
from __future__ import annotations

import base64
import json

PLOTLY = "application/vnd.plotly.v1+json"


def bundle(fig, width: int = 1000, height: int = 480) -> dict:
    """The figure as a display bundle in the article profile: plotly JSON (interactive) +
    PNG (static, device scale 2) + a text line naming it. Without kaleido's browser the PNG
    is left out, with a warning saying why. ``width`` and ``height``: the size the figure is
    laid out for (its own where its layout has one), scaled to the column."""
    import os

    import plotly.io as pio

    from .. import article, figures
    title = fig.layout.title.text or "figure"
    if not (fig.layout.width and fig.layout.height):
        fig = type(fig)(fig).update_layout(width=fig.layout.width or width,
                                           height=fig.layout.height or height)
    fig = article.profile(fig, cores=os.cpu_count())
    width, height = fig.layout.width, fig.layout.height
    data = {"text/plain": f"<plotly figure: {title.split('<br>')[0]}>"}
    if figures.static_images():            # off on Binder: the reader's browser draws it
        try:
            png = figures.compact_png(figures.to_image(fig, "png", width=width, height=height,
                                                       scale=article.SCALE))
            data["image/png"] = base64.b64encode(png).decode("ascii")
        except Exception as exc:   # noqa: BLE001 - no headless browser (e.g. some Binder images)
            msg = figures.export_failed("static image", exc)
            print(f"({msg}; the interactive figure only)")
    spec = json.loads(pio.to_json(fig, validate=False))
    spec.setdefault("layout", {}).setdefault("height", height)   # as tall as its PNG
    spec["config"] = {"displaylogo": False, "responsive": True}
    data[PLOTLY] = spec
    return data


SMOKE_MARK = " · smoke run: small sizes, not the recorded numbers"


def smoke_marked(fig, name: str = ""):
    """A copy of ``fig`` whose title says it is a smoke run (its numbers are not the
    chapter's recorded ones); the caller's figure stays as it was."""
    if SMOKE_MARK in (fig.layout.title.text or ""):
        return fig
    fig = type(fig)(fig)
    return fig.update_layout(title_text=(fig.layout.title.text or name) + SMOKE_MARK)


def show(fig, width: int = 1000, height: int = 480) -> None:
    """Display ``fig`` (``bundle``) and, under it, the clock in full and the caveats the
    picture leaves out; in a smoke run (INFERLAB_SMOKE=1: CI, a quick look) its title says
    so (``smoke_marked``)."""
    from IPython.display import Markdown, display

    from .. import article
    from . import smoke
    if smoke():
        fig = smoke_marked(fig)
    display(bundle(fig, width, height), raw=True)
    _, clock, notes = article.parse_title(fig.layout.title.text)
    lines = ([f"clock: {clock}"] if clock else []) + notes
    if lines:
        display(Markdown("<sub>" + " · ".join(lines) + "</sub>"))


def md_table(header: list[str], rows: list[list]) -> str:
    """A Markdown table (JupyterLab and GitHub both render it; no inline styles to strip)."""
    def cell(v) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ↵ ")
    lines = ["| " + " | ".join(map(cell, header)) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(map(cell, r)) + " |" for r in rows]
    return "\n".join(lines)
