"""Showing a chapter's figure in a notebook: a static PNG (GitHub renders it, no widget state
to save), with the interactive plotly figure one call away (``fig.show()``)."""
from __future__ import annotations


def show(fig, width: int = 1000, height: int = 480) -> None:
    from IPython.display import Image, display

    from .. import figures
    try:
        display(Image(figures.to_image(fig, "png", width=width, height=height)))
    except Exception as exc:   # noqa: BLE001 - no headless browser (e.g. some Binder images)
        msg = figures.export_failed("static image", exc)
        print(f"({msg}; showing the interactive figure)")
        fig.show()
