"""Write the lab's notebooks from their specs, run them in smoke mode, check them.

    python notebooks/build_notebooks.py                  # every notebook, executed (smoke)
    python notebooks/build_notebooks.py 01_prompt_anatomy 05_batching
    python notebooks/build_notebooks.py --no-run         # cells only, no outputs

Specs live in _chapters_a.py (tour, chapters 01-05) and _chapters_b.py (06-10), each a list
``CHAPTERS`` of {"name", "module", "cells": [("md" | "code", source), ...]}. Outputs are
saved so GitHub shows something: every widget carries a static PNG beside its state.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import time

import nbformat

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_BYTES = 2_000_000            # GitHub renders notebooks up to a few MB; we stay well under


def specs() -> list[dict]:
    sys.path.insert(0, HERE)
    out = []
    for name in ("_chapters_a", "_chapters_b"):
        try:
            out += importlib.import_module(name).CHAPTERS
        except ModuleNotFoundError:
            pass
    return sorted(out, key=lambda s: s["name"])


def build(spec) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    for kind, src in spec["cells"]:
        make = nbformat.v4.new_markdown_cell if kind == "md" else nbformat.v4.new_code_cell
        nb.cells.append(make(src))
    for i, cell in enumerate(nb.cells):            # stable ids: no diff noise on rebuild
        cell["id"] = f"{spec['name'][:2]}-{i:02d}"
    return nb


def run(nb) -> float:
    from nbclient import NotebookClient
    os.environ["INFERLAB_SMOKE"] = "1"
    t = time.perf_counter()
    NotebookClient(nb, timeout=600, kernel_name="python3", store_widget_state=True,
                   resources={"metadata": {"path": HERE}}).execute()
    return time.perf_counter() - t


def tidy(nb) -> None:
    """Drop execution metadata (timestamps) so a rebuild diffs only on real changes."""
    for cell in nb.cells:
        cell.get("metadata", {}).pop("execution", None)


def check(path) -> int:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    size = os.path.getsize(path)
    if size > MAX_BYTES:
        raise SystemExit(f"{path} is {size / 1e6:.1f} MB; keep notebooks under 2 MB")
    state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json")
    if state is not None and "state" not in state:
        raise SystemExit(f"{path}: saved widget metadata lacks 'state' (GitHub rejects it)")
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if "application/vnd.jupyter.widget-view+json" in data and "image/png" not in data:
                print(f"  warning: {path}: a widget output has no static image")
    return size


def main(argv=None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--no-run", action="store_true")
    p.add_argument("only", nargs="*", help="notebook names (e.g. 01_prompt_anatomy)")
    args = p.parse_args(argv)
    for spec in specs():
        if args.only and spec["name"] not in args.only:
            continue
        path = os.path.join(HERE, spec["name"] + ".ipynb")
        nb = build(spec)
        took = None if args.no_run else run(nb)
        tidy(nb)
        nbformat.validate(nb)
        nbformat.write(nb, path)
        size = check(path)
        print(f"{path}: {size / 1e6:.2f} MB" + (f", ran in {took:.0f} s" if took else ""),
              flush=True)


if __name__ == "__main__":
    main()
