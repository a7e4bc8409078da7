"""Figures: one plotly house template and the static pictures of every view.

    import inferlab.lab.figures as ilf
    fig = view.figure()                  # any widget; already in the "inferlab" template
    ilf.save(fig, "timeline.svg")        # .svg | .png | .pdf, through kaleido

The colours live in ``inferlab.lab.palette`` (Okabe-Ito based, safe for the common
colour-vision deficiencies), shared with the browser views. ``inferlab``
draws on white (articles, README); ``inferlab_dark`` on a dark page. Every figure names the
clock its times come from (wall or simulated GPU).
"""
from __future__ import annotations

import atexit
import os
import warnings

import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

from inferlab.errors import InvalidInputError
from inferlab.lab import palette

PALETTE = list(palette.OWNER)           # the colorway; chapters pick series colours from it
KIND_COLORS = dict(palette.KIND)
FORMATS = (".svg", ".png", ".pdf")


def _template(dark: bool) -> go.layout.Template:
    n = palette.NEUTRAL["dark" if dark else "light"]
    fg, grid, bg = n["fg"], n["grid"], n["bg"]
    t = go.layout.Template()
    t.layout = go.Layout(
        colorway=PALETTE, font=dict(family="Inter, Helvetica, Arial, sans-serif", size=12,
                                    color=fg),
        paper_bgcolor=bg, plot_bgcolor=bg, title=dict(font=dict(size=15), x=0.01, xanchor="left"),
        margin=dict(l=60, r=20, t=50, b=45), hovermode="closest",
        legend=dict(orientation="h", y=1.02, yanchor="bottom", x=1, xanchor="right",
                    bgcolor="rgba(0,0,0,0)"),
        xaxis=dict(gridcolor=grid, zerolinecolor=grid, linecolor=grid, ticks="outside"),
        yaxis=dict(gridcolor=grid, zerolinecolor=grid, linecolor=grid, ticks="outside"),
        bargap=0.15)
    return t


pio.templates["inferlab"] = _template(dark=False)
pio.templates["inferlab_dark"] = _template(dark=True)
TEMPLATE = "inferlab"


def style(fig: go.Figure, title: str | None = None, clock: str | None = None,
          dark: bool = False) -> go.Figure:
    """Apply the house template; put the clock in the title (every figure says which)."""
    text = title or ""
    if clock:
        text += f"<br><sup>clock: {clock}</sup>"
    fig.update_layout(template="inferlab_dark" if dark else TEMPLATE,
                      title_text=text or None)
    return fig


_server_started = False


def _start_server() -> None:
    """Keep one headless browser for kaleido (0.1 s per image instead of ~3 s)."""
    global _server_started
    if _server_started:
        return
    _server_started = True
    try:
        import kaleido
        start, stop = kaleido.start_sync_server, kaleido.stop_sync_server
    except (ImportError, AttributeError):   # old kaleido: write_image works, just slower
        return
    try:
        start(silence_warnings=True)
        atexit.register(lambda: stop(silence_warnings=True))
    except Exception as exc:   # noqa: BLE001 - each image then starts its own browser
        warnings.warn(f"inferlab: kaleido's browser server did not start ({type(exc).__name__}: "
                      f"{exc}); figure export will be slower or fail", RuntimeWarning,
                      stacklevel=3)


def to_image(fig: go.Figure, fmt: str = "png", width: int = 900, height: int = 450,
             scale: float = 1.0) -> bytes:
    _start_server()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fig.to_image(format=fmt, width=width, height=height, scale=scale)


def export_failed(what: str, exc: BaseException) -> str:
    """Say, visibly, that a figure could not be exported (a RuntimeWarning naming the error);
    returns the message, for the caller's own error list. For the places that go on without
    the image (a widget's static PNG, a notebook's picture), so no failure passes silently."""
    msg = (f"inferlab: {what} unavailable: figure export failed ({type(exc).__name__}: {exc})")
    warnings.warn(msg, RuntimeWarning, stacklevel=3)
    return msg


def save(fig: go.Figure, path, width: int = 900, height: int = 450, scale: float = 2.0) -> str:
    """Write ``fig`` to .svg, .png or .pdf (by the extension) with kaleido."""
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise InvalidInputError(f"cannot save a figure as {ext or 'a file without extension'!r}:"
                                f" use one of {', '.join(FORMATS)}")
    data = to_image(fig, ext[1:], width, height, scale if ext == ".png" else 1.0)
    from inferlab.observe.files import write_file   # a clear error naming the path
    return write_file(path, data, "the figure")


# --- the pictures behind the views ------------------------------------------------------
def timeline(segments, order, steps, t0=0.0, title="Scheduler timeline", clock=None,
             upto: float | None = None) -> go.Figure:
    """Per-request lanes (Segment list) over time plus a per-step batch strip.
    ``steps``: dicts with t0, t1, prefill, decode, budget."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.75, 0.25],
                        vertical_spacing=0.04)
    cut = (lambda t: t) if upto is None else (lambda t: min(t, upto))
    for kind, color in KIND_COLORS.items():
        ss = [s for s in segments if s.kind == kind and (upto is None or s.t0 <= upto)]
        if not ss:
            continue
        fig.add_trace(go.Bar(
            orientation="h", name=kind, marker_color=color, y=[s.request_id for s in ss],
            base=[(s.t0 - t0) * 1e3 for s in ss],
            x=[max((cut(s.t1) - s.t0) * 1e3, 0.05) for s in ss],
            customdata=[[s.tokens, s.step0, s.step1] for s in ss],
            hovertemplate="%{y} " + kind + ": %{base:.1f} ms +%{x:.1f} ms, "
                          "%{customdata[0]} tokens, steps %{customdata[1]}-%{customdata[2]}"
                          "<extra></extra>"), row=1, col=1)
    st = [s for s in steps if upto is None or s["t0"] <= upto]
    xs = [((s["t0"] + s["t1"]) / 2 - t0) * 1e3 for s in st]
    for key, color in (("prefill", KIND_COLORS["prefill"]), ("decode", KIND_COLORS["decode"])):
        fig.add_trace(go.Bar(x=xs, y=[s[key] for s in st], name=f"{key} tokens/step",
                             marker_color=color, showlegend=False,
                             width=[max((s["t1"] - s["t0"]) * 1e3, 0.01) for s in st]),
                      row=2, col=1)
    fig.update_layout(barmode="stack")
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(order)),
                     title_text="request", row=1, col=1)
    fig.update_yaxes(title_text="tokens", row=2, col=1)
    fig.update_xaxes(title_text="time (ms)", row=2, col=1)
    return style(fig, title, clock)


def kv_map(cells, columns: int = 32, title="KV cache blocks", clock=None) -> go.Figure:
    """One square per physical block: colour = owner, opacity = fill; free blocks hollow.
    ``cells``: dicts with block, owner (None = free), fill, ref, and optionally owner_index
    (the owner's colour, as in the widget) and reserved (drawn crossed out)."""
    fig = go.Figure()
    groups: dict = {}
    for c in cells:
        groups.setdefault(c["owner"], []).append(c)
    n_owned = 0
    for owner, cs in groups.items():
        free = owner is None
        if free:
            color = palette.KV["free"]
        else:
            color = palette.owner(cs[0].get("owner_index", n_owned))
            n_owned += 1
        fig.add_trace(go.Scatter(
            x=[c["block"] % columns for c in cs], y=[c["block"] // columns for c in cs],
            mode="markers", name="free" if free else str(owner),
            marker=dict(symbol=["square-open" if free else
                                ("square-x" if c.get("reserved") else "square") for c in cs],
                        size=14, color=color, line=dict(width=1, color=color),
                        opacity=1.0 if free else None),
            text=[f"block {c['block']} | {owner or 'free'} | {c['fill']} tokens | "
                  f"ref {c['ref']}" for c in cs], hoverinfo="text"))
    fig.update_yaxes(autorange="reversed", showgrid=False, showticklabels=False, title=None)
    fig.update_xaxes(showgrid=False, showticklabels=False, title=None)
    fig.update_layout(legend=dict(orientation="v", x=1.02, xanchor="left", y=1))
    return style(fig, title, clock)


def token_raster(rows, title="Token stream", clock=None) -> go.Figure:
    """rows: dicts with request_id, arrival, times (token times), texts; all in seconds."""
    fig = go.Figure()
    for r in rows:
        if not r["times"]:
            continue
        fig.add_trace(go.Scatter(
            x=[(r["arrival"]) * 1e3, r["times"][0] * 1e3], y=[r["request_id"]] * 2,
            mode="lines", line=dict(color=KIND_COLORS["queued"], width=6), showlegend=False,
            hovertemplate=f"TTFT {(r['times'][0] - r['arrival']) * 1e3:.1f} ms<extra></extra>"))
    fig.add_trace(go.Scatter(
        x=[t * 1e3 for r in rows for t in r["times"]],
        y=[r["request_id"] for r in rows for _ in r["times"]],
        text=[repr(x) for r in rows for x in r["texts"]], mode="markers", name="token",
        marker=dict(symbol="line-ns-open", size=12, color=KIND_COLORS["decode"]),
        hovertemplate="%{y} %{text} at %{x:.1f} ms<extra></extra>"))
    fig.update_yaxes(autorange="reversed", title_text="request")
    fig.update_xaxes(title_text="time (ms)")
    return style(fig, title, clock)
