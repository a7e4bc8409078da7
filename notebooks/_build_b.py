"""Write notebooks 06-10 from the specs in _chapters_b.py (and run them in smoke mode).

    python notebooks/_build_b.py            # write, then execute with INFERLAB_SMOKE=1
    python notebooks/_build_b.py --no-run   # write only (no outputs)

Used until/unless notebooks/build_notebooks.py takes the specs over.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import nbformat

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _chapters_b import CHAPTERS  # noqa: E402


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


def run(nb, path) -> float:
    from nbclient import NotebookClient
    os.environ["INFERLAB_SMOKE"] = "1"
    t = time.perf_counter()
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": HERE}}).execute()
    return time.perf_counter() - t


def main(argv=None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--no-run", action="store_true")
    p.add_argument("only", nargs="*", help="notebook names (e.g. 06_chunked_prefill)")
    args = p.parse_args(argv)
    for spec in CHAPTERS:
        if args.only and spec["name"] not in args.only:
            continue
        path = os.path.join(HERE, spec["name"] + ".ipynb")
        nb = build(spec)
        took = None if args.no_run else run(nb, path)
        nbformat.validate(nb)
        nbformat.write(nb, path)
        size = os.path.getsize(path) / 1e6
        print(f"{path}: {size:.2f} MB" + (f", ran in {took:.0f} s" if took else ""))


if __name__ == "__main__":
    main()
