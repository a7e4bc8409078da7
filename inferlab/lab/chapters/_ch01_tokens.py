"""Chapter 01's token picture: every token the model reads, as a chip in the colour of the
segment it came from (template, system prompt, tools, memory, history, the new message),
laid out like the text itself. A plotly figure, so it is interactive in JupyterLab (hover a
chip: its segment and token) and the same picture as a PNG on GitHub."""
from __future__ import annotations

CHARS_PER_LINE = 110         # a line of chips, in characters of the monospace font
FONT_PX = 13                 # the chips' font size; a monospace character is 0.6 of it wide
LINE_PX = 21                 # one line of chips
MARGIN = dict(l=20, r=20, t=80, b=15)
WIDTH = round(CHARS_PER_LINE * 0.6 * FONT_PX) + MARGIN["l"] + MARGIN["r"] + 10


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


def figure(tokens, colors: dict[str, str], title: str):
    import plotly.graph_objects as go

    from inferlab.lab import figures
    fig = go.Figure()
    lines = _lines(tokens)
    for seg, color in colors.items():
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
        if not texts:
            continue
        # the chip: a thick horizontal bar behind the token's characters
        fig.add_trace(go.Bar(orientation="h", base=x0, x=[b - a for a, b in zip(x0, x1)], y=y,
                             width=0.78, marker=dict(color=color, opacity=0.35,
                                                     line=dict(width=0)),
                             name=f"{seg} ({len(texts)})", legendgroup=seg,
                             hovertemplate=f"{seg}<extra></extra>"))
        fig.add_trace(go.Scatter(x=xs, y=ys, text=texts, mode="text", legendgroup=seg,
                                 showlegend=False,
                                 textfont=dict(family="DejaVu Sans Mono, monospace",
                                               size=FONT_PX),
                                 hovertemplate=f"{seg}: %{{text}}<extra></extra>"))
    figures.style(fig, title)
    # a fixed size: the characters must line up with their chips (interactive and PNG alike)
    fig.update_layout(barmode="overlay", bargap=0, width=WIDTH, height=height(tokens),
                      autosize=False, margin=MARGIN,
                      legend=dict(orientation="h", x=0, xanchor="left", y=1.0,
                                  yanchor="bottom"))
    fig.update_xaxes(visible=False, range=[-0.5, CHARS_PER_LINE + 0.5])
    fig.update_yaxes(visible=False, range=[len(lines) - 0.5, -0.5])
    return fig


def height(tokens) -> int:
    """The figure's height in pixels."""
    return MARGIN["t"] + MARGIN["b"] + LINE_PX * len(_lines(tokens))
