"""Chapter 01's token picture: every token the model reads, as a chip laid out like the text
itself, and in the margin the part of the prompt each run of lines comes from (system prompt,
tool definitions, memory, history, the new message). A plotly figure, so it is interactive in
JupyterLab (hover a chip: its part and token) and the same picture as a PNG on GitHub.

The parts are not a colour family (inferlab.lab.palette): they are told apart by the labels in
the margin and by lightness: the chat template's markup the faintest chips, what the user
typed the darkest, the rest of the prompt between."""
from __future__ import annotations

from inferlab.lab import palette

CHARS_PER_LINE = 72          # a line of chips, in characters of the monospace font
GUTTER = 17                  # the margin's labels, in the same characters
FONT_PX = 14                 # the chips' font size (the article's smallest text)
CHAR_PX = 8.6                # one character's cell: a monospace glyph is 0.6 of the font wide
LINE_PX = 22                 # one line of chips
MARGIN = dict(l=12, r=12, t=70, b=12)
WIDTH = round((CHARS_PER_LINE + GUTTER + 1) * CHAR_PX) + MARGIN["l"] + MARGIN["r"]
MARKUP = "template"          # the chat template's own tokens: no label, the faintest chips
TYPED = "new message"        # what the user typed: the darkest chips
SHADE = {MARKUP: 0.06, TYPED: 0.62}
SHADE_REST = 0.3


def _lines(tokens) -> list[list[tuple[str, str, int]]]:
    """Tokens wrapped into lines: (shown text, segment, column) per chip. A line break in a
    token ends the line (drawn as ``↵``)."""
    lines, line, col = [], [], 0
    for text, seg in tokens:
        shown = text.replace("\n", "↵")
        if col + len(shown) > CHARS_PER_LINE and line:
            lines.append(line)
            line, col = [], 0
        line.append((shown, seg, col))
        col += len(shown)
        if "\n" in text:
            lines.append(line)
            line, col = [], 0
    if line:
        lines.append(line)
    return lines


def runs(lines) -> list[tuple[str, int, int]]:
    """(part, first line, last line) of each run of lines holding one part's text (lines
    of template markup alone join the run around them)."""
    out = []
    for i, line in enumerate(lines):
        chars: dict[str, int] = {}
        for shown, seg, _ in line:
            if seg != MARKUP:
                chars[seg] = chars.get(seg, 0) + len(shown.strip())
        if not chars:
            continue
        seg = max(chars, key=chars.get)
        if out and out[-1][0] == seg:
            out[-1] = (seg, out[-1][1], i)
        else:
            out.append((seg, i, i))
    return out


def figure(tokens, title: str):
    import plotly.graph_objects as go

    from inferlab.lab import figures
    fig = go.Figure()
    lines = _lines(tokens)
    ink = palette.SERIES["main"]
    for seg in dict.fromkeys(s for _, s in tokens):
        xs, ys, texts, x0, x1, y = [], [], [], [], [], []
        for i, line in enumerate(lines):
            for shown, s, col in line:
                if s != seg:
                    continue
                xs.append(col + len(shown) / 2)
                ys.append(i)
                texts.append(shown)
                x0.append(col)
                x1.append(col + max(len(shown), 1) - 0.15)
                y.append(i)
        # the chip: a thick horizontal bar behind the token's characters, see-through so it
        # reads on a white page and on a dark one
        fig.add_trace(go.Bar(orientation="h", base=x0, x=[b - a for a, b in zip(x0, x1)], y=y,
                             width=0.8, marker=dict(color=ink, opacity=SHADE.get(seg, SHADE_REST),
                                                    line=dict(width=0)),
                             name=f"{seg} ({len(texts)})", showlegend=False,
                             hovertemplate=f"{seg}<extra></extra>"))
        fig.add_trace(go.Scatter(x=xs, y=ys, text=texts, mode="text", showlegend=False,
                                 name=seg, textfont=dict(family="DejaVu Sans Mono, monospace",
                                                         size=FONT_PX),
                                 hovertemplate=f"{seg}: %{{text}}<extra></extra>"))
    # the margin: each part's name beside its first line, a rule along its lines
    markup = next((i for i, line in enumerate(lines) if all(s == MARKUP for _, s, _ in line)),
                  None)
    if markup is not None:      # the faintest chips: say once what they are
        fig.add_annotation(x=-1.3, y=markup, text="chat template", xanchor="right",
                           yanchor="middle", showarrow=False,
                           font=dict(size=FONT_PX, color=palette.MUTED_TEXT))
    for seg, a, b in runs(lines):
        fig.add_shape(type="line", x0=-0.8, x1=-0.8, y0=a - 0.4, y1=b + 0.4,
                      line=dict(color=ink if seg == TYPED else palette.MUTED, width=2))
        fig.add_annotation(x=-1.3, y=a, text=seg, xanchor="right", yanchor="middle",
                           showarrow=False, font=dict(size=FONT_PX))
    figures.style(fig, title)
    # a fixed size: the characters must line up with their chips (interactive and PNG alike)
    fig.update_layout(barmode="overlay", bargap=0, width=WIDTH, height=height(tokens),
                      autosize=False, margin=MARGIN, showlegend=False)
    fig.update_xaxes(visible=False, range=[-GUTTER - 0.5, CHARS_PER_LINE + 0.5])
    fig.update_yaxes(visible=False, range=[len(lines) - 0.5, -0.5])
    return fig


def height(tokens) -> int:
    """The figure's height in pixels."""
    return MARGIN["t"] + MARGIN["b"] + LINE_PX * len(_lines(tokens))
