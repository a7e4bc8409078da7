"""The commands that record a chapter's full run and draw from the records: `inferlab record`
(measure each chapter once, write docs/results/chapters), `inferlab figures`, `inferlab
gallery` and `inferlab claims` (drawn from the records; `--measure` measures again, `--smoke`
at small sizes, and says so)."""
from __future__ import annotations

import pathlib
import sys

SMOKE_RECORDS = pathlib.Path("build") / "records-smoke"   # `inferlab record --smoke` writes here


def _measure_or_records(args) -> bool:
    """Whether to measure (``--measure``, or ``--smoke``: smoke sizes are never recorded);
    else the drawing reads the records, and a missing one is a clear error."""
    return bool(args.measure or args.smoke)


def _figures(args) -> int:
    from inferlab.lab.book import build_all
    build_all(args.out, smoke=args.smoke, only=args.id or None, theme=args.theme,
              measure=_measure_or_records(args), profile=args.profile)
    return 0


def _gallery(args) -> int:
    from inferlab.tools.gallery import build
    print(build(args.out, smoke=args.smoke, only=args.only or None,
                measure=_measure_or_records(args)))
    return 0


def _animate(args) -> int:
    from inferlab.lab import animation
    from inferlab.model.loader import default_tokenizer
    if args.trace:
        from inferlab.observe.trace import Trace
        trace = Trace.load(args.trace)
    else:
        from inferlab.tools.gallery import view_traces
        trace = view_traces(args.smoke, _measure_or_records(args))[0]["paged"]
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for path in animation.export(trace, out / args.name, tokenizer=default_tokenizer(),
                                 request=args.request, every=args.every, video=args.video):
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _record(args) -> int:
    from tqdm.auto import tqdm

    from inferlab.lab import records
    from inferlab.lab.book import chapter_modules
    from inferlab.tools.gallery import record_views
    names = [records.chapter_name(c) for c in args.id if c not in ("views", "tour")] \
        if args.id else chapter_modules()
    if args.rejudge:           # today's judges on the recorded measurements; nothing measured
        names = [n for n in names if n in records.recorded()]
    # a trial run at smoke sizes never replaces the full runs everything draws from
    root = SMOKE_RECORDS if args.smoke else None
    for name in (bar := tqdm(names, desc="rejudge" if args.rejudge else "record",
                             unit="chapter")):
        bar.set_postfix_str(name)
        out = records.rejudge(name) if args.rejudge else \
            records.record(name, smoke=args.smoke, root=root)
        print(f"wrote {out}", file=sys.stderr)
    if (not args.id or "views" in args.id) and not args.rejudge:
        print(f"wrote {record_views(smoke=args.smoke, root=root)}", file=sys.stderr)
    if (not args.id or "tour" in args.id) and not args.rejudge and not args.smoke:
        from inferlab.lab import replay_tour       # the tour executed, its calls recorded
        print(f"wrote {replay_tour.record()}", file=sys.stderr)
    if names and not args.smoke and records.recorded() == chapter_modules():
        from inferlab.lab import claims, report    # the report card, judged on the records
        cmd = "inferlab claims (the records)"
        path = report.write_result_file(claims.run_all(recorded=True),
                                        records.ROOT.parent / "claims.json", cmd, False,
                                        meta=records.meta_of_all(cmd))
        print(f"wrote {path}; `inferlab results render` redraws README's and BENCHMARKS' "
              "tables from it", file=sys.stderr)
    return 0


def _claims(args) -> int:
    from inferlab.lab import claims, records, report
    measure = _measure_or_records(args)
    results = claims.run_all(smoke=args.smoke, only=args.only or None, recorded=not measure,
                             progress=lambda msg: print(msg, file=sys.stderr, flush=True))
    mode = "smoke run" if args.smoke else "full run" if measure else "recorded full runs"
    if args.json:
        import json
        cmd = "inferlab claims" + (" --smoke" if args.smoke else " --measure" if measure
                                   else "") + (
            " --only " + " ".join(args.only) if args.only else "") + " --json"
        meta = None if measure else records.meta_of_all(cmd)
        print(json.dumps(report.as_result_file(results, cmd, args.smoke, meta), indent=1))
        return 0
    print(f"inferlab report card ({mode}; {len(results)} claims)\n")
    print(report.markdown_table(results) if args.markdown else report.text_table(results))
    return 0


def add_commands(sub) -> None:
    """The four commands' parsers, on the ``inferlab`` command's subparsers."""
    measure_help = ("measure again instead of drawing the recorded runs "
                    "(docs/results/chapters, written by `inferlab record`)")
    smoke_help = "measure small workloads (fast; implies --measure, says 'smoke')"
    f = sub.add_parser("figures", help="every chapter's figure (SVG, PNG, PDF), drawn from "
                       "the recorded runs")
    f.add_argument("--out", default="figures")
    f.add_argument("--id", nargs="+", default=None, help="chapters (e.g. ch05)")
    f.add_argument("--theme", choices=["light", "dark"], default=None)
    f.add_argument("--profile", choices=["notebook", "article"], default="notebook",
                   help="article: 800 px column at 2x, text >= 14 px, light and dark twins, "
                        "the caveats in NAME.caption.md and NAME.alt.txt")
    f.add_argument("--measure", action="store_true", help=measure_help)
    f.add_argument("--smoke", action="store_true", help=smoke_help)
    f.set_defaults(fn=_figures)
    gl = sub.add_parser("gallery", help="every view and chapter figure on one page (PNGs and "
                        "a README.md), drawn from the recorded runs")
    gl.add_argument("--out", default="docs/gallery")
    gl.add_argument("--measure", action="store_true", help=measure_help)
    gl.add_argument("--smoke", action="store_true", help=smoke_help)
    gl.add_argument("--only", nargs="+", default=None, help="chapters (e.g. ch04 ch05)")
    gl.set_defaults(fn=_gallery)
    an = sub.add_parser("animate", help="the KV cache of a run, step by step, from the real "
                        "allocator's records: GIF, MP4 or WebM, a strip of frames, a caption")
    an.add_argument("--out", default="figures")
    an.add_argument("--name", default="kv_paging", help="file stem (default kv_paging)")
    an.add_argument("--trace", default=None, help="a trace file (Trace.save) to animate; "
                    "default: the gallery's recorded run of the views")
    an.add_argument("--request", default=None, help="whose block table to follow (default: "
                    "the one that ends most scattered)")
    an.add_argument("--every", type=int, default=1, help="draw every Nth step")
    an.add_argument("--video", choices=[".mp4", ".webm"], default=".mp4")
    an.add_argument("--measure", action="store_true", help=measure_help)
    an.add_argument("--smoke", action="store_true", help=smoke_help)
    an.set_defaults(fn=_animate)
    rc = sub.add_parser("record", help="measure each chapter's full run once and write its "
                        "record (docs/results/chapters): what figures, gallery, report card "
                        "and README draw")
    rc.add_argument("--id", nargs="+", default=None,
                    help="chapters (e.g. ch05), views (the gallery's views) or tour (the tour "
                    "notebook's run, what INFERLAB_REPLAY=1 replays); default all")
    rc.add_argument("--smoke", action="store_true", help="small workloads (a trial run, "
                    f"written to {SMOKE_RECORDS}/, never over the full runs)")
    rc.add_argument("--rejudge", action="store_true", help="judge the recorded measurements "
                    "again (a judge changed) and rewrite their verdicts; measures nothing")
    rc.set_defaults(fn=_record)
    c = sub.add_parser("claims", help="the report card: every claim judged on the recorded "
                       "runs (--measure: measure again)")
    c.add_argument("--measure", action="store_true", help=measure_help)
    c.add_argument("--smoke", action="store_true", help=smoke_help)
    c.add_argument("--only", nargs="+", default=None,
                   help="claim ids or chapters (e.g. ch05 04-kv-waste)")
    c.add_argument("--markdown", action="store_true", help="print a Markdown table (README)")
    c.add_argument("--json", action="store_true",
                   help="every claim as JSON (class, verdict, numbers, reason) with the "
                        "command, date, CPU and load")
    c.set_defaults(fn=_claims)
