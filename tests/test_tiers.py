"""The two tiers (tests/tiers.py): every full-tier test names a default-tier test that exists
and still proves its promise, and CI's rotating shards together run the whole full tier, each
test once."""
from __future__ import annotations

import ast
import pathlib

import pytest
import tiers

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _collected(request) -> list:
    return request.config.stash[tiers.ALL_ITEMS]


def _exists_in_source(nodeid: str) -> bool:
    """A default-tier test that this session did not collect: its file defines it."""
    path, _, name = nodeid.partition("::")
    f = ROOT / path
    if not f.is_file():
        return False
    if f.suffix == ".ipynb":
        return not name
    name = name.split("[")[0].split("::")[-1]
    tree = ast.parse(f.read_text(encoding="utf-8"))
    return any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name
               for n in ast.walk(tree))


def test_every_full_test_names_a_default_test_that_exists(request):
    items = _collected(request)
    default = {i.nodeid for i in items if tiers.covered_by(i) is None}
    default |= {n.split("[")[0] for n in default} | {n.split("::")[0] for n in default}
    full = {i.nodeid: tiers.covered_by(i) for i in tiers.full_tier(items)}
    full_ids = {n.split("[")[0] for n in full}
    bad = [f"{n} -> {c}" for n, c in full.items()
           if c in full_ids or (c not in default and not _exists_in_source(c))]
    assert not bad, ("full-tier tests naming no default-tier test that covers them:\n"
                     + "\n".join(bad))


def test_a_full_notebook_names_a_default_test():
    for name, cover in tiers.FULL_NOTEBOOKS.items():
        assert (ROOT / "notebooks" / name).is_file(), name
        assert _exists_in_source(cover), f"{name} -> {cover}"


class _Item:
    def __init__(self, nodeid, full=None):
        self.nodeid, self._full = nodeid, full

    def get_closest_marker(self, name):
        return pytest.mark.full(self._full).mark if self._full and name == "full" else None


def test_the_shards_cover_the_full_tier_each_test_once(request):
    items = _collected(request)
    if len({i.nodeid.split("::")[0] for i in tiers.full_tier(items)}) < tiers.SHARDS:
        items = [_Item(f"tests/test_{f}.py::test_{t}", full="tests/test_x.py::test_y")
                 for f in "abcdefg" for t in range(3)] + [_Item("tests/test_z.py::test_0")]
    full = [i.nodeid for i in tiers.full_tier(items)]
    shards = [[i.nodeid for i in tiers.shard(items, k, tiers.SHARDS)]
              for k in range(tiers.SHARDS)]
    assert all(shards), [len(s) for s in shards]             # each shard runs something
    assert sorted(sum(shards, [])) == sorted(full)            # together: the full tier, once
    files = [{n.split("::")[0] for n in s} for s in shards]
    assert all(not (a & b) for k, a in enumerate(files) for b in files[k + 1:])  # whole files


class _Bare(_Item):
    def get_closest_marker(self, name):
        return pytest.mark.full.mark                # @pytest.mark.full with no test named


def test_a_bare_full_mark_and_a_bad_tier_are_errors():
    with pytest.raises(pytest.UsageError, match="needs the default-tier test"):
        tiers.covered_by(_Bare("tests/test_a.py::test_b"))
    for bad in ("fast", "full:4/4", "full:x", "full:-1/4"):
        with pytest.raises(pytest.UsageError, match="INFERLAB_TIER"):
            tiers.parse(bad)
    assert tiers.parse("full:3/4") == ("full", 3, 4) and tiers.parse(None)[0] == "default"
