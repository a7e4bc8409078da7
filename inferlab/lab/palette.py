"""The one home of inferlab's colours: plotly figures and the browser views read them here.

Each colour has one meaning, and every figure takes it by that meaning (never by hue):

- ``PHASE``: what a request is doing (queued, prefill, decode, preempted, finished);
- ``POLICY``: a scheduling policy, by name (static, continuous, chunked);
- ``CACHE``: a KV cache block's state (free, used, cached, shared, waste);
- ``VERDICT``: a claim's standing on the report card (the names of inferlab.lab.verdicts);
- ``PART``: a part of the model or of its memory (weights, activations; the KV cache is
  drawn by its blocks' states, ``CACHE``);
- ``SERIES`` and ``sequence(n)``: everything else (tokens, bytes, a baseline, temperatures,
  the parts of a step): neutral greys only, told apart by lightness and labels, so no such
  series ever looks like a phase, a policy, a cache state or a verdict.

No hex value appears in two families, and no two hues of different families come closer than
``FAMILY_GAP`` in CIE76 (``distance``; tests/test_palette.py): a decode green never passes for
a "holds" green. Greys carry no hue and so no family's meaning (``is_grey``): a queued
request, a finished mark, a free block, what is not judged and the plain series are told
apart by lightness and by the labels written beside them. The hues are Okabe-Ito (safe for
the common colour-vision deficiencies) and, for the verdicts, Paul Tol's muted green, olive
and wine; the greys are chosen to read on a white page and on a dark one (NEUTRAL).

Every view draws its picture as a plotly figure from these; ``css_variables()`` gives the
phases as CSS custom properties on the views' root element (``.il-view``) for the little a
view draws in HTML beside it (inferlab.widgets prepends it to each view's stylesheet). Page colours (text, background, borders) in the browser
come from the JupyterLab theme (``--jp-*``); ``NEUTRAL`` is only for the plotly templates.
"""
from __future__ import annotations

from .verdicts import FAILS, HOLDS, HOLDS_SMALLER, ILLUSTRATED, PROJECTED, UNMEASURABLE

# Okabe-Ito hues, by name: the raw material of the meanings below (figures take meanings)
ORANGE = "#E69F00"
SKY_BLUE = "#56B4E9"
BLUISH_GREEN = "#009E73"
YELLOW = "#F0E442"
BLUE = "#0072B2"
VERMILLION = "#D55E00"
REDDISH_PURPLE = "#CC79A7"
# neutrals: text and strong lines on white, reference lines and guides, annotations
INK = "#222222"
MUTED = "#999999"
MUTED_TEXT = "#666666"
ON_FILL = "#F7F7F7"     # text written on a filled block (a request id, a token): both themes

# --- one meaning per colour (issue 26) --------------------------------------------------------
# what a request is doing: a phase; "finished" is a request's end mark (drawn in ink).
# queued is a light grey: lighter than decode's green, which a deuteranope sees as mid grey
PHASE: dict[str, str] = {"queued": "#A6A6A6", "prefill": BLUE, "decode": BLUISH_GREEN,
                         "preempted": VERMILLION, "finished": INK}
# scheduling policies, by name (never by position in a list)
POLICY: dict[str, str] = {"static": ORANGE, "continuous": REDDISH_PURPLE, "chunked": SKY_BLUE}
# KV cache block states: free (hollow), holding a request's tokens, prefix-cached (reusable),
# shared (ref count > 1), reserved but unused (waste; drawn hatched)
CACHE: dict[str, str] = {"free": "#FFFFFF", "used": "#44546A", "cached": YELLOW,
                         "shared": "#8C6BB1", "waste": "#A6761D"}
# a claim's standing (inferlab.lab.verdicts: VERDICTS, then PROJECTED, ILLUSTRATED): the
# judged ones in hues no policy or phase has (green, olive, wine), what is not judged (or
# cannot be) in greys, lighter the less there is to see
VERDICT: dict[str, str] = {HOLDS: "#2F6B1F", HOLDS_SMALLER: "#999933", FAILS: "#B03A63",
                           UNMEASURABLE: "#C4C4C4", PROJECTED: "#484848", ILLUSTRATED: "#9E9E9E"}
# parts of the model and of its memory (ch10, ch15): indigo and rust, no other family's hue
PART: dict[str, str] = {"weights": "#332288", "activations": "#7A2E0E"}
# series that are none of the above: "main" is what a panel is about (the measurement, the
# series in a one-series panel), "baseline" what it is compared with (the reference, the
# "off" arm, the rest of a whole); "band" shades a span of time (a check that delays)
SERIES: dict[str, str] = {"main": "#5E5E5E", "baseline": "#A4A4A4", "band": "#DADADA"}
# ordered quantities (a temperature, a delay) and parts of one whole: greys from light to dark
_RAMP = {"light": (0xA8, 0x40), "dark": (0x60, 0xE0)}      # (first, last) grey level


def sequence(n: int, dark: bool = False) -> list[str]:
    """``n`` greys for an ordered series, the first value lightest on white: each step
    stands further from the page (on a dark page the order runs dark to light)."""
    a, b = _RAMP["dark" if dark else "light"]
    levels = [round(a + (b - a) * i / max(n - 1, 1)) for i in range(n)]
    return [f"#{v:02X}{v:02X}{v:02X}" for v in levels]


# plotly template neutrals: text, grid lines, background
NEUTRAL: dict[str, dict[str, str]] = {
    "light": {"fg": INK, "grid": "#E5E5E5", "bg": "#FFFFFF"},
    "dark": {"fg": "#E0E0E0", "grid": "#444444", "bg": "#111111"},
}

# what a light figure's neutrals become on the dark page: ink turns to the page's text, a
# free block's white to the page itself (still hollow), muted text and the band stay legible
DARK: dict[str, str] = {INK: NEUTRAL["dark"]["fg"], "#FFFFFF": NEUTRAL["dark"]["bg"],
                        MUTED_TEXT: "#AAAAAA", SERIES["band"]: "#3A3A3A",
                        CACHE["used"]: "#71819C"}    # the slate, lighter: it sank into the page


def on_dark(color: str) -> str:
    """The colour ``color`` (a light figure's) takes in the dark twin: hues stay, the
    neutrals that would vanish into the dark page or glare on it are swapped (``DARK``), and
    a grey of the light ramp (``sequence``, ``SERIES``) takes the dark ramp's place of the
    same rank: what stood out on white stands out on the dark page."""
    if not isinstance(color, str):
        return color
    c = color.upper()
    if c in DARK:
        return DARK[c]
    (la, lb), (da, db) = _RAMP["light"], _RAMP["dark"]
    if len(c) == 7 and c[1:3] == c[3:5] == c[5:7]:
        v = int(c[1:3], 16)
        if lb <= v <= la:
            w = round(da + (la - v) * (db - da) / (la - lb))
            return f"#{w:02X}{w:02X}{w:02X}"
    return color


# --- what the browser views read as CSS variables (widgets/common.js) --------------------------
# the phases a scheduler lane draws (all but the finish mark)
KIND: dict[str, str] = {k: PHASE[k] for k in ("queued", "prefill", "decode", "preempted")}

SELECTOR = ".il-view"     # the root element of every view (see widgets/*.js)


def css_variables(selector: str = SELECTOR) -> str:
    """The phases as CSS custom properties on ``selector``, ``--il-kind-<phase>``, for what
    the views draw in HTML beside their plotly figure (a warning's edge in the vLLM view)."""
    decl = [f"--il-kind-{k}: {c};" for k, c in KIND.items()]
    return selector + " {\n  " + "\n  ".join(decl) + "\n}\n"


# --- families and their distance (issue 42) ---------------------------------------------------
FAMILIES: dict[str, dict[str, str]] = {"phase": PHASE, "policy": POLICY, "cache": CACHE,
                                       "verdict": VERDICT, "part": PART}
FAMILY_GAP = 25.0          # CIE76: no two hues of different families closer than this
GREY_CHROMA = 20.0         # below this chroma (CIE C*ab) a colour reads as a grey, not a hue


def lab(color: str) -> tuple[float, float, float]:
    """CIE L*a*b* (D65) of an sRGB ``#RRGGBB`` colour."""
    h = color.lstrip("#")
    rgb = [int(h[i:i + 2], 16) / 255 for i in (0, 2, 4)]
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb)
    xyz = ((0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047, 0.2126 * r + 0.7152 * g
           + 0.0722 * b, (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883)
    fx, fy, fz = (t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116 for t in xyz)
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def distance(a: str, b: str) -> float:
    """CIE76 colour difference (Euclidean in L*a*b*): about 2.3 is just noticeable, 25 reads
    as another colour at a glance."""
    return sum((x - y) ** 2 for x, y in zip(lab(a), lab(b))) ** 0.5


def is_grey(color: str) -> bool:
    _, a, b = lab(color)
    return (a * a + b * b) ** 0.5 < GREY_CHROMA


def family_of(color: str) -> tuple[str, str] | None:
    """(family, meaning) of a palette colour (None: a grey or not in a family)."""
    c = color.upper()
    for fam, colours in FAMILIES.items():
        for meaning, value in colours.items():
            if value == c and not is_grey(value):
                return fam, meaning
    return None
