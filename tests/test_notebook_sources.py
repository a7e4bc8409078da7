"""The notebooks are generated from their sources: notebooks/NN_name.py (jupytext percent
format) is paired with notebooks/NN_name.ipynb, and the committed .ipynb carries exactly the
cells of its source (outputs aside). After editing a .py, run `make notebooks-sync` (inputs
only) or `make notebooks NB=NN_name` (and execute); see the Makefile.
"""
from __future__ import annotations

import json
import pathlib

import jupytext
import nbformat
import pytest

from inferlab.tools import nb_outputs

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
FIX = "re-sync it with `make notebooks-sync NB={name}`"


def _names(pattern: str) -> set[str]:
    # conftest.py and any other helper module there is not a notebook source
    return {p.stem for p in NOTEBOOKS.glob(pattern) if p.stem[:2].isdigit()}


SOURCES, NOTEBOOK_FILES = _names("*.py"), _names("*.ipynb")


def test_every_source_has_its_notebook_and_back():
    assert SOURCES, "no notebooks/NN_*.py sources found"
    no_ipynb = sorted(SOURCES - NOTEBOOK_FILES)
    no_py = sorted(NOTEBOOK_FILES - SOURCES)
    assert not no_ipynb, f"sources without a committed .ipynb: {no_ipynb} (run `make notebooks-sync`)"
    assert not no_py, (f"notebooks without a .py source: {no_py} "
                       "(create it: jupytext --set-formats ipynb,py:percent notebooks/NAME.ipynb)")


def _cells(nb) -> list[tuple[str, str]]:
    return [(c.cell_type, c.source) for c in nb.cells]


def first_difference(name: str, want: list[tuple[str, str]], have: list[tuple[str, str]]) -> str | None:
    """A readable description of the first cell where `have` (.ipynb) differs from `want` (.py)."""
    for i, (w, h) in enumerate(zip(want, have)):
        if w != h:
            return (f"{name}: cell {i} differs between {name}.py and {name}.ipynb\n"
                    f"--- {name}.py ({w[0]}):\n{w[1]}\n--- {name}.ipynb ({h[0]}):\n{h[1]}")
    if len(want) != len(have):
        i = min(len(want), len(have))
        extra, where = (want, f"{name}.py") if len(want) > len(have) else (have, f"{name}.ipynb")
        return (f"{name}: {name}.py has {len(want)} cells, {name}.ipynb has {len(have)}; "
                f"first extra cell {i} only in {where} ({extra[i][0]}):\n{extra[i][1]}")
    return None


@pytest.mark.parametrize("name", sorted(SOURCES & NOTEBOOK_FILES))
def test_committed_notebook_matches_its_source(name):
    py = NOTEBOOKS / f"{name}.py"
    source = jupytext.read(py)
    committed = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    for nb, what in ((source, f"{name}.py"), (committed, f"{name}.ipynb")):
        formats = nb.metadata.get("jupytext", {}).get("formats", "")
        assert "py:percent" in formats and "ipynb" in formats, (
            f"{what} is not paired (jupytext formats {formats!r}, want 'ipynb,py:percent')")
    diff = first_difference(name, _cells(source), _cells(committed))
    if diff is not None:
        pytest.fail(diff + "\n" + FIX.format(name=name), pytrace=False)


def test_first_difference_names_the_cell():
    a = [("markdown", "# t"), ("code", "x = 1")]
    assert first_difference("nb", a, list(a)) is None
    msg = first_difference("nb", a, [("markdown", "# t"), ("code", "x = 2")])
    assert "nb: cell 1 differs" in msg and "x = 1" in msg and "x = 2" in msg
    msg = first_difference("nb", a, a[:1])
    assert "first extra cell 1 only in nb.py" in msg


def _bar_nb(value: float, shown: str) -> dict:
    kid = {"a": ("HTMLModel", {"value": "generate:\u2007100%"}),
           "b": ("FloatProgressModel", {"min": 0.0, "max": 4.0, "value": value}),
           "c": ("HTMLModel", {"value": "\u20074/4\u2007[00:01&lt;00:00]"})}
    state = {k: {"model_name": m, "state": s} for k, (m, s) in kid.items()}
    state["box"] = {"model_name": "HBoxModel",
                    "state": {"children": [f"IPY_MODEL_{k}" for k in kid]}}
    out = {"output_type": "display_data", "metadata": {},
           "data": {nb_outputs.WIDGET_VIEW: {"model_id": "box"}, "text/plain": shown}}
    return {"cells": [{"cell_type": "code", "outputs": [out]}],
            "metadata": {"widgets": {nb_outputs.WIDGET_STATE: {"state": state}}}}


def test_a_saved_progress_bar_shows_where_the_run_ended():
    nb = _bar_nb(4.0, "generate:   0%|          | 0/4 [00:00<?, ?req/s]")
    assert nb_outputs.finish_progress_bars(nb) == 1
    text = nb["cells"][0]["outputs"][0]["data"]["text/plain"]
    assert text == "generate: 100%|██████████| 4/4 [00:01<00:00]", text
    assert nb_outputs.finish_progress_bars(nb) == 0          # already final: left alone
    half = _bar_nb(2.0, "x")
    nb_outputs.finish_progress_bars(half)
    assert "|█████     |" in half["cells"][0]["outputs"][0]["data"]["text/plain"]


@pytest.mark.parametrize("name", sorted(NOTEBOOK_FILES))
def test_committed_progress_bars_end_where_their_run_ended(name):
    nb = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text(encoding="utf-8"))
    assert nb_outputs.finish_progress_bars(nb) == 0, \
        f"{name}: a saved progress bar shows its first state (run make notebooks)"


def test_a_heavy_widget_and_what_refers_to_it_leave_the_saved_state():
    big = {"model_name": "FigureModel", "state": {"_esm": "x" * 2000}}
    view = {"model_name": "AnyModel", "state": {"plot": "IPY_MODEL_big"}}
    box = {"model_name": "VBoxModel", "state": {"children": ["IPY_MODEL_view"]}}
    small = {"model_name": "HTMLModel", "state": {"value": "ok"}}
    outs = [{"output_type": "display_data",
             "data": {nb_outputs.WIDGET_VIEW: {"model_id": m}, "image/png": "iVBO",
                      "text/plain": m}} for m in ("box", "small")]
    nb = {"cells": [{"cell_type": "code", "outputs": outs}],
          "metadata": {"widgets": {nb_outputs.WIDGET_STATE: {"state": {
              "big": big, "view": view, "box": box, "small": small}}}}}
    assert nb_outputs.drop_heavy_widgets(nb, limit=1000) == 3
    assert list(nb["metadata"]["widgets"][nb_outputs.WIDGET_STATE]["state"]) == ["small"]
    assert set(outs[0]["data"]) == {"image/png", "text/plain"}       # the picture stays
    assert nb_outputs.WIDGET_VIEW in outs[1]["data"]
    assert nb_outputs.drop_heavy_widgets(nb, limit=1000) == 0



def _unseen_on_github(nb: dict) -> list[str]:
    """Outputs GitHub cannot show: a widget (no widget JavaScript there) or HTML with inline
    styles (stripped there) that carries no PNG beside it; a progress bar's text is its
    picture (its text/plain is the bar, at the run's end)."""
    state = nb.get("metadata", {}).get("widgets", {}).get(nb_outputs.WIDGET_STATE, {}) \
        .get("state", {})
    bad = []
    for i, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if "image/png" in data:
                continue
            view = data.get(nb_outputs.WIDGET_VIEW)
            widget = view is not None and nb_outputs.bar_text(state, view["model_id"]) is None
            styled = "style=" in "".join(data.get("text/html", ""))
            if widget or styled:
                bad.append(f"cell {i}: {''.join(data.get('text/plain', ''))[:60]!r}")
    return bad


def test_an_output_github_cannot_show_is_found():
    nb = _bar_nb(4.0, "generate: 100%|██████████| 4/4 [00:01<00:00]")     # a bar: its text
    outs = nb["cells"][0]["outputs"]
    view = {"output_type": "display_data", "data": {nb_outputs.WIDGET_VIEW: {"model_id": "m"},
                                                    "text/plain": "TokenStream(...)"}}
    html = {"output_type": "display_data", "data": {"text/html": "<b style='color:red'>x</b>"}}
    outs += [view, html]
    assert len(_unseen_on_github(nb)) == 2
    view["data"]["image/png"] = html["data"]["image/png"] = "iVBO"
    assert _unseen_on_github(nb) == []


@pytest.mark.parametrize("name", sorted(NOTEBOOK_FILES))
def test_every_widget_and_styled_output_carries_an_image(name):
    nb = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text(encoding="utf-8"))
    bad = _unseen_on_github(nb)
    assert not bad, f"{name}: outputs GitHub shows blank or unstyled: {bad} (make notebooks)"
