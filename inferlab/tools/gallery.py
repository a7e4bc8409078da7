"""The gallery: every view's picture and every chapter's figure on one page, for review.

    inferlab gallery [--out docs/gallery] [--measure | --smoke]

A contact sheet a reviewer (or a writer choosing a figure) can scan, drawn from the recorded
runs (docs/results/chapters: ``inferlab record`` writes them; ``--measure`` runs again): the
five views replayed from the traces of real runs of SmolLM2-135M-Instruct (eight chat
requests, at most four running, the wall clock; the KV map in both layouts; static against
continuous batching), then each chapter's figure as ``inferlab figures`` draws it. Each picture is the view's own ``figure()`` or the
chapter's ``figure()``: the same plotly figure JupyterLab shows live and the exports write.
Writes one PNG per picture (device scale 2) and ``README.md`` (GitHub renders it as the page).
"""
from __future__ import annotations

import datetime
import json
import os
import pathlib

from .showcase import QUESTIONS      # the README screenshots' eight chat requests


VIEWS = "views"          # the views' record: docs/results/chapters/views.json.gz
REPO_GALLERY = pathlib.Path(__file__).resolve().parents[2] / "docs" / "gallery"


# one system prompt before every question: its full blocks are the prefix the paged cache
# shares (one physical block, several block tables pointing at it)
SYSTEM = ("You are a patient tutor in a workshop on how language models are served. Answer "
          "each question in one or two short sentences, plainly, without lists.")


def _view_traces(smoke: bool) -> dict:
    """The views' runs of SmolLM2, as trace files' JSON values: the chat requests, one system
    prompt before each, in each KV layout with the same knobs (token stream, timeline and KV
    map read the paged one; the contiguous one cannot share the prefix: that is the layout's
    difference), then static against continuous batching on one synthetic workload."""
    import inferlab as il
    from inferlab.observe.trace import Trace
    from inferlab.sim import workloads as wl
    from inferlab.widgets import BatchingComparison
    qs = QUESTIONS[:4] if smoke else QUESTIONS
    max_tokens = 12 if smoke else 40
    traces = {}
    for layout in ("paged", "contiguous"):
        eng = il.Engine(num_blocks=64, max_num_seqs=4, max_num_batched_tokens=512,
                        max_model_len=160, kv_layout=layout,    # contiguous: 160 per request
                        enable_prefix_caching=True)
        with Trace.record(eng) as trace:
            eng.generate([[{"role": "system", "content": SYSTEM},
                           {"role": "user", "content": q}] for q in qs],
                         il.SamplingParams(max_tokens=max_tokens), use_tqdm=False)
        traces[layout] = trace.to_dict()
    work = wl.synthetic(8 if smoke else 16, prompt_len=wl.Uniform(16, 48),
                        output_len=wl.Uniform(4, 48 if smoke else 96), seed=1)
    cmp = BatchingComparison.run(work, ("static", dict(scheduler="static")),
                                 ("continuous", dict(scheduler="continuous")),
                                 model=None, max_num_seqs=4, num_blocks=128)
    traces.update({label: trace.to_dict() for label, trace in cmp.traces.items()})
    return {"questions": len(qs), "traces": traces, "comparison_title": cmp.title}


def scatter(table: list[int]) -> int:
    """How far a block table is from the identity: logical neighbours that are not physical
    neighbours (0 for blocks handed out in order)."""
    return sum(1 for a, b in zip(table, table[1:]) if b != a + 1)


def paging_step(trace) -> tuple[int, str]:
    """(step, request) that shows paging best: the request whose block table is most
    scattered (blocks freed by finished requests, taken again), at the step where it is,
    with the most shared blocks, then the most blocks in use."""
    best, pick = None, (0, "")
    for k, rec in enumerate(trace.records):
        from collections import Counter
        held = Counter(b for t in rec.block_tables.values() for b in t)
        shared = sum(1 for n in held.values() if n > 1)      # one block, several tables
        for rid, table in rec.block_tables.items():
            key = (scatter(table), shared, rec.kv_blocks_used, -k)
            if best is None or key > best:
                best, pick = key, (k, rid)
    return pick


def record_views(smoke: bool = False, root=None) -> str:
    """Run the views' workloads once and write their traces as a record."""
    from inferlab.lab import protocol, records
    rec = {"record": 1, "chapter": VIEWS, "smoke": smoke,
           **protocol.result_meta("inferlab record --id views" + (" --smoke" if smoke else "")),
           "data": _view_traces(smoke)}
    return os.fspath(records.write(pathlib.Path(root or records.ROOT) /
                                   f"{VIEWS}{records.SUFFIX}", rec))


def view_traces(smoke: bool = False, measure: bool | None = None) -> tuple[dict, int]:
    """({run: Trace}, questions) of the views: the record's (or new runs: ``measure``,
    implied by ``smoke``)."""
    from inferlab.lab import records
    from inferlab.observe.trace import Trace
    if measure or smoke:
        data = _view_traces(smoke)
    else:
        path = records.ROOT / f"{VIEWS}{records.SUFFIX}"
        if not path.exists():
            raise records.NoRecord(f"no record of the views at {path}: write it with "
                                   "`inferlab record --id views`, or pass --measure")
        data = records.read(path)["data"]
    return {k: Trace.from_dict(v) for k, v in data["traces"].items()}, data["questions"]


def view_figures(smoke: bool = False, measure: bool | None = None, traces=None
                 ) -> list[tuple[str, str, object]]:
    """(file stem, caption, figure) for each view, replayed from the recorded traces (or from
    new runs: ``measure``, implied by ``smoke``; or ``traces``: ``view_traces``' value)."""
    from inferlab.widgets import BatchingComparison, KVBlockMap, SchedulerTimeline, TokenStream
    tr, n = traces or view_traces(smoke, measure)
    out = []
    from inferlab.model.loader import default_tokenizer
    tok = default_tokenizer()            # the prompt's token texts in the block table
    for layout in ("paged", "contiguous"):
        kv = KVBlockMap(tokenizer=tok)
        kv.load_trace(tr[layout])
        kv.cursor, kv.selected = paging_step(tr[layout])
        if layout == "paged":
            out += [("token_stream", f"Token stream: {n} chat requests",
                     TokenStream().load_trace(tr[layout]).figure()),
                    ("scheduler_timeline", "Scheduler timeline: at most 4 running",
                     SchedulerTimeline().load_trace(tr[layout]).figure())]
        out.append((f"kv_map_{layout}", f"KV cache, {layout} layout, at its fullest step",
                    kv.figure()))
    cmp = BatchingComparison(tr["static"], tr["continuous"], labels=["static", "continuous"],
                             title="Static against continuous batching")
    out.append(("batching_comparison", "Static against continuous batching", cmp.figure()))
    return out


def chapter_figures(smoke: bool = False, only=None, measure: bool | None = None
                    ) -> list[tuple[str, str, object]]:
    """(file stem, caption, figure) for each chapter figure (a chapter may draw several)."""
    from inferlab.lab import book
    names = [n for n in book.chapter_modules() if not only or n in only or n[:4] in only]
    return [(stem, stem.replace("_", " ", 1).replace("_", " ").replace("-", ": "), fig)
            for n in names for stem, fig in book.chapter_figures(n, smoke=smoke,
                                                                  measure=measure)]


def _record_of(stem: str) -> str:
    return VIEWS if not stem.startswith("ch") else stem.split("-")[0]


def build(out_dir="docs/gallery", smoke: bool = False, only=None, views: bool = True,
          measure: bool | None = None) -> str:
    """Render every picture into ``out_dir`` in the article profile (light and dark twins,
    caption and alt text beside each: ``figures.save(..., profile="article")``) and write
    its README.md; returns that path. The pictures are drawn from the records (no
    measuring) unless ``measure`` or ``smoke``. ``only`` (chapters) into a folder that has a
    page already: just those chapters' pictures, their entries updated in the page and the
    fingerprints, every other entry left as it was."""
    from tqdm.auto import tqdm

    from inferlab.lab.book import record_notes
    from inferlab.lab.figures import save
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sections = []
    merge = bool(only) and (out / "README.md").exists()
    if merge:                    # some chapters into a drawn page: only their pictures
        views = False
    if views:
        traces = view_traces(smoke, measure)
        sections.append(("Views", view_figures(traces=traces)))
    sections.append(("Chapter figures", chapter_figures(smoke, only, measure)))
    drawn = (f"measured on {datetime.date.today().isoformat()}" if measure or smoke else
             "drawn from the recorded runs in docs/results/chapters (each caption says when "
             "and on which CPU its run was recorded)")
    lines = ["# Gallery", "",
             "Every view and chapter figure, as `inferlab gallery"
             + (" --smoke" if smoke else " --measure" if measure else "") + "` drew them: "
             + drawn + " (SmolLM2-135M-Instruct, real weights"
             + ("; smoke run: small sizes, not the recorded numbers" if smoke else "") + "). "
             "Each is the same plotly figure JupyterLab shows, in the article profile (800 px "
             "column at 2x, text at least 14 px); beside each PNG lie its dark twin "
             "(`-dark.png`), its caption (`.caption.md`) and its alt text (`.alt.txt`).", ""]
    pictures = [(title, item) for title, items in sections for item in items]
    notes: dict[str, dict] = {}
    for title, (stem, caption, fig) in tqdm(pictures, desc="gallery", unit="figure"):
        if f"## {title}" not in lines:
            lines += [f"## {title}", ""]
        rec = _record_of(stem)
        if rec not in notes:
            notes[rec] = {"cores": os.cpu_count()} if measure or smoke else record_notes(rec)
        save(fig, out / f"{stem}.png", profile="article", **notes[rec])
        alt = (out / f"{stem}.alt.txt").read_text(encoding="utf-8").strip()
        lines += [f"### {caption}", "", f"![{alt}]({stem}.png)", "",
                  f"dark twin: [{stem}-dark.png]({stem}-dark.png) · caption: "
                  f"[{stem}.caption.md]({stem}.caption.md)", ""]
        if not (measure or smoke):
            lines[-1:] = ["", f"<sub>{notes[rec]['source']}</sub>", ""]
    if views:
        lines += _animation(out, traces[0]["paged"], smoke or measure, notes.get(VIEWS, {}))
    path = out / "README.md"
    prints = {stem: fingerprint(fig) for _, (stem, _, fig) in pictures}
    if merge:
        _merge(out, [stem for _, (stem, _, _) in pictures], prints, measure or smoke)
        return os.fspath(path)
    path.write_text("\n".join(lines), encoding="utf-8")
    if not (measure or smoke):     # what the records draw: a later draw must give the same
        (out / FINGERPRINTS).write_text(json.dumps(prints, indent=1) + "\n")
    return os.fspath(path)


def _merge(out: pathlib.Path, stems: list[str], prints: dict, measured: bool) -> None:
    """``--only``: the redrawn pictures' alt text into the page and their fingerprints into
    the file, every other picture's entry left as it was."""
    import re
    page = out / "README.md"
    text = page.read_text(encoding="utf-8") if page.exists() else ""
    for stem in stems:
        alt = (out / f"{stem}.alt.txt").read_text(encoding="utf-8").strip()
        text, n = re.subn(rf"!\[[^\]]*\]\({re.escape(stem)}\.png\)",
                          lambda _: f"![{alt}]({stem}.png)", text)
        if not n:
            raise FileNotFoundError(f"{page} has no entry for {stem}: draw the whole gallery "
                                    "(`inferlab gallery`, without --only)")
    page.write_text(text, encoding="utf-8")
    if not measured:
        path = out / FINGERPRINTS
        old = json.loads(path.read_text()) if path.exists() else {}
        path.write_text(json.dumps({**old, **prints}, indent=1) + "\n")


ANIMATION = "kv_paging"


def _animation(out, trace, fast: bool, note: dict) -> list[str]:
    """The paged KV cache animated from the views' run (every step; a smoke run every 4th):
    GIF, MP4, a strip of frames and a caption; the README's section for it."""
    from inferlab.lab import animation
    from inferlab.model.loader import default_tokenizer
    animation.export(trace, out / ANIMATION, tokenizer=default_tokenizer(),
                     every=4 if fast else 1, source=note.get("source"))
    return ["## The KV cache, step by step", "",
            f"![The paged KV cache of the views' run, animated]({ANIMATION}.gif)", "",
            f"video: [{ANIMATION}.mp4]({ANIMATION}.mp4) · frames: "
            f"[{ANIMATION}-strip.png]({ANIMATION}-strip.png), "
            f"[{ANIMATION}-strip.svg]({ANIMATION}-strip.svg) · caption: "
            f"[{ANIMATION}.caption.md]({ANIMATION}.caption.md)", ""]


FINGERPRINTS = "figures.sha256.json"


def fingerprint(fig) -> str:
    """The figure's data and layout, hashed: equal figures, equal fingerprints (the PNG's
    bytes also depend on the browser that drew it)."""
    import hashlib

    from inferlab.lab.book import figure_json
    return hashlib.sha256(figure_json(fig).encode()).hexdigest()
