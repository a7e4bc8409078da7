"""Does a figure print? Its text, measured in a real browser, and its colours, by meaning.

    python -m inferlab.tools.figure_check [ch05 ...]     # the gallery's figures, article profile

For each figure, in the article profile (``inferlab.lab.article``) and exported as SVG by
kaleido, Chromium lays the SVG out and reports every text element's box and font size
(``text_boxes``); ``text_problems`` names each text that leaves the canvas, overlaps another
or is smaller than ``article.MIN_TEXT`` px at the column width. ``colour_problems`` names
each trace whose colour is not the palette's colour for what the trace shows: a trace named
after a meaning (a phase, a policy, a cache state, a verdict, a model part) wears that
meaning's colour, and a hue of one family never dresses a trace named for another.
"""
from __future__ import annotations

import re
import sys

from inferlab.lab import article, palette

OVERLAP_PX = 2.0        # boxes that share less than this in either direction only touch

_JS = """() => {
  const svg = document.querySelector('svg');
  const W = svg.width.baseVal.value, H = svg.height.baseVal.value;
  const out = [];
  for (const t of svg.querySelectorAll('text')) {
    const s = t.textContent.trim();
    if (!s) continue;
    const st = getComputedStyle(t);
    if (st.display === 'none' || st.visibility === 'hidden' || st.opacity === '0') continue;
    const r = t.getBoundingClientRect();
    if (r.width < 0.5 || r.height < 0.5) continue;
    let fs = parseFloat(st.fontSize);
    for (const sp of t.querySelectorAll('tspan')) {
      if (sp.textContent.trim()) fs = Math.min(fs, parseFloat(getComputedStyle(sp).fontSize));
    }
    out.push({text: s, x: r.x, y: r.y, w: r.width, h: r.height, size: fs,
              cls: t.getAttribute('class') || ''});
  }
  return {W, H, boxes: out};
}"""


def svg_of(fig) -> str:
    """The figure's SVG as kaleido writes it, at the figure's own size."""
    from inferlab.lab.figures import to_image
    return to_image(fig, "svg", fig.layout.width or 1000, fig.layout.height or 500).decode()


def text_boxes(page, svg: str) -> dict:
    """{W, H, boxes: [{text, x, y, w, h, size, cls}]} of ``svg`` laid out in ``page``."""
    page.set_content(f"<html><body style='margin:0'>{svg}</body></html>")
    return page.evaluate(_JS)


def text_problems(layout: dict, min_size: float = article.MIN_TEXT) -> list[str]:
    W, H, boxes = layout["W"], layout["H"], layout["boxes"]
    bad = []
    for b in boxes:
        if b["size"] < min_size - 0.01:
            bad.append(f"{b['text'][:40]!r} is {b['size']:.1f} px (< {min_size})")
        if b["x"] < -0.5 or b["y"] < -0.5 or b["x"] + b["w"] > W + 0.5 or \
                b["y"] + b["h"] > H + 0.5:
            bad.append(f"{b['text'][:40]!r} leaves the {W:.0f}x{H:.0f} canvas "
                       f"({b['x']:.0f},{b['y']:.0f} {b['w']:.0f}x{b['h']:.0f})")
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            dx = min(a["x"] + a["w"], b["x"] + b["w"]) - max(a["x"], b["x"])
            dy = min(a["y"] + a["h"], b["y"] + b["h"]) - max(a["y"], b["y"])
            if dx > OVERLAP_PX and dy > OVERLAP_PX:
                bad.append(f"{a['text'][:30]!r} overlaps {b['text'][:30]!r} "
                           f"({dx:.0f}x{dy:.0f} px)")
    return bad


# the words a trace's name uses for each meaning: a name holding one is that meaning
_WORDS = {("phase", "prefill"): r"\bprefill", ("phase", "decode"): r"\bdecode",
          ("phase", "preempted"): r"\bpreempt", ("phase", "queued"): r"\bqueued",
          ("policy", "static"): r"\bstatic\b", ("policy", "continuous"): r"\bcontinuous",
          ("policy", "chunked"): r"\bchunked", ("cache", "shared"): r"\bshared \(ref",
          ("cache", "cached"): r"\bcached\b|prefix[- ]cached|(in|from) the prefix cache",
          ("cache", "waste"): r"\bwasted?\b", ("part", "weights"): r"^weights",
          ("part", "activations"): r"^activations",
          **{("verdict", v): r"\b" + re.escape(v) + r"\b" for v in palette.VERDICT}}


def _colours(tr) -> list[str]:
    out = []
    for obj in (getattr(tr, "marker", None), getattr(tr, "line", None)):
        c = getattr(obj, "color", None) if obj is not None else None
        out += [c] if isinstance(c, str) else [x for x in (c or ()) if isinstance(x, str)]
    return [c.upper() for c in out if c.startswith("#")]


def colour_problems(fig, where: str = "") -> list[str]:
    bad = []
    for tr in fig.data:
        name = (getattr(tr, "name", None) or "").lower()
        meant = [m for m, rx in _WORDS.items() if re.search(rx, name)]
        for c in _colours(tr):
            fam = palette.family_of(c)
            if fam is None and not palette.is_grey(c):
                known = any(c == v for d in palette.FAMILIES.values() for v in d.values())
                if not known:
                    bad.append(f"{where}: trace {name!r} wears {c}, in no palette family")
                continue
            if fam and meant and fam not in meant:
                bad.append(f"{where}: trace {name!r} shows {meant[0][1]} but wears "
                           f"{fam[1]}'s {fam[0]} colour {c}")
            if fam and not meant and name:
                bad.append(f"{where}: trace {name!r} wears {fam[1]}'s {fam[0]} colour {c} "
                           f"without naming it")
    return bad


def gallery_figures(only=None) -> list[tuple[str, object]]:
    """(stem, figure) for every picture the gallery draws from the records."""
    from inferlab.tools.gallery import chapter_figures, view_figures
    figs = [(s, f) for s, _, f in view_figures()] + \
        [(s, f) for s, _, f in chapter_figures(only=only)]
    return [(s, f) for s, f in figs if not only or s in only or s[:4] in only]


def main(argv=None) -> int:
    from playwright.sync_api import sync_playwright

    from inferlab.tools.jupyter import CHROMIUM, CHROMIUM_ARGS
    only = (argv if argv is not None else sys.argv[1:]) or None
    failed = 0
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": article.COLUMN, "height": 900})
        for stem, fig in gallery_figures(only):
            for dark in (False, True):
                twin = article.profile(fig, dark=dark, cores=2)
                probs = text_problems(text_boxes(page, svg_of(twin)))
                probs += colour_problems(fig, stem) if not dark else []
                name = stem + ("-dark" if dark else "")
                print(f"{name}: {'ok' if not probs else f'{len(probs)} problems'}")
                for msg in probs:
                    print("   ", msg)
                failed += bool(probs)
        browser.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
