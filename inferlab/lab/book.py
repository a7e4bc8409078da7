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


def _data(name: str, smoke: bool, measure: bool | None):
    """(chapter module, its measurement): from the record, or measured again (seeded)."""
    from . import records
    mod = importlib.import_module(f"inferlab.lab.chapters.{name}")
    if measure is None:
        measure = smoke
    if not measure:
        return mod, records.load(name)["data"]
    _kit.seed_everything(0)
    kw = {"smoke": smoke}
    if "deterministic" in inspect.signature(mod.measure).parameters:
        kw["deterministic"] = True
    return mod, mod.measure(**kw)


def _finish(fig, name: str, smoke: bool, theme):
    if smoke:
        fig = smoke_marked(fig, name)
    if theme not in (None, "light", "dark"):
        raise ValueError(f"theme must be light or dark, got {theme!r}")
    if theme == "dark":      # the dark template's page, text and grid (figures.py)
        fig.update_layout(template="inferlab_dark")
    return fig


def chapter_figure(name: str, smoke: bool = False, measure: bool | None = None, theme=None):
    """Chapter ``name``'s plotly figure: from its record, or (``measure``, implied by
    ``smoke``) from a new seeded measurement, deterministic where the chapter can be."""
    mod, data = _data(name, smoke, measure)
    return _finish(mod.figure(data), name, smoke, theme)


def chapter_figures(name: str, smoke: bool = False, measure: bool | None = None,
                    theme=None) -> list[tuple[str, object]]:
    """(file stem, figure) for each of chapter ``name``'s figures: a chapter that makes
    several points draws one figure for each (its ``figures(data)``: {suffix: figure}, the
    first its main one, stem ``name``, the others ``name-suffix``); else its ``figure``."""
    mod, data = _data(name, smoke, measure)
    many = getattr(mod, "figures", None)
    figs = many(data) if many else {"": mod.figure(data)}
    return [(name + (f"-{k}" if k else ""), _finish(f, name, smoke, theme))
            for k, f in figs.items()]


def figure_json(fig) -> str:
    """The figure's data and layout as canonical JSON (sorted keys): equal runs, equal text."""
    return json.dumps(json.loads(fig.to_json()), sort_keys=True)


def build_all(out_dir, smoke: bool = False, only=None, formats=(".svg", ".png", ".pdf"),
              measure: bool | None = None, theme=None, profile: str | None = None) -> list:
    """Write every chapter's figure under ``out_dir`` (``only``: chapters, "ch05" or names);
    returns the paths written."""
    from tqdm.auto import tqdm

    from .figures import save
    os.makedirs(out_dir, exist_ok=True)
    names = [n for n in chapter_modules() if not only or n in only or n[:4] in only]
    written = []
    for name in (bar := tqdm(names, desc="figures", unit="chapter")):
        bar.set_postfix_str(name)
        for stem, fig in chapter_figures(name, smoke=smoke, measure=measure, theme=theme):
            base = os.path.join(out_dir, stem)
            with open(base + ".json", "w", encoding="utf-8") as f:
                f.write(figure_json(fig))
            written.append(base + ".json")
            if profile == "article":     # light and dark twins, caption and alt text
                notes = {"cores": os.cpu_count()} if measure or smoke else record_notes(name)
                for ext in formats:
                    written.append(save(fig, base + ext, profile="article", **notes))
                continue
            # a figure that sets its own size (two rows of panels: taller) is drawn at it
            size = dict(width=fig.layout.width or 1000, height=fig.layout.height or 500)
            for ext in formats:
                written.append(save(fig, base + ext, **size))
    return written


def record_notes(name: str) -> dict:
    """What an article figure's caption says of the record it came from: ``source`` (date,
    CPU, file in one line), ``cores`` and ``extra`` (each judged claim: verdict, measured)."""
    from . import records
    rec = records.read(records.ROOT / f"{name}{records.SUFFIX}")
    extra = [f"Claim {v['id']}: {v['verdict']}" + (f", {v['measured']}" if v.get("measured")
                                                    else "") + "."
             for v in rec.get("verdicts", [])]
    return {"source": records.source_line(rec), "cores": rec.get("cores"), "extra": extra}
