"""The KV map: every physical KV block as ``block_size`` token slots, and one request's block
table beside it (logical block -> physical block, its tokens' text in the slots).

What it must show at a glance (issue 26): slots that hold a token are solid, slots reserved
for a request but still empty are hatched (the waste, in the contiguous layout most of the
map), free blocks are hollow, shared blocks (ref > 1) and prefix-cached blocks are marked
(legend entries only for what occurs). Requests are told apart by the labels written on
their blocks, not by colours. Only the rows in use are drawn; the title states the waste.

    fig = kv_map(view.cells(), block_size=16, layout="contiguous", table=view.block_table())

``spec(...)`` builds the same figure as a plain dict (``{"data": [...], "layout": {...}}``,
fast: no plotly validation), which the live widget diffs against the last one it sent;
``kv_map(...)`` is ``go.Figure(spec(...))``. Every state has the same traces in the same
order (empty ones included), so the widget updates them in place.
"""
from __future__ import annotations

import plotly.graph_objects as go

from inferlab.lab import palette

from .kv_text import memory_note, size, waste_title  # noqa: F401 (the drawing's words)

CELL = 0.9            # a block's width in map columns (the rest is the gap between blocks)
ROW = 0.55            # a block's height in rows (the rest leaves room for the labels)
TABLE_ROWS = 10       # block-table rows drawn before the middle ones are elided
GAP = 1.6             # rows of space between the map and the block table under it


def _columns(n: int, block_size: int) -> int:
    """Blocks per row: 16 (the unit a reader counts), at most n."""
    return max(1, min(n, 16))


def _slot_text(text: str | None) -> str:
    if text is None:
        return ""
    t = text.replace("\n", "↵").replace("\t", "⇥")
    if t.strip() == "":
        return "␣" if t else "·"
    t = t.strip()
    return t if len(t) <= 4 else t[:3] + "…"


def _axes(col: int) -> dict:
    return {"xaxis": "x", "yaxis": "y"} if col == 1 else {"xaxis": "x2", "yaxis": "y2"}


def _bars(data, name, xs, ys, widths, color, *, pattern=None, line=None, hover=None,
          col=1, showlegend=True):
    marker = dict(color=color, line=line or dict(width=0))
    if pattern:
        marker["pattern"] = pattern
    data.append(dict(type="bar", orientation="h", name=name, base=xs, x=widths, y=ys,
                     width=ROW, marker=marker, showlegend=showlegend and bool(xs),
                     hovertext=hover if hover is not None else [],
                     hoverinfo="skip" if hover is None else "text", legendgroup=name,
                     **_axes(col)))


def _text(data, name, xs, ys, texts, font, col=1, position="middle center"):
    data.append(dict(type="scatter", mode="text", name=name, x=xs, y=ys, text=texts,
                     textposition=position, textfont=font, showlegend=False, hoverinfo="skip",
                     **_axes(col)))


def kv_map(cells, *, block_size: int, layout: str = "paged", table: dict | None = None,
           title: str | None = None, clock: str | None = None, dark: bool = False,
           columns: int | None = None, bytes_per_token: int | None = None,
           dtype: str | None = None, frame: tuple[int, int] | None = None) -> go.Figure:
    """The KV map as a plotly figure: see ``spec``."""
    return go.Figure(spec(cells, block_size=block_size, layout=layout, table=table, title=title,
                          clock=clock, dark=dark, columns=columns,
                          bytes_per_token=bytes_per_token, dtype=dtype, frame=frame))


def spec(cells, *, block_size: int, layout: str = "paged", table: dict | None = None,
         title: str | None = None, clock: str | None = None, dark: bool = False,
         columns: int | None = None, bytes_per_token: int | None = None,
         dtype: str | None = None, frame: tuple[int, int] | None = None) -> dict:
    """The map of ``cells`` (dicts as ``KVBlockMap.cells()``: block, owner or None, fill, ref,
    cached, shared, reserved) and, with ``table`` (request, blocks: physical ids in logical
    order, tokens, texts: one str or None per token), that request's block table beside it.
    ``bytes_per_token``, ``dtype``: the engine's cache (trace meta), for the memory the
    slots and the waste take. ``frame``: (map rows, table rows) drawn whatever the state
    holds, so the frames of an animation share one size and one grid."""
    bs = max(1, int(block_size))
    n = len(cells)
    cols = columns or _columns(n, bs)
    fg = palette.NEUTRAL["dark" if dark else "light"]["fg"]
    waste_c, used_c, shared_c, cached_c = (palette.CACHE[k] for k in
                                           ("waste", "used", "shared", "cached"))
    hatch = dict(shape="/", fgcolor=waste_c, bgcolor="rgba(0,0,0,0)", size=6, solidity=0.35)
    edge = dict(width=1, color=palette.MUTED)
    # only the rows in use: up to the last block that is not plain free
    busy = [c["block"] for c in cells if c["owner"] is not None or c.get("cached")]
    rows = max((max(busy) // cols + 1) if busy else 1, frame[0] if frame else 0)
    shown = [c for c in cells if c["block"] < rows * cols]
    pos = {c["block"]: (c["block"] % cols, c["block"] // cols) for c in shown}
    sel = table["request"] if table else None

    def hover(c):
        who = c["owner"] if c["owner"] is not None else "free"
        tags = [t for t in ("shared", "cached", "reserved") if c.get(t)]
        tags = [{"cached": "prefix-cached", "reserved": "reserved, empty"}.get(t, t) for t in tags]
        return (f"block {c['block']} · {who}<br>{c['fill']}/{bs} tokens · ref {c['ref']}"
                + (f"<br>{', '.join(tags)}" if tags else ""))

    groups: dict[str, list] = {k: [] for k in ("used", "shared", "waste", "free", "free_cached")}
    for c in shown:
        x, y = pos[c["block"]]
        part = CELL * min(c["fill"], bs) / bs
        if c["owner"] is None:
            groups["free_cached" if c.get("cached") else "free"].append((x, y, CELL, c))
            continue
        if part > 0:
            groups["shared" if c["ref"] > 1 else "used"].append((x, y, part, c))
        if part < CELL:
            groups["waste"].append((x + part, y, CELL - part, c))

    data: list[dict] = []
    trows = max(len(_table_rows(len(table["blocks"]))) if table else 0,
                frame[1] if frame else 0)
    map_dom, table_dom = _domains(rows, trows)
    notes = [dict(text=t, x=0, y=d[1], xref="paper", yref="paper", xanchor="left",
                  yanchor="bottom", showarrow=False, font=dict(size=13))
             for t, d in zip((_map_title(shown, bs), _table_title(table)),
                             (map_dom, table_dom))]

    def add(key, name, color, **kw):
        g = groups[key]
        _bars(data, name, [g_[0] for g_ in g], [g_[1] for g_ in g], [g_[2] for g_ in g], color,
              hover=[hover(g_[3]) for g_ in g], **kw)

    add("used", "holds tokens", used_c)
    add("shared", "shared (ref > 1)", shared_c)
    add("waste", "reserved, empty (wasted)", "rgba(0,0,0,0)", pattern=hatch,
        line=dict(width=0.5, color=waste_c))
    add("free", "free", "rgba(0,0,0,0)", line=edge)
    add("free_cached", "free, prefix-cached (reusable)", cached_c, line=edge)
    # blocks whose full contents are in the prefix cache while a request still uses them
    cached_used = [c for c in shown if c["owner"] is not None and c.get("cached")]
    data.append(dict(
        type="scatter", x=[pos[c["block"]][0] + CELL - 0.12 for c in cached_used],
        y=[pos[c["block"]][1] - ROW / 2 + 0.1 for c in cached_used], mode="markers",
        marker=dict(symbol="triangle-sw", size=7, color=cached_c, line=dict(width=0.5, color=fg)),
        name="in the prefix cache", hoverinfo="skip", showlegend=bool(cached_used),
        **_axes(1)))
    # the selected request's blocks, outlined run by run: the block table on the right reads them
    mine = sorted(c["block"] for c in shown if sel is not None
                  and (c["owner"] == sel or c["block"] in table["blocks"]))
    runs = _runs(mine, cols)
    _bars(data, "selected request's blocks", [b % cols for b, _ in runs],
          [b // cols for b, _ in runs], [k - 1 + CELL for _, k in runs], "rgba(0,0,0,0)",
          line=dict(width=2, color=fg), showlegend=False)
    _labels(data, shown, pos, bs, fg)
    hidden = n - rows * cols
    if hidden > 0:      # under the map, right: over it, it met the title in a narrow column
        notes.append(dict(text=f"blocks {rows * cols}-{n - 1}: free, not drawn", xref="paper",
                          yref="paper", x=1, y=map_dom[0], xanchor="right", yanchor="top",
                          showarrow=False, font=dict(size=12, color=fg)))
    axes = {"xaxis": dict(range=[-0.1, cols], showgrid=False, zeroline=False,
                          showticklabels=False, ticks="", showline=False, domain=[0.0, 1.0],
                          anchor="y")}
    axes["yaxis"] = dict(range=[rows - 1 + ROW / 2 + 0.1, -ROW / 2 - 0.1],
                         showgrid=False, zeroline=False, ticks="", tickmode="array",
                         tickvals=list(range(rows)), ticktext=[f"block {r * cols}"
                                                                for r in range(rows)],
                         showline=False, tickfont=dict(size=12), anchor="x", domain=map_dom)
    shared_ids = {c["block"] for c in cells if c["ref"] > 1}
    axes.update(_block_table(data, table, bs, hatch, (used_c, shared_c), waste_c,
                             shared_ids, (table_dom, trows)))
    tokens, slots, sentence = waste_title(cells, bs, layout)
    # a caller's title that names the layout replaces the sentence's "layout:" head
    head = (f"{title}: {sentence.split(': ', 1)[1]}" if title and layout in title
            else f"{title} · {sentence}" if title else sentence)
    from inferlab.lab import figures   # registers the templates (here: it re-exports kv_map)
    # the second, small line: the clock (as figures.style: every figure names its clock)
    # and the waste in bytes
    sub = " · ".join(x for x in (clock and f"clock: {clock}",
                                 memory_note(tokens, slots, bytes_per_token, dtype)) if x)
    if sub:
        head += f"<br><sup>{sub}</sup>"
    return {"data": data, "layout": dict(
        template=figures.TEMPLATE + ("_dark" if dark else ""), title=dict(text=head),
        barmode="overlay", bargap=0, hovermode="closest", annotations=notes,
        # the legend under the block table's slot numbers
        legend=dict(orientation="h", y=-0.04, yanchor="top", x=0, xanchor="left",
                    traceorder="normal"),
        margin=dict(l=90, r=15, t=80, b=70),
        height=_height(rows, trows),
        **axes)}


ROW_PX = 36           # a row of blocks or of the block table, in CSS px


def _height(rows: int, trows: int) -> int:
    return 150 + ROW_PX * round(rows + GAP + max(trows, 1) + 0.8)


def _domains(rows: int, trows: int) -> tuple[list[float], list[float]]:
    """(map, block table) y-domains, stacked: each row the same height in both panels."""
    total = rows + GAP + max(trows, 1)
    cut = max(trows, 1) / total
    return [cut + GAP / total, 1.0], [0.0, cut]


def _runs(blocks: list[int], cols: int) -> list[tuple[int, int]]:
    """(first block, length) of each run of consecutive blocks within one map row."""
    runs: list[list[int]] = []
    for b in blocks:
        if runs and b == runs[-1][0] + runs[-1][1] and b % cols:
            runs[-1][1] += 1
        else:
            runs.append([b, 1])
    return [(b, k) for b, k in runs]


def _short(names: list[str]) -> dict[str, str]:
    """Request ids as short labels: the number they end in when each has its own ("req-12",
    "chat-es-3" -> "12", "3"), else without the prefix they all share."""
    import os.path, re  # noqa: E401
    nums = [re.search(r"(\d+)$", nm) for nm in names]
    if all(nums) and len({m.group(1) for m in nums}) == len(names):
        return {nm: m.group(1) for nm, m in zip(names, nums)}
    pre = os.path.commonprefix(names) if len(names) > 1 else ""
    while pre and pre[-1].isdigit():
        pre = pre[:-1]
    return {nm: (nm[len(pre):] or nm) for nm in names}


def _labels(data, shown, pos, bs, fg) -> None:
    """Each request's id inside the first block of each of its runs in a row (hover names
    every block's owner), in the page's colour: it sits on the block's fill."""
    owners = sorted({c["owner"] for c in shown if c["owner"] is not None}, key=str)
    short = _short([str(o) for o in owners])
    owner_of = {c["block"]: c["owner"] for c in shown}
    lx, ly, lt, lc = [], [], [], []
    for c in shown:
        x, y = pos[c["block"]]
        o = c["owner"]
        if o is None or owner_of.get(c["block"] - 1) == o:
            continue
        # a shared block is no one request's: it says how many point at it
        lx.append(x + 0.06), ly.append(y)
        lt.append(f"×{c['ref']}" if c["ref"] > 1 else short[str(o)])
        # on the block's fill in the fill's text colour; on a nearly empty block in ink
        lc.append(palette.ON_FILL if c["fill"] >= 0.4 * bs else fg)
    _text(data, "labels", lx, ly, lt, dict(size=12, color=lc), position="middle right")


def _map_title(shown, bs: int) -> str:
    names = sorted({str(c["owner"]) for c in shown if c["owner"] is not None})
    short = _short(names)
    ex = next((nm for nm in names if short[nm] != nm), None)
    pre = ex[:len(ex) - len(short[ex])] if ex else None
    who = "request id" if pre is None else f"request {pre}N" if all(
        nm.startswith(pre) for nm in names) else "the number ending a request's id"
    return f"physical blocks, {bs} token slots each (labels: {who})"


def _table_title(table) -> str:
    return f"block table of {table['request']}: logical → physical" if table else \
        "block table: no request holds blocks"


def _table_rows(nblocks: int) -> list[int | None]:
    """Logical block indices to draw (None = the elided middle)."""
    if nblocks <= TABLE_ROWS:
        return list(range(nblocks))
    head = TABLE_ROWS - 3
    return list(range(head)) + [None] + [nblocks - 2, nblocks - 1]


def _block_table(data, table, bs, hatch, colours, waste_c, shared_ids, place) -> dict:
    """The block table's traces (into ``data``): a shared block's slots (ref > 1, a prefix
    other requests point at too) in the shared colour, as on the map; returns its axes."""
    used_c, shared_c = colours
    domain, nrows = place            # the table's y-domain, and the rows it spans
    table = table or {"blocks": [], "tokens": 0}
    blocks, ntok = table["blocks"], int(table["tokens"])
    texts = table.get("texts") or []
    order = _table_rows(len(blocks))
    fx, fy, fw, fh, wx, wy, ww, tx, ty, tt = ([] for _ in range(10))
    sx, sy, sh = [], [], []
    ticks = []
    for r, i in enumerate(order):
        if i is None:
            ticks.append("⋮")
            continue
        ticks.append(f"{i} → {blocks[i]}")
        for s in range(bs):
            p = i * bs + s
            if p < ntok:
                txt = texts[p] if p < len(texts) else None
                hv = (f"logical block {i}, slot {s} → physical {blocks[i]}<br>token {p}"
                      + (f": {txt!r}" if txt is not None else ""))
                if blocks[i] in shared_ids:
                    sx.append(s), sy.append(r), sh.append(hv + "<br>shared (ref > 1)")
                else:
                    fx.append(s), fy.append(r), fw.append(CELL), fh.append(hv)
                if txt is not None:
                    tx.append(s + CELL / 2), ty.append(r), tt.append(_slot_text(txt))
            else:
                wx.append(s), wy.append(r), ww.append(CELL)
    _bars(data, "holds tokens", fx, fy, fw, used_c, hover=fh, col=2, showlegend=False)
    _bars(data, "shared (ref > 1)", sx, sy, [CELL] * len(sx), shared_c, hover=sh, col=2,
          showlegend=False)
    _bars(data, "reserved, empty (wasted)", wx, wy, ww, "rgba(0,0,0,0)", pattern=hatch,
          line=dict(width=0.5, color=waste_c), col=2, showlegend=False)
    _text(data, "token text", tx, ty, tt, dict(size=11, color=palette.ON_FILL), col=2)
    n = max(len(order), nrows)
    # slot numbers only over a table (under an empty one they labelled nothing)
    return {"xaxis2": dict(range=[-0.1, bs], showgrid=False, zeroline=False, ticks="",
                           showline=False, tickmode="array", showticklabels=bool(blocks),
                           tickvals=[0.45, bs - 0.55],
                           ticktext=["slot 0", f"slot {bs - 1}"], tickfont=dict(size=12),
                           domain=[0.0, 1.0], anchor="y2"),
            "yaxis2": dict(range=[max(n, 1) - 1 + ROW / 2 + 0.1, -ROW / 2 - 0.1],
                           showgrid=False, zeroline=False,
                           ticks="", tickmode="array", tickvals=list(range(n)), ticktext=ticks,
                           showline=False, tickfont=dict(size=12), anchor="x2",
                           domain=domain)}
