"""The KV cache animated from the real allocator: a recorded run's block map, step by step.

    from inferlab.lab import animation
    paths = animation.export(trace, "docs/gallery/kv_paging", tokenizer=tok)
    # kv_paging.gif (Pillow), kv_paging.mp4 (ffmpeg from imageio-ffmpeg), kv_paging-strip.png
    # and kv_paging-strip.svg (six frames side by side), kv_paging.caption.md
    inferlab animate --out docs/gallery          # the gallery's run (the views' record)

Each frame is the KV map view's own drawing (``inferlab.lab.drawings.kv_map``) of one step
of the trace: the physical blocks and the block table of one request (the one whose table
ends most scattered, ``follow``), with the token text in its slots; the frame's heading says
what the allocator did in that step (requests admitted and the prefix blocks they reused,
requests finished and the blocks they freed). Every frame has the same size and grid
(``frame=`` of the drawing), is drawn in the article profile by kaleido, and depends only on
the trace: two exports of one trace give pixel-identical frames (a test checks it).
"""
from __future__ import annotations

import io
import os

from inferlab.errors import InvalidInputError

FPS = 4                 # frames a second: a step read at a glance
STRIP = 6               # frames in the strip


def follow(trace) -> str:
    """The request whose block table shows paging best: the most logical neighbours that
    are not physical neighbours, at any step (ties: the later request)."""
    best = max(((sum(1 for a, b in zip(t, t[1:]) if b != a + 1), rid)
                for rec in trace.records for rid, t in rec.block_tables.items()),
               default=(0, ""))
    return best[1]


def step_note(rec, width: int = 66) -> str:
    """What the allocator did in step ``rec``, in at most ``width`` characters."""
    parts = []
    fresh = [c for c in rec.batch if c.kind == "prefill" and c.start == c.num_cached]
    hits = [c for c in fresh if c.num_cached]
    if fresh:
        parts.append(f"{', '.join(c.request_id for c in fresh[:3])} admitted"
                     + (f", {hits[0].num_cached} prefix tokens from cached blocks"
                        if hits else ""))
    for e in rec.kv_events:
        if e.kind == "freed":
            parts.append(f"{e.request_id} done, frees {', '.join(map(str, sorted(e.block_ids)))}")
    text = "; ".join(parts) or "decode: each running request writes one token"
    return text if len(text) <= width else text[:width - 1] + "…"


def figures(trace, tokenizer=None, request: str | None = None, every: int = 1):
    """(step, plotly figure in the article profile) for each ``every``-th step of
    ``trace``, following ``request``'s block table (default: ``follow``)."""
    from inferlab.lab import article
    from inferlab.lab.drawings.kv_map import kv_map, waste_title
    from inferlab.widgets import KVBlockMap
    if not trace.records:
        raise InvalidInputError("the trace has no steps to animate")
    kv = KVBlockMap(tokenizer=tokenizer)
    kv.load_trace(trace)
    rid = request or follow(trace)
    cols = 16
    rows = max((max(b for t in r.block_tables.values() for b in t) // cols + 1
                for r in trace.records if r.block_tables), default=1)
    order = list(trace.requests)                    # admission order
    trows = max((len(t) for r in trace.records for t in r.block_tables.values()), default=1)
    meta, n, out = trace.meta, len(trace.records), []
    for k in range(0, n, max(1, int(every))):
        kv.cursor = k
        rec = trace.records[k]
        # the followed request's table; before it arrives and after it ends, the table of
        # the request admitted last among those running
        live = [r for r in order if r in rec.block_tables]
        who = rid if rid in rec.block_tables else (live[-1] if live else rid)
        table = kv.block_table(who) if who in rec.block_tables else \
            {"request": who, "blocks": [], "tokens": 0}
        cells = kv.cells()
        fig = kv_map(cells, block_size=kv.block_size or 16, layout=kv.kv_layout,
                     table=table, columns=cols, frame=(rows, min(trows, 10)))
        for tr in fig.data:          # one legend in every frame: the picture never moves
            if tr.xaxis == "x" and tr.name not in ("labels", "selected request's blocks"):
                tr.showlegend = True
        tokens, slots, _ = waste_title(cells, kv.block_size or 16, kv.kv_layout)
        # two heading lines in every frame, so the picture never moves
        fig.update_layout(title_text=f"step {k + 1} of {n} · {kv.kv_layout}: {tokens:,} of "
                          f"{slots:,} reserved slots hold tokens<br>{step_note(rec)}"
                          f"<br><sup>clock: {meta.get('clock', 'wall')}</sup>")
        out.append((k, article.profile(fig, cores=os.cpu_count(), height=FRAME_HEIGHT)))
    return out


FRAME_HEIGHT = 720


def _pngs(figs, scale: float) -> list[bytes]:
    from tqdm.auto import tqdm

    from inferlab.lab.figures import to_image
    return [to_image(f, "png", f.layout.width, f.layout.height, scale)
            for _, f in tqdm(figs, desc="frames", unit="frame")]


def _images(pngs):
    from PIL import Image
    return [Image.open(io.BytesIO(b)).convert("RGB") for b in pngs]


def write_gif(pngs, path, fps: int = FPS) -> str:
    """The frames as a looping GIF (Pillow), one palette per frame, no dithering: the same
    frames give the same bytes."""
    from PIL import Image
    frames = [im.quantize(colors=255, method=Image.Quantize.MEDIANCUT,
                          dither=Image.Dither.NONE) for im in _images(pngs)]
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=round(1000 / fps),
                   loop=0, optimize=False, disposal=1)
    return os.fspath(path)


def write_video(pngs, path, fps: int = FPS) -> str:
    """The frames as an MP4 (H.264) or WebM (VP9) by the extension, through the ffmpeg that
    imageio-ffmpeg ships."""
    import imageio_ffmpeg
    ims = _images(pngs)
    w, h = ims[0].size
    ext = os.path.splitext(os.fspath(path))[1].lower()
    codec = {".mp4": "libx264", ".webm": "libvpx-vp9"}.get(ext)
    if codec is None:
        raise InvalidInputError(f"a video is .mp4 or .webm, not {ext!r}")
    writer = imageio_ffmpeg.write_frames(os.fspath(path), (w, h), fps=fps, codec=codec,
                                         pix_fmt_in="rgb24", pix_fmt_out="yuv420p",
                                         macro_block_size=2, ffmpeg_log_level="error",
                                         output_params=["-threads", "1"])
    writer.send(None)
    for im in ims:
        writer.send(im.tobytes())
    writer.close()
    return os.fspath(path)


def write_strip(figs, stem, n: int = STRIP, per_row: int = 3) -> list[str]:
    """``n`` frames evenly spread over the run, small, in a grid: ``stem-strip.png`` and
    ``stem-strip.svg`` (each frame's own SVG, nested)."""
    from PIL import Image

    from inferlab.lab.figures import to_image
    pick = [figs[round(i * (len(figs) - 1) / max(n - 1, 1))] for i in range(min(n, len(figs)))]
    ims = _images(_pngs(pick, 1.0))
    w, h = ims[0].size
    rows = -(-len(ims) // per_row)
    sheet = Image.new("RGB", (w * per_row, h * rows), "white")
    for i, im in enumerate(ims):
        sheet.paste(im, ((i % per_row) * w, (i // per_row) * h))
    png = f"{stem}-strip.png"
    sheet.save(png, optimize=False)
    parts = []
    for i, (_, f) in enumerate(pick):
        svg = to_image(f, "svg", f.layout.width, f.layout.height).decode()
        svg = svg[svg.index("<svg"):]
        parts.append(svg.replace("<svg", f'<svg x="{(i % per_row) * w}" '
                                 f'y="{(i // per_row) * h}"', 1))
    svg_path = f"{stem}-strip.svg"
    with open(svg_path, "w", encoding="utf-8") as fh:
        fh.write(f'<svg xmlns="http://www.w3.org/2000/svg" width="{w * per_row}" '
                 f'height="{h * rows}">' + "".join(parts) + "</svg>\n")
    return [png, svg_path]


def export(trace, stem, tokenizer=None, request: str | None = None, every: int = 1,
           video: str = ".mp4", source: str | None = None) -> list[str]:
    """Write ``stem``.gif (800 px), ``stem`` + ``video`` (1600 px), the strip and a caption;
    returns the paths."""
    stem = os.fspath(stem)
    figs = figures(trace, tokenizer, request, every)
    rid = request or follow(trace)
    paths = [write_gif(_pngs(figs, 1.0), stem + ".gif"),
             write_video(_pngs(figs, 2.0), stem + video)]
    paths += write_strip(figs, stem)
    n = len(trace.records)
    text = (f"**The paged KV cache of a real run, step by step.** {n} steps of "
            f"{len(trace.requests)} chat requests behind one system prompt "
            f"(SmolLM2-135M-Instruct, {trace.meta.get('clock', 'wall')} clock): blocks fill "
            f"as tokens are written, requests that finish free their blocks, later requests "
            f"take them, and the system prompt's full blocks are shared (shown with their "
            f"reference count). Below: the block table of {rid}, logical block → physical "
            f"block, with its tokens' text. {FPS} steps a second."
            + (f"\n\nSource: {source}." if source else "") + "\n")
    with open(stem + ".caption.md", "w", encoding="utf-8") as fh:
        fh.write(text)
    return paths + [stem + ".caption.md"]
