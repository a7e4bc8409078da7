"""The house rules: which floor may import which (docs/architecture.md, DESIGN.md).

Walks every module's imports (module level and inside functions) with ``ast`` and fails on
any import that breaks a floor's rule. ``python tests/test_layout.py`` prints the graph of
floors (and ``--modules`` the module graph) for a look.
"""
from __future__ import annotations

import ast
import pathlib
import sys
from collections import defaultdict

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE_DIRS = {"inferlab": ROOT / "inferlab", "inferlab.kernels": ROOT / "kernels",
                "inferlab.widgets": ROOT / "widgets"}
# floor -> the floors it may import (besides itself and inferlab.errors)
MAY_IMPORT = {
    "core": set(),
    "model": {"core", "kernels"},
    "sim": {"core"},
    "engine": {"core", "model", "sim", "threads"},
    "observe": {"core", "sim", "engine", "root"},
    "connect": {"core", "observe", "sim", "root"},
    "serve": {"core", "engine", "observe"},
    "lab": {"core", "model", "sim", "engine", "observe", "kernels", "widgets", "connect",
            "serve", "root"},
    "widgets": {"core", "model", "sim", "engine", "observe", "lab", "connect", "serve", "root"},
    "bench": {"core", "model", "sim", "engine", "observe", "lab", "widgets", "kernels", "root",
              "cli", "connect", "tools", "serve", "threads"},
    "tools": {"core", "model", "sim", "engine", "observe", "lab", "widgets", "kernels", "root",
              "cli", "connect", "serve", "threads"},
    "kernels": {"core"},
    "cli": {"core", "model", "engine", "observe", "lab", "bench", "sim", "connect", "serve",
            "tools", "root"},
    "root": {"core", "engine", "threads"},
    "threads": set(),
}


def modules() -> dict[str, pathlib.Path]:
    out = {}
    for pkg, d in PACKAGE_DIRS.items():
        for f in d.rglob("*.py"):
            rel = f.relative_to(d)
            if pkg == "inferlab" and rel.parts[0] in ("kernels", "widgets"):
                continue
            parts = [p for p in rel.with_suffix("").parts if p != "__init__"]
            out[".".join([pkg, *parts])] = f
    return out


def floor(mod: str) -> str:
    """core, model, ..., engine, cli, errors (a top-level module), or root (the package)."""
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "root"


def imports(mods: dict[str, pathlib.Path]):
    """(importer, imported module, line) for every inferlab import in the tree."""
    for mod, f in mods.items():
        pkg = mod.split(".") if f.name == "__init__.py" else mod.split(".")[:-1]
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(pkg[:len(pkg) - node.level + 1] + ([base] if base else []))
                names = [f"{base}.{a.name}" for a in node.names]
                targets = [n if n in mods else base for n in names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for t in targets:
                if t.split(".")[0] == "inferlab" and t != mod:
                    while t not in mods and "." in t:
                        t = t.rsplit(".", 1)[0]
                    yield mod, t, node.lineno


def violations() -> list[str]:
    bad = []
    for src, dst, line in imports(modules()):
        a, b = floor(src), floor(dst)
        if a == b or b == "errors" or dst == "inferlab.errors":
            continue
        if b not in MAY_IMPORT.get(a, set()):
            bad.append(f"{src} (line {line}) imports {dst}: floor '{a}' may import only "
                       f"{sorted(MAY_IMPORT.get(a, set()) | {a, 'errors'})}")
    return bad


def test_every_import_follows_the_floor_rules():
    bad = violations()
    assert not bad, "layout rules broken:\n  " + "\n  ".join(bad)


def test_the_checker_catches_a_broken_rule(tmp_path, monkeypatch):
    """A core module importing torch-side code must be reported (the test can fail)."""
    fake = tmp_path / "inferlab"
    (fake / "core").mkdir(parents=True)
    (fake / "model").mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "core" / "__init__.py").write_text("")
    (fake / "model" / "__init__.py").write_text("")
    (fake / "model" / "runner.py").write_text("X = 1\n")
    (fake / "core" / "scheduler.py").write_text("def f():\n    from ..model.runner import X\n")
    monkeypatch.setitem(PACKAGE_DIRS, "inferlab", fake)
    monkeypatch.setitem(PACKAGE_DIRS, "inferlab.kernels", tmp_path / "none")
    monkeypatch.setitem(PACKAGE_DIRS, "inferlab.widgets", tmp_path / "none")
    bad = violations()
    assert len(bad) == 1 and "inferlab.core.scheduler (line 2) imports inferlab.model.runner" \
        in bad[0]


def test_modules_stay_readable():
    """One concept per module: none grows far past ~300 lines."""
    big = {m: n for m, f in modules().items()
           if (n := len(f.read_text(encoding="utf-8").splitlines())) > 350}
    assert not big, f"modules over 350 lines (split them): {big}"


if __name__ == "__main__":
    edges = defaultdict(set)
    for src, dst, _ in imports(modules()):
        if "--modules" in sys.argv:
            edges[src].add(dst)
        elif floor(src) != floor(dst):
            edges[floor(src)].add(floor(dst))
    for k in sorted(edges):
        print(f"{k:28s} -> {', '.join(sorted(edges[k]))}")
