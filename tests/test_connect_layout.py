"""connect/ by concern (inferlab/connect/__init__.py): wire formats, feeds, the front, the plugin
inside vLLM, each in its own subpackage with one rule; imports go one way (front -> feeds ->
wire), no chain of connect imports is more than 4 imports long, and no module imports another's
private name. Uses the import walk of tests/test_layout.py.
"""
from __future__ import annotations

import ast
import functools

from test_layout import imports, modules

PKG = "inferlab.connect"
# part -> the parts of connect it may import (besides itself)
MAY_IMPORT = {"wire": set(), "feeds": {"wire"}, "front": {"feeds", "wire"},
              "plugin": {"wire"}, "": {"front", "feeds"}}
MAX_IMPORTS_DEEP = 4


def part(mod: str) -> str:
    rest = mod[len(PKG):].lstrip(".")
    return rest.split(".")[0]


def connect_edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for src, dst, _ in imports(modules()):
        if src.startswith(PKG) and dst.startswith(PKG) and src != dst:
            edges.setdefault(src, set()).add(dst)
    return edges


def longest_chain(edges) -> list[str]:
    """The longest chain of connect modules, each importing the next; fails on a loop."""
    visiting: set[str] = set()

    @functools.lru_cache(None)
    def longest(m: str) -> tuple[str, ...]:
        assert m not in visiting, f"an import loop through {m}"
        visiting.add(m)
        best: tuple[str, ...] = ()
        for d in edges.get(m, ()):
            p = longest(d)
            if len(p) > len(best):
                best = p
        visiting.discard(m)
        return (m, *best)
    return max((list(longest(m)) for m in modules() if m.startswith(PKG)), key=len)


def test_each_part_imports_only_what_its_rule_allows():
    bad = [f"{src} imports {dst}" for src, dsts in connect_edges().items() for dst in dsts
           if part(dst) != part(src) and part(dst) not in MAY_IMPORT[part(src)]]
    assert not bad, "connect/ import rules broken:\n  " + "\n  ".join(bad)


def test_nothing_outside_connect_imports_the_plugin():
    bad = [f"{src} (line {line})" for src, dst, line in imports(modules())
           if dst.startswith(f"{PKG}.plugin") and not src.startswith(f"{PKG}.plugin")]
    assert not bad, f"the plugin runs inside vLLM; nothing imports it: {bad}"


def test_connect_is_at_most_four_imports_deep_and_has_no_loops():
    chain = longest_chain(connect_edges())
    assert len(chain) - 1 <= MAX_IMPORTS_DEEP, " -> ".join(chain)


def test_no_private_name_is_imported_across_connect_modules():
    bad = []
    for mod, f in modules().items():
        if not mod.startswith(PKG):
            continue
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                bad += [f"{mod} (line {node.lineno}) imports {a.name}" for a in node.names
                        if a.name.startswith("_") and a.name != "__future__"]
    assert not bad, bad
