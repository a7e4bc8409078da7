"""The one home of inferlab's colours: plotly figures and the browser views read them here.

The owner palette is Okabe-Ito (safe for the common colour-vision deficiencies) plus three
extra hues for runs with many requests. ``css_variables()`` turns every colour into a CSS
custom property on the views' root element (``.il-view``); inferlab.widgets prepends it to
each view's stylesheet, and the views' JS and CSS read ``var(--il-...)``, so a widget and its
static PNG (``view.figure()``) are drawn in the same colours.

Page colours (text, background, borders) in the browser come from the JupyterLab theme
(``--jp-*``); ``NEUTRAL`` is only for the plotly templates (light and dark).
"""
from __future__ import annotations

# Okabe-Ito, by name
BLACK = "#000000"
ORANGE = "#E69F00"
SKY_BLUE = "#56B4E9"
BLUISH_GREEN = "#009E73"
YELLOW = "#F0E442"
BLUE = "#0072B2"
VERMILLION = "#D55E00"
REDDISH_PURPLE = "#CC79A7"
GREY = "#BDBDBD"
MUTED = "#999999"          # reference lines and guides in figures
MUTED_TEXT = "#666666"     # annotations in figures
INK = "#222222"            # text and strong lines on white

# --- one meaning per colour (issue 26): views and chapter figures take these by name ----
# what a request is doing: a phase; "finished" is the end mark of a request
PHASE: dict[str, str] = {"queued": GREY, "prefill": BLUE, "decode": BLUISH_GREEN,
                         "preempted": VERMILLION, "finished": INK}
# scheduling policies, by name (never by position in a list)
POLICY: dict[str, str] = {"static": ORANGE, "continuous": REDDISH_PURPLE, "chunked": SKY_BLUE}
# KV cache block states: free (hollow), holding a request's tokens, prefix-cached (reusable),
# shared (ref count > 1), reserved but unused (waste; drawn hatched)
CACHE: dict[str, str] = {"free": "#FFFFFF", "used": "#44546A", "cached": YELLOW,
                         "shared": "#8C6BB1", "waste": "#A6761D"}

# colour per owner (series in chapter figures), in order; also the plotly colorway.
# Requests are told apart by labels and position, not by cycling these.
OWNER: tuple[str, ...] = (BLUE, ORANGE, BLUISH_GREEN, REDDISH_PURPLE, SKY_BLUE, VERMILLION,
                          YELLOW, "#8C6BB1", "#1B9E77", "#A6761D")

# what a request is doing in a scheduler lane; the order is the wire code (0..3)
KIND: dict[str, str] = {"queued": GREY, "prefill": BLUE, "decode": BLUISH_GREEN,
                        "preempted": VERMILLION}

# KV block map legend (owner colours mark used blocks in the map itself)
KV: dict[str, str] = {"used": OWNER[0], "free": GREY, "cached": YELLOW,
                      "reserved": VERMILLION}

# plotly template neutrals: text, grid lines, background
NEUTRAL: dict[str, dict[str, str]] = {
    "light": {"fg": INK, "grid": "#E5E5E5", "bg": "#FFFFFF"},
    "dark": {"fg": "#E0E0E0", "grid": "#444444", "bg": "#111111"},
}

SELECTOR = ".il-view"     # the root element of every view (see widgets/*.js)


def owner(i: int) -> str:
    """Colour of owner ``i`` (cycles through OWNER)."""
    return OWNER[i % len(OWNER)]


def css_variables(selector: str = SELECTOR) -> str:
    """The palette as CSS custom properties on ``selector``:
    ``--il-kind-<kind>``, ``--il-owner-<i>``, ``--il-owner-count``, ``--il-kv-<name>``."""
    decl = [f"--il-kind-{k}: {c};" for k, c in KIND.items()]
    decl += [f"--il-owner-{i}: {c};" for i, c in enumerate(OWNER)]
    decl.append(f"--il-owner-count: {len(OWNER)};")
    decl += [f"--il-kv-{k}: {c};" for k, c in KV.items()]
    return selector + " {\n  " + "\n  ".join(decl) + "\n}\n"
