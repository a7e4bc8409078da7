"""The gallery: every view's picture and every chapter's figure on one page, for review.

    inferlab gallery [--out docs/gallery] [--smoke]

A contact sheet a reviewer (or a writer choosing a figure) can scan: the five views drawn from
one real run of SmolLM2-135M-Instruct (eight chat requests, at most four running, the wall
clock; the KV map in both layouts; static against continuous batching), then each chapter's
figure as ``inferlab figures`` draws it. Each picture is the view's own ``figure()`` or the
chapter's ``figure()``: the same plotly figure JupyterLab shows live and the exports write.
Writes one PNG per picture (device scale 2) and ``README.md`` (GitHub renders it as the page).
"""
from __future__ import annotations

import datetime
import os
import pathlib

from .showcase import QUESTIONS      # the README screenshots' eight chat requests


def view_figures(smoke: bool = False) -> list[tuple[str, str, object]]:
    """(file stem, caption, figure) for each view, from real runs of SmolLM2."""
    import inferlab as il
    from inferlab.sim import workloads as wl
    from inferlab.widgets import BatchingComparison, KVBlockMap, SchedulerTimeline, TokenStream
    qs = QUESTIONS[:4] if smoke else QUESTIONS
    max_tokens = 12 if smoke else 40
    out = []
    for layout in ("paged", "contiguous"):
        eng = il.Engine(num_blocks=64, max_num_seqs=4, max_num_batched_tokens=256,
                        max_model_len=128, kv_layout=layout)   # contiguous: 128 per request
        views = [TokenStream(eng), SchedulerTimeline(eng), KVBlockMap(eng)]
        eng.generate([[{"role": "user", "content": q}] for q in qs],
                     il.SamplingParams(max_tokens=max_tokens), use_tqdm=False)
        for v in views:
            v.detach()
        ts, tl, kv = views
        recs = kv.trace.records
        kv.cursor = max(range(len(recs)), key=lambda k: recs[k].kv_blocks_used)
        if layout == "paged":
            out += [("token_stream", f"Token stream: {len(qs)} chat requests", ts.figure()),
                    ("scheduler_timeline", "Scheduler timeline: at most 4 running",
                     tl.figure())]
        out.append((f"kv_map_{layout}", f"KV cache, {layout} layout, at its fullest step",
                    kv.figure()))
    work = wl.synthetic(8 if smoke else 16, prompt_len=wl.Uniform(16, 48),
                        output_len=wl.Uniform(4, 48 if smoke else 96), seed=1)
    cmp = BatchingComparison.run(work, ("static", dict(scheduler="static")),
                                 ("continuous", dict(scheduler="continuous")),
                                 model=None, max_num_seqs=4, num_blocks=128)
    out.append(("batching_comparison", "Static against continuous batching", cmp.figure()))
    return out


def chapter_figures(smoke: bool = False, only=None) -> list[tuple[str, str, object]]:
    from inferlab.lab.book import chapter_figure, chapter_modules
    names = [n for n in chapter_modules() if not only or n in only or n[:4] in only]
    return [(n, n.replace("_", " ", 1).replace("_", " "), chapter_figure(n, smoke=smoke))
            for n in names]


def _size(fig, width: int, height: int) -> tuple[int, int]:
    return fig.layout.width or width, fig.layout.height or height


def build(out_dir="docs/gallery", smoke: bool = False, only=None, views: bool = True) -> str:
    """Render every picture into ``out_dir`` and write its README.md; returns that path."""
    from tqdm.auto import tqdm

    from inferlab.lab.figures import save
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sections = []
    if views:
        sections.append(("Views", view_figures(smoke), (1000, 460)))
    sections.append(("Chapter figures", chapter_figures(smoke, only), (1000, 500)))
    lines = ["# Gallery", "",
             "Every view and chapter figure, as `inferlab gallery"
             + (" --smoke" if smoke else "") + "` drew them on "
             + datetime.date.today().isoformat() + " (SmolLM2-135M-Instruct, real weights). "
             "Each is the same plotly figure JupyterLab shows and the exports write.", ""]
    pictures = [(title, item, size) for title, items, size in sections for item in items]
    for title, (stem, caption, fig), size in tqdm(pictures, desc="gallery", unit="figure"):
        if f"## {title}" not in lines:
            lines += [f"## {title}", ""]
        w, h = _size(fig, *size)
        save(fig, out / f"{stem}.png", width=w, height=h, scale=2.0)
        lines += [f"### {caption}", "", f"![{caption}]({stem}.png)", ""]
    path = out / "README.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return os.fspath(path)
