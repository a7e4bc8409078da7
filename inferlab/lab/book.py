"""Every chapter's figure, for writers: ``inferlab figures --out DIR [--measure] [--smoke]``.

Each chapter's figure is drawn from its recorded run (``inferlab.lab.records``:
docs/results/chapters, written once by the chapter's full run), in seconds and without
measuring: the same numbers as the report card, the chapter's notebook and README. Written
as SVG, PNG and PDF, plus the figure's JSON (what two drawings are compared on).
``measure=True`` measures the chapter again instead (seeded; ``smoke=True``: the small sizes,
and the figure's title says "smoke run"); nothing measured is written to the records.
"""
from __future__ import annotations

import importlib
import inspect
import json
import os

from .chapters import _kit, chapter_modules  # noqa: F401 (chapter_modules: book's API too)
from .chapters._display import smoke_marked    # a smoke figure says so, as in the notebooks


def chapter_figure(name: str, smoke: bool = False, measure: bool | None = None, theme=None):
    """Chapter ``name``'s plotly figure: from its record, or (``measure``, implied by
    ``smoke``) from a new seeded measurement, deterministic where the chapter can be."""
    from . import records
    mod = importlib.import_module(f"inferlab.lab.chapters.{name}")
    if measure is None:
        measure = smoke
    if not measure:
        fig = mod.figure(records.load(name)["data"])
    else:
        _kit.seed_everything(0)
        kw = {"smoke": smoke}
        if "deterministic" in inspect.signature(mod.measure).parameters:
            kw["deterministic"] = True
        fig = mod.figure(mod.measure(**kw))
        if smoke:
            fig = smoke_marked(fig, name)
    if theme not in (None, "light", "dark"):
        raise ValueError(f"theme must be light or dark, got {theme!r}")
    if theme == "dark":      # the dark template's page, text and grid (figures.py)
        fig.update_layout(template="inferlab_dark")
    return fig


def figure_json(fig) -> str:
    """The figure's data and layout as canonical JSON (sorted keys): equal runs, equal text."""
    return json.dumps(json.loads(fig.to_json()), sort_keys=True)


def build_all(out_dir, smoke: bool = False, only=None, formats=(".svg", ".png", ".pdf"),
              measure: bool | None = None, theme=None) -> list:
    """Write every chapter's figure under ``out_dir`` (``only``: chapters, "ch05" or names);
    returns the paths written."""
    from tqdm.auto import tqdm

    from .figures import save
    os.makedirs(out_dir, exist_ok=True)
    names = [n for n in chapter_modules() if not only or n in only or n[:4] in only]
    written = []
    for name in (bar := tqdm(names, desc="figures", unit="chapter")):
        bar.set_postfix_str(name)
        fig = chapter_figure(name, smoke=smoke, measure=measure, theme=theme)
        base = os.path.join(out_dir, name)
        with open(base + ".json", "w", encoding="utf-8") as f:
            f.write(figure_json(fig))
        written.append(base + ".json")
        # a figure that sets its own size (two rows of panels: taller) is drawn at it
        size = dict(width=fig.layout.width or 1000, height=fig.layout.height or 500)
        for ext in formats:
            written.append(save(fig, base + ext, **size))
    return written
