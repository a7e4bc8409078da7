"""The package's import graph, beyond the floor rules of test_layout.py:

* no import loop anywhere (module-level strongly connected components, imports inside
  functions included: a deferred import is still a dependency);
* no module imports another module's private (underscore) name;
* model/ uses only the public API of inferlab.kernels (its ``__all__``), nothing inside it;
* nothing named ``kernels`` can be imported by accident from the repository root, where
  transformers 5 probes for Hugging Face's ``kernels`` package.

``python tests/test_import_graph.py`` prints the loops, the depth of each floor and the
module graph as Graphviz ``dot`` for a look.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict

import pytest

from test_layout import PACKAGE_DIRS, ROOT, floor, imports, modules


def graph(mods=None) -> dict[str, set[str]]:
    g = defaultdict(set)
    for src, dst, _ in imports(mods or modules()):
        g[src].add(dst)
    return g


def loops(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in list(g):
        if root in index:
            continue
        work = [(root, iter(sorted(g.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def private_imports(mods=None) -> list[str]:
    """``from X import _name`` where ``_name`` is not a module: a private name crossing."""
    mods = mods or modules()
    bad = []
    for mod, f in mods.items():
        pkg = mod.split(".") if f.name == "__init__.py" else mod.split(".")[:-1]
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = node.module or ""
            if node.level:
                base = ".".join(pkg[:len(pkg) - node.level + 1] + ([base] if base else []))
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__") \
                        and f"{base}.{a.name}" not in mods:
                    bad.append(f"{mod} (line {node.lineno}) imports {base}.{a.name}")
    return bad


def kernels_api() -> set[str]:
    tree = ast.parse((PACKAGE_DIRS["inferlab.kernels"] / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__"
                                                for t in node.targets):
            return set(ast.literal_eval(node.value))
    return set()


def model_reaching_into_kernels(mods=None) -> list[str]:
    mods = mods or modules()
    api, bad = kernels_api(), []
    for mod, f in mods.items():
        if floor(mod) != "model":
            continue
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "inferlab.kernels"):
                names = [a.name for a in node.names]
                if node.module != "inferlab.kernels" or not set(names) <= api:
                    bad.append(f"{mod} (line {node.lineno}): from {node.module} import "
                               f"{', '.join(names)}")
            elif isinstance(node, ast.Import):
                bad += [f"{mod} (line {node.lineno}): import {a.name}" for a in node.names
                        if a.name.startswith("inferlab.kernels.")]
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id == "kernels" and node.attr not in api:
                bad.append(f"{mod} (line {node.lineno}): kernels.{node.attr} is not in "
                           "inferlab.kernels.__all__")
    return bad


def test_no_import_loops():
    assert loops(graph()) == []


def test_no_private_name_is_imported_across_modules():
    assert private_imports() == []


def test_model_uses_only_the_public_api_of_kernels():
    assert kernels_api() >= {"paged_attention_decode", "gemm", "decode_pass"}
    assert model_reaching_into_kernels() == []


def test_the_checks_catch_a_loop_a_private_import_and_a_reach_into_kernels(tmp_path,
                                                                          monkeypatch):
    fake = tmp_path / "inferlab"
    (fake / "model").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "model" / "__init__.py").write_text("")
    (fake / "model" / "a.py").write_text("from .b import _helper\n")
    (fake / "model" / "b.py").write_text("def f():\n    from . import a\n_helper = 1\n")
    (fake / "model" / "c.py").write_text("from inferlab.kernels.numba_cpu import LOCK\n"
                                         "from inferlab import kernels\nkernels.secret()\n")
    monkeypatch.setitem(PACKAGE_DIRS, "inferlab", fake)
    monkeypatch.setitem(PACKAGE_DIRS, "inferlab.widgets", tmp_path / "none")
    mods = modules()
    assert loops(graph(mods)) == [["inferlab.model.a", "inferlab.model.b"]]
    assert private_imports(mods) == ["inferlab.model.a (line 1) imports inferlab.model.b._helper"]
    bad = model_reaching_into_kernels(mods)
    assert len(bad) == 2 and "numba_cpu" in bad[0] and "kernels.secret" in bad[1]


def _from_root(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split("\n")


def test_kernels_from_the_repository_root_is_the_installed_package():
    """transformers 5 depends on Hugging Face's ``kernels`` package and imports it by that name.
    Run from the project root (``python -m pytest``, ``python -m inferlab...``), the name first
    finds our ``kernels/`` folder: it must step aside for the installed package (transformers
    then loads), loading nothing of ours a second time; inferlab.kernels still works beside it."""
    import importlib.metadata as md
    try:
        md.version("kernels")
    except md.PackageNotFoundError:
        pytest.skip("Hugging Face's kernels package is not installed (transformers < 5)")
    lines = _from_root(
        "import sys, pathlib\n"
        "from transformers import LlamaConfig\n"          # imports kernels, as CI's failure did
        "import kernels\n"
        f"print(str(pathlib.Path(kernels.__file__).resolve().parent) == {str(ROOT / 'kernels')!r},\n"
        "      hasattr(kernels, 'CUDAProperties'), hasattr(kernels, 'write_kv'))\n"
        "import inferlab.kernels as k\n"
        "print(k.resolve_backend('reference'), k.__name__)\n")
    assert lines[:2] == ["False True False", "reference inferlab.kernels"], lines


def test_kernels_from_the_repository_root_without_the_package_is_empty():
    """Where no ``kernels`` is installed (here: site-packages hidden before the import), the
    folder comes back as an empty module with no file: transformers reads "not installed"."""
    lines = _from_root(
        "import sys, numpy\n"                             # what the folder imports itself
        "sys.path[:] = [p for p in sys.path if 'site-packages' not in p]\n"
        "import kernels\n"
        "print(getattr(kernels, '__file__', None), hasattr(kernels, 'write_kv'),\n"
        "      sorted(m for m in sys.modules if m.startswith('kernels.')))\n")
    assert lines[0] == "None False []", lines


if __name__ == "__main__":
    g = graph()
    print("loops:", loops(g) or "none")

    def depth(m, seen=()):
        return 1 + max((depth(d, seen + (m,)) for d in g.get(m, ()) if d not in seen
                        and floor(d) == floor(m)), default=0)
    per_floor = defaultdict(int)
    for m in modules():
        per_floor[floor(m)] = max(per_floor[floor(m)], depth(m))
    print("longest chain of modules within each floor:", dict(sorted(per_floor.items())))
    print("digraph inferlab {")
    for src in sorted(g):
        for dst in sorted(g[src]):
            print(f'  "{src[9:]}" -> "{dst[9:]}";')
    print("}")
