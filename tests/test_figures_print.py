"""Figures a writer publishes unchanged (issue 42): every picture the gallery and the
notebooks ship is at least 1600 px wide; every gallery figure, light and dark, in the article
profile and laid out by Chromium, keeps its text inside the canvas, no text over another,
none under 14 px at the column width; every trace wears the palette colour of what its name
says it shows. The colour families' distances are tests/test_palette.py's."""
import base64
import json
import pathlib
import struct

import plotly.graph_objects as go
import pytest

from inferlab.lab import article, palette
from inferlab.tools import figure_check

ROOT = pathlib.Path(__file__).resolve().parents[1]
GALLERY = ROOT / "docs" / "gallery"
WIDE = 1600


def _width(png: bytes) -> int:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">I", png[16:20])[0]


def _notebook_pngs():
    for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
        for i, cell in enumerate(cells):
            for out in cell.get("outputs", []):
                png = out.get("data", {}).get("image/png")
                if png:
                    yield f"{nb.name} cell {i}", base64.b64decode(png)


def test_gallery_pictures_are_wide_enough():
    pngs = sorted(GALLERY.glob("*.png"))
    assert len(pngs) >= 2 * 18, "the gallery holds every view and figure, light and dark"
    narrow = [(p.name, _width(p.read_bytes())) for p in pngs if _width(p.read_bytes()) < WIDE]
    assert not narrow, narrow


def test_notebook_pictures_are_wide_enough():
    found = list(_notebook_pngs())
    assert len(found) > 20
    narrow = [(where, _width(png)) for where, png in found if _width(png) < WIDE]
    assert not narrow, narrow


@pytest.fixture(scope="module")
def page():
    from playwright.sync_api import sync_playwright

    from inferlab.tools.jupyter import CHROMIUM, CHROMIUM_ARGS
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser.new_page(viewport={"width": article.COLUMN, "height": 900})
        browser.close()


def _problems(page, fig) -> list[str]:
    return figure_check.text_problems(figure_check.text_boxes(page, figure_check.svg_of(fig)))


def test_every_gallery_figure_prints(page):
    """Every view and chapter figure the gallery draws from the records, light and dark."""
    bad = {}
    figs = figure_check.gallery_figures()
    assert len(figs) >= 18
    for stem, fig in figs:
        for dark in (False, True):
            probs = _problems(page, article.profile(fig, dark=dark, cores=2))
            probs += [] if dark else figure_check.colour_problems(fig, stem)
            if probs:
                bad[stem + ("-dark" if dark else "")] = probs
    assert not bad, json.dumps(bad, indent=1, ensure_ascii=False)


def test_the_print_check_catches_what_it_must(page):
    """Broken on purpose: text past the edge, two texts on one spot, 10 px text, a trace
    named "decode" in a policy's colour and one in a colour no family has."""
    fig = go.Figure([go.Bar(x=[1, 2], y=[3, 4], name="decode", marker_color=palette.POLICY[
        "static"]), go.Bar(x=[1, 2], y=[1, 2], name="other", marker_color="#123456")])
    fig.update_layout(width=article.COLUMN, height=400, annotations=[
        dict(text="over the edge and beyond", x=1.02, y=0.5, xref="paper", yref="paper",
             xanchor="left", showarrow=False),
        dict(text="first text here", x=0.3, y=0.5, xref="paper", yref="paper", showarrow=False),
        dict(text="second text here", x=0.31, y=0.5, xref="paper", yref="paper",
             showarrow=False),
        dict(text="tiny", x=0.7, y=0.2, xref="paper", yref="paper", showarrow=False,
             font=dict(size=10))])
    probs = _problems(page, fig)
    assert any("leaves the" in p and "over the edge" in p for p in probs), probs
    assert any("overlaps" in p and "first text" in p for p in probs), probs
    assert any("'tiny' is 10.0 px" in p for p in probs), probs
    colours = figure_check.colour_problems(fig, "broken")
    assert any("'decode' shows decode but wears static's policy" in p for p in colours)
    assert any("#123456, in no palette family" in p for p in colours), colours
    # and the article profile mends what it can: the small text is raised to 14 px
    assert not any("'tiny'" in p for p in _problems(page, article.profile(fig)))


# ~13 s: full tier; the gallery's figures (the same drawings) print in the default tier
@pytest.mark.full("tests/test_figures_print.py::test_every_gallery_figure_prints")
def test_notebook_figures_print(page):
    """The chapter figures the committed notebooks show (their saved plotly JSON, drawn in
    the article profile by the notebook's run)."""
    bad = {}
    n = 0
    for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
        for i, cell in enumerate(cells):
            for out in cell.get("outputs", []):
                spec = out.get("data", {}).get("application/vnd.plotly.v1+json")
                if not spec:
                    continue
                n += 1
                fig = go.Figure(spec["data"], spec["layout"])
                probs = _problems(page, fig)
                if probs:
                    bad[f"{nb.name} cell {i}"] = probs
    assert n > 15
    assert not bad, json.dumps(bad, indent=1, ensure_ascii=False)
