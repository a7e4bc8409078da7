"""One source for every number: README's and BENCHMARKS' tables rendered from result files.

A benchmark (``inferlab bench coldstart --out``, ``inferlab bench engine|vllm|gemm|roofline
--out``) or the report card (``inferlab claims --json``) writes a result file: JSON with the
numbers, the command that measured them, the date, the CPU and the machine's load. The files
that back the docs live in ``docs/results/``. In README.md, BENCHMARKS.md and the pages of
docs/ (``DOCS``) a rendered block sits between two markers::

    <!-- results:coldstart -->
    ... (written by the renderer; do not edit by hand) ...
    <!-- /results:coldstart -->

or, inside a sentence or a table cell, on one line:
``<!-- results:coldstart-warm -->3.66 s (...)<!-- /results:coldstart-warm -->``.

    inferlab results render    rewrite every marked block from its result file
    inferlab results check     list the blocks that differ from their result file (exit 1)

Each rendering names the CPU the numbers were measured on (a caption line, or the
parenthesis after an inline number). A block whose result file is missing is an error that
names the file and the command that writes it; ``tests/test_results_tables.py`` runs the check.
"""
from __future__ import annotations

import dataclasses
import json
import pathlib
import re

from inferlab.tools.result_tables import (TABLES, ResultsError, Table, caption,  # noqa: F401
                                          machine, short)

REPO = pathlib.Path(__file__).resolve().parents[2]
RESULTS_DIR = "docs/results"
DOCS = ("README.md", "BENCHMARKS.md", "docs/reference.md", "docs/report-card.md")

MARKER = re.compile(r"<!-- results:(?P<name>[\w.-]+) -->(?P<body>.*?)<!-- /results:(?P=name) -->",
                    re.S)
OPENING = re.compile(r"<!-- results:([\w.-]+) -->")


# ---- result files ---------------------------------------------------------------------------

def load(path, shown: str | None = None) -> dict:
    """A result file's JSON; a missing or malformed file raises ``ResultsError`` naming it
    (as ``shown``, else its path)."""
    path = pathlib.Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ResultsError(f"result file {shown or path} does not exist") from None
    except (OSError, ValueError) as e:
        raise ResultsError(f"result file {shown or path} cannot be read: {e}") from None


# ---- blocks in the docs ---------------------------------------------------------------------

@dataclasses.dataclass
class Block:
    doc: str          # the document's name as given
    name: str
    old: str          # the text between the markers now
    new: str | None   # what the result file renders (None: it could not be rendered)
    error: str | None = None

    @property
    def differs(self) -> bool:
        return self.new is None or self.old != self.new


def _body(table: Table, text: str) -> str:
    if table.inline:
        if "\n" in text:
            raise ResultsError(f"{table.name}: an inline rendering must be one line")
        return text
    return f"\n\n{text}\n\n"          # blank lines: the markers never join a table


def render_text(text: str, doc: str = "<text>", root=REPO, tables=None) -> tuple[str, list]:
    """``text`` with every marked block rendered from its result file under
    ``root``/docs/results, and the blocks (old and new body). A block that cannot be rendered
    keeps its text and carries the error."""
    tables = TABLES if tables is None else tables
    root = pathlib.Path(root)
    opened = [m.group(1) for m in OPENING.finditer(text)]
    closed = {m.group("name") for m in MARKER.finditer(text)}
    unpaired = sorted(set(opened) - closed)
    if unpaired:
        raise ResultsError(f"{doc}: no closing marker for {', '.join(unpaired)} "
                           f"(<!-- /results:NAME -->)")
    blocks: list[Block] = []

    def one(m: re.Match) -> str:
        name, old = m.group("name"), m.group("body")
        table = tables.get(name)
        try:
            if table is None:
                raise ResultsError(f"unknown results block {name!r}; known: "
                                   f"{', '.join(sorted(tables))}")
            path = root / RESULTS_DIR / table.file
            shown = f"{RESULTS_DIR}/{table.file}"
            try:
                res = load(path, shown)
            except ResultsError as e:
                raise ResultsError(f"{e}; `{table.produce}` writes it") from None
            new = _body(table, table.render(res, shown))
        except (ResultsError, KeyError, TypeError, ValueError) as e:
            msg = str(e) if isinstance(e, ResultsError) else (
                f"{type(e).__name__}: {e} (the result file lacks what the table needs)")
            blocks.append(Block(doc, name, old, None, msg))
            return m.group(0)
        blocks.append(Block(doc, name, old, new))
        return f"<!-- results:{name} -->{new}<!-- /results:{name} -->"

    return MARKER.sub(one, text), blocks


def render(docs=DOCS, root=REPO, write: bool = True) -> list[Block]:
    """Render every marked block of ``docs`` (paths relative to ``root``); with ``write``,
    save the documents whose blocks changed. Returns every block."""
    root = pathlib.Path(root)
    blocks = []
    for doc in docs:
        path = root / doc
        if not path.exists() and doc not in DOCS[:2]:   # a tree without the docs/ pages
            continue
        text = path.read_text(encoding="utf-8")
        new, found = render_text(text, doc, root)
        if doc == "README.md":                 # its Binder badge, from pyproject's setting
            new, badge = _binder_badge(new, doc, root)
            found += badge
        blocks += found
        if write and new != text:
            path.write_text(new, encoding="utf-8")
    return blocks


def _binder_badge(text: str, doc: str, root) -> tuple[str, list[Block]]:
    """README's Binder badge rendered from pyproject.toml's [project.urls] Repository
    (``binder_link``), as a block named ``binder``."""
    from inferlab.tools import binder_link
    try:
        new, old, badge = binder_link.render_text(text, root)
    except binder_link.BadgeError as e:
        return text, [Block(doc, "binder", "", None, str(e))]
    return new, ([] if old is None else [Block(doc, "binder", old, badge)])


def check(docs=DOCS, root=REPO) -> list[str]:
    """One line per block that differs from its result file's rendering, or cannot be
    rendered (a missing file, an unknown name); empty when every table is current."""
    return [f"{b.doc}: results:{b.name}: " + (b.error or "differs from its result file "
                                                "(run `inferlab results render`)")
            for b in render(docs, root, write=False) if b.differs]


def main(action: str = "check", root=REPO, out=print) -> int:
    """``inferlab results render|check``."""
    if action == "render":
        blocks = render(root=root)
        failed = [b for b in blocks if b.new is None]
        for b in blocks:
            out(f"{b.doc}: results:{b.name}: " + (f"NOT RENDERED: {b.error}" if b.new is None
                                                   else "changed" if b.old != b.new
                                                   else "unchanged"))
        return 1 if failed else 0
    problems = check(root=root)
    for p in problems:
        out(p)
    n = len(render(root=root, write=False))
    out(f"{n - len(problems)} of {n} marked blocks match their result files")
    return 1 if problems else 0
