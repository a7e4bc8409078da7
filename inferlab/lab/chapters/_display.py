"""Showing a chapter's figure in a notebook: one output that JupyterLab draws as the
interactive plotly figure (hover, zoom; the jupyterlab-plotly renderer that comes with plotly)
and GitHub, nbviewer or a plain Jupyter show as its PNG, the same figure rendered by kaleido.
"""
from __future__ import annotations

import base64
import json

PLOTLY = "application/vnd.plotly.v1+json"


def bundle(fig, width: int = 1000, height: int = 480) -> dict:
    """The figure as a display bundle: plotly JSON (interactive) + PNG (static) + a text line
    naming it. Without kaleido's browser the PNG is left out, with a warning saying why."""
    import plotly.io as pio

    from .. import figures
    title = fig.layout.title.text or "figure"
    data = {"text/plain": f"<plotly figure: {title.split('<br>')[0]}>"}
    try:
        png = figures.to_image(fig, "png", width=width, height=height)
        data["image/png"] = base64.b64encode(png).decode("ascii")
    except Exception as exc:   # noqa: BLE001 - no headless browser (e.g. some Binder images)
        msg = figures.export_failed("static image", exc)
        print(f"({msg}; the interactive figure only)")
    spec = json.loads(pio.to_json(fig, validate=False))
    spec.setdefault("layout", {}).setdefault("height", height)   # as tall as its PNG
    spec["config"] = {"displaylogo": False, "responsive": True}
    data[PLOTLY] = spec
    return data


def show(fig, width: int = 1000, height: int = 480) -> None:
    from IPython.display import display
    display(bundle(fig, width, height), raw=True)
