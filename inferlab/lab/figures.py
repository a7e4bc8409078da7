"""Figures: the plotly house template, round axes, and export (SVG, PNG, PDF via kaleido).

    import inferlab.lab.figures as ilf
    fig = view.figure()                  # any widget; already in the "inferlab" template
    ilf.save(fig, "timeline.svg")        # .svg | .png | .pdf, through kaleido

Each view's one drawing lives in ``inferlab.lab.drawings`` (timeline, token stream, KV map,
batching comparison); the chapters draw their own figures with this template.

The colours live in ``inferlab.lab.palette`` (Okabe-Ito based, safe for the common
colour-vision deficiencies), shared with the browser views. ``inferlab``
draws on white (articles, README); ``inferlab_dark`` on a dark page. Every figure names the
clock its times come from (wall or simulated GPU).
"""
from __future__ import annotations

import atexit
import os
import threading
import warnings

import plotly.graph_objects as go
import plotly.io as pio

from inferlab.errors import InvalidInputError
from inferlab.lab import palette

# the colorway: a trace given no colour is a neutral series (palette.SERIES), never a hue
# that means a phase, a policy, a cache state or a verdict; figures take those by name
PALETTE = [palette.SERIES["main"], palette.SERIES["baseline"]]
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


# kaleido's headless Chrome: started on the first export, kept while exports come (0.1 s per
# image instead of ~3 s), closed after IDLE_S seconds without one (it holds ~0.5 GB, a
# quarter of a Binder pod: tests/test_binder.py), started again by the next export.
IDLE_S = float(os.environ.get("INFERLAB_CHROME_IDLE_S", "60"))
_server = {"up": False, "tried": False, "timer": None}
_server_lock = threading.RLock()


def static_images() -> bool:
    """Whether views and chapter figures add a PNG beside the live picture (for GitHub,
    nbviewer, a static HTML export). ``INFERLAB_STATIC_IMAGES=0`` (binder/start sets it)
    leaves them out: the reader's own browser draws every view and figure, and nothing in the
    kernel starts a Chrome. Explicit exports (``save``, ``inferlab figures``) still work."""
    return os.environ.get("INFERLAB_STATIC_IMAGES", "1") != "0"


def _start_server() -> None:
    """Keep one headless browser for kaleido while exports come (see IDLE_S)."""
    with _server_lock:
        if _server["timer"] is not None:
            _server["timer"].cancel()
            _server["timer"] = None
        if _server["up"] or _server["tried"]:
            return
        try:
            import kaleido
            start = kaleido.start_sync_server
        except (ImportError, AttributeError):   # old kaleido: write_image works, just slower
            _server["tried"] = True
            return
        try:
            start(silence_warnings=True)
            _server["up"] = True
        except Exception as exc:   # noqa: BLE001 - each image then starts its own browser
            _server["tried"] = True
            warnings.warn(f"inferlab: kaleido's browser server did not start "
                          f"({type(exc).__name__}: {exc}); figure export will be slower or "
                          f"fail", RuntimeWarning, stacklevel=3)


def stop_server() -> None:
    """Close kaleido's browser now (the next export starts it again)."""
    with _server_lock:
        if _server["timer"] is not None:
            _server["timer"].cancel()
            _server["timer"] = None
        if _server["up"]:
            import kaleido
            kaleido.stop_sync_server(silence_warnings=True)
            _server["up"] = False


def _idle_later() -> None:
    with _server_lock:
        if _server["up"] and IDLE_S >= 0:
            _server["timer"] = threading.Timer(IDLE_S, stop_server)
            _server["timer"].daemon = True
            _server["timer"].start()


atexit.register(stop_server)


def to_image(fig: go.Figure, fmt: str = "png", width: int = 900, height: int = 450,
             scale: float = 1.0) -> bytes:
    with _server_lock:                 # one export at a time: the idle timer waits for it
        _start_server()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return fig.to_image(format=fmt, width=width, height=height, scale=scale)
        finally:
            _idle_later()


def compact_png(png: bytes) -> bytes:
    """``png`` with at most 256 colours (Pillow's median cut, no dithering): a figure's flat
    fills and anti-aliased text look the same, the file is a quarter or less of the size
    (what a notebook embeds stays under GitHub's limit). Deterministic."""
    import io

    from PIL import Image
    im = Image.open(io.BytesIO(png)).convert("RGB").quantize(
        colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    out = io.BytesIO()
    im.save(out, "PNG", optimize=True)
    return out.getvalue()


def export_failed(what: str, exc: BaseException) -> str:
    """Say, visibly, that a figure could not be exported (a RuntimeWarning naming the error);
    returns the message, for the caller's own error list. For the places that go on without
    the image (a widget's static PNG, a notebook's picture), so no failure passes silently."""
    msg = (f"inferlab: {what} unavailable: figure export failed ({type(exc).__name__}: {exc})")
    warnings.warn(msg, RuntimeWarning, stacklevel=3)
    return msg


def save(fig: go.Figure, path, width: int = 900, height: int = 450, scale: float = 2.0,
         profile: str | None = None, source: str | None = None, cores: int | None = None,
         extra=()) -> str:
    """Write ``fig`` to .svg, .png or .pdf (by the extension) with kaleido.

    ``profile="article"`` (``inferlab.lab.article``): the figure as an article prints it, at
    the column width and device scale 2, its light twin at ``path``, the dark one beside it
    (``name-dark.ext``), and ``name.caption.md`` and ``name.alt.txt`` with what left the
    picture (the clock in full, the caveats, ``source``: the record's line, ``extra``);
    ``width``, ``height`` and ``scale`` are the profile's then. Returns ``path``."""
    path = os.fspath(path)
    stem, ext = os.path.splitext(path)
    ext = ext.lower()
    if ext not in FORMATS:
        raise InvalidInputError(f"cannot save a figure as {ext or 'a file without extension'!r}:"
                                f" use one of {', '.join(FORMATS)}")
    if profile not in (None, "notebook", "article"):
        raise InvalidInputError(f"unknown figure profile {profile!r}: use 'article' (or None)")
    from inferlab.observe.files import write_file   # a clear error naming the path
    if profile == "article":
        from inferlab.lab import article
        for dark, out in ((False, path), (True, f"{stem}-dark{ext}")):
            twin = article.profile(fig, dark=dark, cores=cores)
            data = to_image(twin, ext[1:], twin.layout.width, twin.layout.height,
                            article.SCALE if ext == ".png" else 1.0)
            data = compact_png(data) if ext == ".png" else data
            write_file(out, data, "the figure")
        text, alt = article.caption(fig, source=source, cores=cores, extra=extra)
        write_file(stem + ".caption.md", text.encode(), "the figure's caption")
        write_file(stem + ".alt.txt", alt.encode(), "the figure's alt text")
        return path
    data = to_image(fig, ext[1:], width, height, scale if ext == ".png" else 1.0)
    return write_file(path, data, "the figure")


# --- axes ----------------------------------------------------------------------------------
def tick_text(value: float, suffix: str = "") -> str:
    """A round tick's label: thousands separators, plain decimals below one, never
    scientific notation or SI prefixes (10,000; 0.001; 2.5), then the unit's ``suffix``."""
    if value >= 1 or value == 0:
        text = f"{value:,.0f}" if value == int(value) else f"{value:,.2f}".rstrip("0")
    else:
        text = f"{value:.12f}".rstrip("0").rstrip(".")
    return text + suffix


def log_ticks(lo: float, hi: float, suffix: str = "", steps=None) -> tuple[list, list]:
    """Round ticks for a log axis spanning ``lo``..``hi``: 1-2-5 steps when the span is up
    to two decades, powers of ten beyond (``steps`` overrides: e.g. (1, 3)); each labelled
    with ``tick_text``, so no minor label reads as a value."""
    import math
    e0, e1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    steps = steps or ((1, 2, 5) if math.log10(hi / lo) <= 2.6 else (1,))
    vals = [round(m * 10.0 ** e, 12) for e in range(e0, e1 + 1) for m in steps]
    vals = [v for v in vals if lo * 0.9999 <= v <= hi * 1.0001]
    return vals, [tick_text(v, suffix) for v in vals]


def log_axis(fig: go.Figure, axis: str = "y", values=(), suffix: str = "", title=None,
             row=None, col=None, pad: float = 0.08, steps=None) -> go.Figure:
    """Make ``axis`` ("x" or "y") of ``fig`` (one subplot with ``row``/``col``) a log axis
    covering ``values`` (the positive ones), with ``log_ticks`` and no minor labels; the
    title says the scale is logarithmic."""
    import math
    vs = [float(v) for v in values if v is not None and v > 0]
    if not vs:
        return fig
    lo, hi = math.log10(min(vs)), math.log10(max(vs))
    span = max(hi - lo, 0.3)
    lo, hi = lo - pad * span, hi + pad * span
    tv, tt = log_ticks(10 ** lo, 10 ** hi, suffix, steps)
    if len(tv) < 2:              # a narrow range: a tick at each end as well
        tv, tt = log_ticks(10 ** math.floor(lo), 10 ** math.ceil(hi), suffix, steps)
        lo, hi = math.log10(tv[0]), math.log10(tv[-1])
    upd = dict(type="log", range=[lo, hi], tickvals=tv, ticktext=tt, minor=dict(ticks="",
               showgrid=False), automargin=True)
    if title is not None:
        upd["title_text"] = title
    (fig.update_xaxes if axis == "x" else fig.update_yaxes)(row=row, col=col, **upd)
    return fig


# Every axis in the house templates prints plain numbers with thousands separators: 10,849,
# not 10.8k or 1.08e+04 (set here, after the templates, so the helpers above stay as they are).
for _name in ("inferlab", "inferlab_dark"):
    for _axis in (pio.templates[_name].layout.xaxis, pio.templates[_name].layout.yaxis):
        _axis.update(exponentformat="none", separatethousands=True)
