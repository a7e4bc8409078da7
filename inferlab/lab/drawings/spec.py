"""A plotly figure built as plain dicts: ``{"data": [...], "layout": {...}}``.

Building a ``go.Figure`` validates every property (tens of milliseconds for a few thousand
bars); the live views redraw their figure many times a second, so the drawings build this
spec instead, as plotly.js reads it, and ``go.Figure(spec)`` (once, for an export) gives the
same figure. ``Spec`` lays out subplots as ``plotly.subplots.make_subplots`` does (the same
axis names and domains) for the grids the drawings use: rows of one column sharing x, and a
second column whose one cell spans every row.

    s = Spec(rows=3, row_heights=[200, 64, 64], vertical_spacing=0.05, shared_xaxes=True)
    s.add(dict(type="bar", x=[1], y=[2]), row=2)
    s.yaxes(row=2, range=[0, 3])
    fig = go.Figure(s.style(title, clock))
"""
from __future__ import annotations


def merge(into: dict, new: dict) -> dict:
    """``new`` merged into ``into`` (nested dicts merged, other values replaced)."""
    for k, v in new.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            merge(into[k], v)
        else:
            into[k] = v
    return into


def _spans(weights, spacing: float) -> list[tuple[float, float]]:
    """(start, end) of each part of [0, 1] in proportion to ``weights``, ``spacing`` apart."""
    room = 1.0 - spacing * (len(weights) - 1)
    total = float(sum(weights)) or 1.0
    out, at = [], 0.0
    for w in weights:
        out.append((at, at + room * w / total))
        at = out[-1][1] + spacing
    return out


class Spec:
    def __init__(self, rows: int = 1, cols: int = 1, *, row_heights=None, column_widths=None,
                 vertical_spacing: float = 0.3, horizontal_spacing: float = 0.2,
                 shared_xaxes: bool = False, span_last_column: bool = False):
        """A grid of ``rows`` x ``cols`` subplots; with ``span_last_column`` the last column
        is one subplot spanning every row (make_subplots' ``rowspan``)."""
        self.data: list[dict] = []
        self.layout: dict = {}
        self._cells: dict[tuple[int, int], str] = {}
        # rows from the top, as make_subplots: the first row's span is the highest
        ys = _spans(list(row_heights or [1] * rows)[::-1],
                    vertical_spacing if rows > 1 else 0)[::-1]
        xs = _spans(column_widths or [1] * cols, horizontal_spacing if cols > 1 else 0)
        n = 0
        for r in range(1, rows + 1):
            for c in range(1, cols + 1):
                spans = span_last_column and c == cols and cols > 1
                if spans and r > 1:
                    continue
                n += 1
                k = "" if n == 1 else str(n)
                self._cells[(r, c)] = k
                top = ys[0][1] if spans else ys[r - 1][1]
                low = ys[-1][0] if spans else ys[r - 1][0]
                self.layout[f"xaxis{k}"] = {"anchor": f"y{k}", "domain": list(xs[c - 1])}
                self.layout[f"yaxis{k}"] = {"anchor": f"x{k}", "domain": [low, top]}
        if shared_xaxes and rows > 1:
            for c in range(1, cols + 1):
                column = [self._cells[(r, c)] for r in range(1, rows + 1) if (r, c) in self._cells]
                for k in column[:-1]:
                    self.layout[f"xaxis{k}"].update(matches=f"x{column[-1]}",
                                                    showticklabels=False)

    def ref(self, row: int = 1, col: int = 1) -> str:
        """The axes' suffix of a subplot: "" for the first, "2", "3", ... as make_subplots."""
        return self._cells[(row, col)]

    def add(self, trace: dict, row: int = 1, col: int = 1) -> dict:
        k = self.ref(row, col)
        trace.setdefault("xaxis", f"x{k}")
        trace.setdefault("yaxis", f"y{k}")
        self.data.append(trace)
        return trace

    def update_layout(self, **kw) -> "Spec":
        merge(self.layout, kw)
        return self

    def _axes(self, axis: str, row, col, kw) -> "Spec":
        for (r, c), k in self._cells.items():
            if (row is None or r == row) and (col is None or c == col):
                merge(self.layout[f"{axis}axis{k}"], kw)
        return self

    def xaxes(self, row: int | None = None, col: int | None = None, **kw) -> "Spec":
        """Update the x axes of the subplots in ``row`` and ``col`` (every one by default)."""
        return self._axes("x", row, col, kw)

    def yaxes(self, row: int | None = None, col: int | None = None, **kw) -> "Spec":
        return self._axes("y", row, col, kw)

    def annotate(self, **kw) -> "Spec":
        self.layout.setdefault("annotations", []).append(kw)
        return self

    def style(self, title: str | None = None, clock: str | None = None,
              dark: bool = False) -> dict:
        """The house template (as ``figures.style``) and the title naming the clock; returns
        the spec as a dict."""
        from inferlab.lab import figures      # registers the templates
        text = (title or "") + (f"<br><sup>clock: {clock}</sup>" if clock else "")
        self.layout["template"] = figures.TEMPLATE + ("_dark" if dark else "")
        if text:
            merge(self.layout, {"title": {"text": text}})
        return self.to_dict()

    def to_dict(self) -> dict:
        return {"data": self.data, "layout": self.layout}

