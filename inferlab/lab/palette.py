"""The one home of inferlab's colours: plotly figures and the browser views read them here.

Each colour has one meaning, and every figure takes it by that meaning (never by hue):

- ``PHASE``: what a request is doing (queued, prefill, decode, preempted, finished);
- ``POLICY``: a scheduling policy, by name (static, continuous, chunked);
- ``CACHE``: a KV cache block's state (free, used, cached, shared, waste);
- ``VERDICT``: a claim's standing on the report card (the names of inferlab.lab.verdicts);
- ``SERIES`` and ``sequence(n)``: everything else (tokens, bytes, a baseline, temperatures,
  the parts of a step): neutral greys only, told apart by lightness and labels, so no such
  series ever looks like a phase, a policy, a cache state or a verdict.

No hex value appears in two of PHASE, POLICY, CACHE and VERDICT, and SERIES and
``sequence`` share none with them (tests/test_palette.py). The hues are Okabe-Ito (safe for
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

# --- one meaning per colour (issue 26) --------------------------------------------------------
# what a request is doing: a phase; "finished" is a request's end mark (drawn in ink).
# queued is a mid grey: 3.4:1 on white, 5.6:1 on the dark page (a light grey glared there)
PHASE: dict[str, str] = {"queued": "#8C8C8C", "prefill": BLUE, "decode": BLUISH_GREEN,
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
VERDICT: dict[str, str] = {HOLDS: "#117733", HOLDS_SMALLER: "#999933", FAILS: "#B03A63",
                           UNMEASURABLE: "#C4C4C4", PROJECTED: "#6E6E6E", ILLUSTRATED: "#9E9E9E"}
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

# --- what the browser views read as CSS variables (widgets/common.js) --------------------------
# the phases a scheduler lane draws (all but the finish mark)
KIND: dict[str, str] = {k: PHASE[k] for k in ("queued", "prefill", "decode", "preempted")}

SELECTOR = ".il-view"     # the root element of every view (see widgets/*.js)


def css_variables(selector: str = SELECTOR) -> str:
    """The phases as CSS custom properties on ``selector``, ``--il-kind-<phase>``, for what
    the views draw in HTML beside their plotly figure (a warning's edge in the vLLM view)."""
    decl = [f"--il-kind-{k}: {c};" for k, c in KIND.items()]
    return selector + " {\n  " + "\n  ".join(decl) + "\n}\n"
