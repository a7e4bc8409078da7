"""Every chapter's figure, regenerated for writers: ``inferlab figures --out DIR [--smoke]``.

Each chapter module in ``inferlab.lab.chapters`` is measured and drawn, and its figure written as
SVG, PNG and PDF, plus the figure's JSON (what two runs are compared on). Runs are seeded,
and chapters that accept ``deterministic=True`` leave out their wall-clock measurements,
so a busy machine cannot change the picture: two runs give the same figure data.
"""
from __future__ import annotations

import importlib
import inspect
import json
import os
import pkgutil

from .chapters import _kit


def chapter_modules() -> list[str]:
    """Names of the chapter modules (``chNN_topic``), in chapter order."""
    from . import chapters
    return sorted(m.name for m in pkgutil.iter_modules(chapters.__path__)
                  if m.name.startswith("ch") and m.name[2:4].isdigit())


def chapter_figure(name: str, smoke: bool = False):
    """Measure chapter ``name`` and return its plotly figure (seeded, deterministic if it can)."""
    mod = importlib.import_module(f"inferlab.lab.chapters.{name}")
    _kit.seed_everything(0)
    kw = {"smoke": smoke}
    if "deterministic" in inspect.signature(mod.measure).parameters:
        kw["deterministic"] = True
    return mod.figure(mod.measure(**kw))


def figure_json(fig) -> str:
    """The figure's data and layout as canonical JSON (sorted keys): equal runs, equal text."""
    return json.dumps(json.loads(fig.to_json()), sort_keys=True)


def build_all(out_dir, smoke: bool = False, only=None, formats=(".svg", ".png", ".pdf")) -> list:
    """Write every chapter's figure under ``out_dir``; returns the paths written."""
    from tqdm.auto import tqdm

    from .figures import save
    os.makedirs(out_dir, exist_ok=True)
    names = [n for n in chapter_modules() if not only or n in only or n[:4] in only]
    written = []
    for name in (bar := tqdm(names, desc="figures", unit="chapter")):
        bar.set_postfix_str(name)
        fig = chapter_figure(name, smoke=smoke)
        base = os.path.join(out_dir, name)
        with open(base + ".json", "w", encoding="utf-8") as f:
            f.write(figure_json(fig))
        written.append(base + ".json")
        # a figure that sets its own size (two rows of panels: taller) is drawn at it
        size = dict(width=fig.layout.width or 1000, height=fig.layout.height or 500)
        for ext in formats:
            written.append(save(fig, base + ext, **size))
    return written
