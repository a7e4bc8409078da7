"""Every relative link in README.md, BENCHMARKS.md and docs/*.md resolves: the file (or folder)
exists, and a #fragment names a heading of the page it points to (GitHub's anchors: lower
case, punctuation dropped, spaces as hyphens)."""
from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = ["README.md", "BENCHMARKS.md", *sorted(str(p.relative_to(ROOT))
                                              for p in (ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: pathlib.Path) -> set[str]:
    heads = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


def broken(page: str) -> list[str]:
    path = ROOT / page
    bad = []
    for target in LINK.findall(path.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):            # http(s), mailto: not ours to check
            continue
        file, _, frag = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            bad.append(f"{target} (no {dest.relative_to(ROOT) if ROOT in dest.parents else dest})")
        elif frag and dest.suffix == ".md" and frag not in anchors(dest):
            bad.append(f"{target} (no heading #{frag})")
    return bad


@pytest.mark.parametrize("page", PAGES)
def test_every_relative_link_resolves(page):
    assert broken(page) == []


def test_a_broken_link_is_found(tmp_path, monkeypatch):
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    (tmp_path / "a.md").write_text("# Top\n[ok](a.md#top) [gone](b.md) [frag](a.md#nowhere)\n")
    assert broken("a.md") == ["b.md (no b.md)", "a.md#nowhere (no heading #nowhere)"]


def test_the_readme_is_a_front_door():
    """Read in a minute: at most ~150 lines, a picture of a real run in its first screen, the
    reference moved to docs/ and linked."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150, len(lines)
    assert any(line.startswith("![") for line in lines[:30])
    text = "\n".join(lines)
    for page in ("docs/reference.md", "docs/report-card.md", "docs/architecture.md"):
        assert f"]({page}" in text, page
