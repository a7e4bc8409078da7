"""Saved notebook outputs as GitHub shows them: a progress bar's text ends where the run
ended, and no widget's saved state makes the notebook too big to render.

    python -m inferlab.tools.nb_outputs notebooks/00_quickstart.ipynb [...]

GitHub and nbviewer do not run widgets: for a widget output they show its ``text/plain``,
which is the widget's repr when it was *displayed*. For tqdm's notebook bar that is
"generate: 0%| | 0/4", although the run went to 4/4 and the notebook's stored widget state
says so. ``make notebooks`` runs this after executing a notebook: each progress bar (an HBox
of HTML, FloatProgress, HTML, as tqdm.notebook builds it) gets the text of its final state.

A plotly ``FigureWidget`` (the KV map's live figure) saves its whole plotly.js bundle (~5 MB)
as its module in the widget state, once per figure: that alone passes GitHub's limit. Such
heavy models are dropped from the saved state, with every model that refers to them, and
their outputs become the PNG and the text GitHub shows (a widget output whose model is gone
would be an error in JupyterLab); running the notebook draws them live again.
Nothing else in the notebook changes.
"""
from __future__ import annotations

import html
import json
import pathlib
import sys

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
BAR_WIDTH = 10
HEAVY = 500_000          # bytes of saved state above which a widget model is dropped


def _model(state: dict, ref: str) -> dict:
    return state.get(ref.removeprefix("IPY_MODEL_"), {})


def bar_text(state: dict, model_id: str) -> str | None:
    """The final text of the tqdm bar ``model_id``, or None if it is not one."""
    box = state.get(model_id, {})
    kids = box.get("state", {}).get("children", [])
    if box.get("model_name") != "HBoxModel" or len(kids) != 3:
        return None
    left, bar, right = (_model(state, k) for k in kids)
    names = [m.get("model_name") for m in (left, bar, right)]
    if names != ["HTMLModel", "FloatProgressModel", "HTMLModel"]:
        return None
    b = bar["state"]
    span = float(b.get("max", 0)) - float(b.get("min", 0))
    done = 0 if span <= 0 else round(BAR_WIDTH * (float(b.get("value", 0)) - b.get("min", 0))
                                     / span)
    cells = "█" * max(0, min(BAR_WIDTH, done)) + " " * (BAR_WIDTH - max(0, min(BAR_WIDTH, done)))

    def text(m):
        return html.unescape(str(m["state"].get("value", ""))).replace("\u2007", " ")
    return f"{text(left)}|{cells}|{text(right)}"


def finish_progress_bars(nb: dict) -> int:
    """Rewrite the text/plain of every saved progress bar from its final widget state;
    returns how many were rewritten."""
    state = nb.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    n = 0
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []):
            view = out.get("data", {}).get(WIDGET_VIEW)
            if not view:
                continue
            new = bar_text(state, view.get("model_id", ""))
            old = out["data"].get("text/plain", "")
            if new is not None and "".join(old) != new:    # nbformat may keep a list of lines
                out["data"]["text/plain"] = new
                n += 1
    return n


def drop_heavy_widgets(nb: dict, limit: int = HEAVY) -> int:
    """Drop widget models whose saved state exceeds ``limit`` bytes, and the models that refer
    to them (``IPY_MODEL_<id>`` in their state), from the notebook's saved widget state;
    returns how many were dropped."""
    state = nb.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    text = {k: json.dumps(m) for k, m in state.items()}
    drop = {k for k, t in text.items() if len(t) > limit}
    grown = True
    while grown:                                # parents of dropped models, transitively
        more = {k for k, t in text.items() if k not in drop
                and any(f"IPY_MODEL_{d}" in t for d in drop)}
        grown = bool(more)
        drop |= more
    for k in drop:
        del state[k]
    for cell in nb.get("cells", []):             # their outputs: the PNG and the text stay
        for out in cell.get("outputs", []):
            view = out.get("data", {}).get(WIDGET_VIEW)
            if view and view.get("model_id") in drop:
                del out["data"][WIDGET_VIEW]
    return len(drop)


def main(argv=None) -> int:
    paths = argv if argv is not None else sys.argv[1:]
    for p in map(pathlib.Path, paths):
        nb = json.loads(p.read_text(encoding="utf-8"))
        n = finish_progress_bars(nb)
        dropped = drop_heavy_widgets(nb)
        if n or dropped:
            p.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"{p}: {n} progress bar(s) set to their final state, {dropped} heavy widget "
              f"model(s) dropped from the saved state")
    return 0


if __name__ == "__main__":
    sys.exit(main())
