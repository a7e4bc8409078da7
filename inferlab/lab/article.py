"""The article profile: a figure as a writer lifts it into an article, unchanged.

    figures.save(fig, "ch05.png", profile="article")      # ch05.png, ch05-dark.png,
                                                            # ch05.caption.md, ch05.alt.txt
    inferlab figures --id ch05 --profile article           # from the chapter's record

What changes from the notebook's figure (``profile``), and nothing else:

- a fixed width, ``COLUMN`` CSS pixels, drawn at ``SCALE`` (1600 px PNGs), and every text at
  least ``MIN_TEXT`` px at that width (fonts smaller than that are raised, ``<sup>`` dropped);
- the title keeps its heading; the "clock: ..." line and the caveats under it leave the
  picture for the caption file, and a short tag of what the clock is stays inside
  (``clock_tag``: "measured, 2-core CPU", "projection: H100 cost model", "counted by the
  engine"), so a figure lifted out of its caption still says where its numbers come from;
- the legend sits at the foot of the picture, clear of the title and the axes;
- the dark twin (``dark=True``) is the same figure on the dark page: the dark template, and
  the neutrals that would vanish there swapped (``palette.on_dark``); hues stay.

``caption(fig, source)`` writes what left the picture: the heading, the tag, the caveats and
the record's line (date, CPU, command), plus an alt text naming what is drawn. This module
only transforms figures; ``figures.save`` writes the files.
"""
from __future__ import annotations

import re

import plotly.graph_objects as go

from . import palette

COLUMN = 800          # CSS px: an article's column
SCALE = 2             # device scale of the PNG: 1600 px wide
MIN_TEXT = 14         # px at the column width: no text smaller
TITLE_TEXT = 19
TAG_TEXT = 14
CHARS = 70            # a title line's characters at TITLE_TEXT px in the column

_SUP = re.compile(r"<br>\s*<sup>(.*?)</sup>", re.S)
_TAGS = re.compile(r"</?(sup|sub|small)>")
_GPUS = ("H100", "H200", "A100", "L4", "B200", "GH200", "A10G", "L40S")


def parse_title(text: str | None) -> tuple[str, str | None, list[str]]:
    """(heading, clock, notes) of a house title: the heading before the first ``<sup>`` line,
    the text of the line that begins "clock:", and every other ``<sup>`` line."""
    text = text or ""
    subs = [s.strip() for s in _SUP.findall(text)]
    heading = _SUP.sub("", text).strip()
    clock, notes = None, []
    for s in subs:
        for part in s.split(" · "):
            if part.lower().startswith("clock:") and clock is None:
                clock = part.split(":", 1)[1].strip()
            else:
                notes.append(part)
    return heading, clock, notes


def clock_tag(clock: str | None, cores: int | None = None) -> str:
    """The clock in a few words, for inside the picture: what a reader must know to trust
    the numbers (the long form goes to the caption)."""
    if not clock:
        return ""
    c = clock.lower()
    gpu = next((g for g in _GPUS if g.lower() in c), None)
    cpu = f"{cores}-core CPU" if cores else "this CPU"
    if gpu and ("simulat" in c or "cost model" in c or "projection" in c):
        counted = " · counts measured" if ("count" in c or "probabilit" in c) else ""
        return f"projection: {gpu} cost model{counted}"
    if "wall" in c:
        return f"measured, {cpu}"
    if "resident" in c or "vmhwm" in c:
        return "measured: memory resident"
    if "count" in c or c.startswith("none") or "bytes" in c:
        return "counted by the engine"
    return clock if len(clock) <= 40 else clock[:39] + "…"


def wrap(heading: str, width: int = CHARS) -> str:
    """``heading`` broken into lines of at most ``width`` characters (at spaces; its own
    ``<br>`` kept): a title that fits the column."""
    out = []
    for line in heading.split("<br>"):
        words, cur = line.split(" "), ""
        for w in words:
            if cur and len(_TAGS.sub("", cur + " " + w)) > width:
                out.append(cur)
                cur = w
            else:
                cur = (cur + " " + w) if cur else w
        out.append(cur)
    return "<br>".join(out)


def _above_plot(lay: dict) -> int:
    """Pixels the texts set above the plot area need (subplot titles, a ratio line): the
    tallest of the annotations at the top of the paper, by their lines; 8 when none."""
    need = 8
    for a in lay.get("annotations") or ():
        if a.get("yref") == "paper" and (a.get("y") or 0) >= 0.99 and a.get("text"):
            need = max(need, 8 + 22 * (a["text"].count("<br>") + 1))
    return need


def _legend_rows(traces) -> int:
    """Rows a horizontal legend takes at the column width (item: symbol + text + gap)."""
    names = {t.get("name") for t in traces if t.get("name") and t.get("showlegend") is not
             False and t.get("type") not in ("heatmap",)}
    rows, x = (1 if names else 0), 0
    for n in names:
        w = 46 + 0.56 * MIN_TEXT * len(n)
        if x and x + w > COLUMN - 20:
            rows, x = rows + 1, 0
        x += w
    return rows


def _walk(node, fn, key=""):
    """Apply ``fn(key, parent, name)`` to every leaf of a figure's dict, depth first."""
    if isinstance(node, dict):
        for k, v in list(node.items()):
            if isinstance(v, (dict, list)):
                _walk(v, fn, k)
            else:
                fn(key, node, k)
    elif isinstance(node, list):
        for v in node:
            if isinstance(v, (dict, list)):
                _walk(v, fn, key)


def _raise_fonts(parent_key: str, node: dict, name: str) -> None:
    if name == "size" and parent_key.endswith("font") and isinstance(node[name], (int, float)):
        node[name] = max(node[name], MIN_TEXT)
    if name == "text" and isinstance(node[name], str):
        node[name] = _TAGS.sub("", node[name])


def _darken(parent_key: str, node: dict, name: str) -> None:
    v = node[name]
    if name.endswith("color") and isinstance(v, str):
        node[name] = palette.on_dark(v)


def _darken_lists(node) -> None:
    """Colour arrays (one colour per bar) are lists: swap their neutrals too."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k.endswith("color") and isinstance(v, list):
                node[k] = [palette.on_dark(c) for c in v]
            else:
                _darken_lists(v)
    elif isinstance(node, list):
        for v in node:
            _darken_lists(v)


def profile(fig: go.Figure, dark: bool = False, cores: int | None = None,
            height: int | None = None) -> go.Figure:
    """A copy of ``fig`` in the article profile (see the module's text); ``fig`` is left
    as it was. ``height``: the picture's height at the column width (default: the
    figure's own aspect, kept)."""
    spec = fig.to_plotly_json()
    spec = {"data": [dict(t) for t in spec["data"]], "layout": dict(spec["layout"])}
    lay = spec["layout"]
    title = lay.get("title") or {}
    heading, clock, _ = parse_title(title.get("text") if isinstance(title, dict) else None)
    tag = clock_tag(clock, cores)
    w0 = lay.get("width") or 1000
    h0 = lay.get("height") or 500
    heading = wrap(heading)
    lines = heading.count("<br>") + 1 if heading else 0
    top = 28 + lines * (TITLE_TEXT + 7) + (TAG_TEXT + 10 if tag else 0)
    muted = palette.on_dark(palette.MUTED_TEXT) if dark else palette.MUTED_TEXT
    text = heading + (f"<br><span style='font-size:{TAG_TEXT}px;color:{muted}'>{tag}</span>"
                      if tag else "")
    margin = dict(lay.get("margin") or {})
    margin["t"] = top + _above_plot(lay)
    legend = dict(lay.get("legend") or {})
    rows = 0
    if legend.get("orientation", "h") == "h" and legend.get("yref") != "paper":
        rows = _legend_rows(spec["data"])
        legend.update(orientation="h", x=12 / COLUMN, xanchor="left", y=0, yanchor="bottom",
                      yref="container", xref="container", itemwidth=30)
        # the x axis title (one more row of ticks on a two-level axis), then the legend
        two_level = any(isinstance(t.get("x"), (list, tuple)) and t["x"] and
                        isinstance(t["x"][0], (list, tuple)) for t in spec["data"])
        margin["b"] = 58 + (24 if two_level else 0) + rows * 22 + 8
    lay.update(width=COLUMN, legend=legend, margin=margin,
               height=height or round(max(h0 * COLUMN / w0, 360) + top * 0.4 + rows * 22),
               font={**(lay.get("font") or {}), "size": MIN_TEXT})
    # plotly anchors a title of several lines 17 px higher than one of a single line
    lay["title"] = dict(text=text or None, font=dict(size=TITLE_TEXT), x=12 / COLUMN,
                        xref="container", xanchor="left",
                        y=1 - (10 if "<br>" not in text else 27) / lay["height"],
                        yref="container", yanchor="top")
    _walk(spec, _raise_fonts)
    if dark:
        lay["template"] = "inferlab_dark"
        _walk(spec, _darken)
        _darken_lists(spec)
    out = go.Figure(spec["data"], spec["layout"])
    if dark:
        out.update_layout(template="inferlab_dark")
    return out


def caption(fig: go.Figure, source: str | None = None, cores: int | None = None,
            extra: list[str] | tuple = ()) -> tuple[str, str]:
    """(caption in Markdown, alt text) for ``fig``: what the article profile took out of the
    picture (the clock in full, the caveats), the ``source`` line (the record: date, CPU,
    command) and ``extra`` lines (the record's verdicts and numbers)."""
    heading, clock, notes = parse_title(fig.layout.title.text)
    plain = _TAGS.sub("", heading.replace("<br>", " ")).replace("<b>", "").replace("</b>", "")
    tag = clock_tag(clock, cores)
    lines = [f"**{plain}.**" + (f" {tag[0].upper() + tag[1:]}." if tag else "")]
    if clock:
        lines.append(f"Clock: {clock}.")
    lines += [n.rstrip(".") + "." for n in notes]
    lines += list(extra)
    if source:
        lines.append(f"Source: {source}.")
    kinds: dict[str, list[str]] = {}
    for tr in fig.data:
        name = getattr(tr, "name", None)
        if name and getattr(tr, "showlegend", None) is not False and name not in kinds.get(
                tr.type, []):
            kinds.setdefault(tr.type, []).append(name)
    what = {"bar": "bars", "scatter": "lines and points", "heatmap": "a grid",
            "waterfall": "a waterfall"}
    drawn = "; ".join(f"{what.get(k, k)} for {', '.join(v[:8])}" for k, v in kinds.items())
    alt = f"{plain}." + (f" Drawn: {drawn}." if drawn else "") + (
        f" {tag[0].upper() + tag[1:]}." if tag else "")
    return "\n\n".join(lines) + "\n", alt + "\n"
