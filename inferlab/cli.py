"""Command line: `inferlab generate "prompt"`, `inferlab bench ...`, `inferlab figures`,
`inferlab gallery`,
`inferlab claims` (the report card: every claim's computed verdict), `inferlab serve` (the
engine behind the OpenAI API), `inferlab vllm serve`
(vLLM's server set up for the lab's views), `inferlab cache info|warm|clear` (the weights
cache), `inferlab export-hf DIR` (a transformers directory), `inferlab export-html`,
`inferlab results render|check` (README's and BENCHMARKS' tables from docs/results/)."""
from __future__ import annotations

import argparse
import sys


def _generate(args) -> int:
    import inferlab as il
    eng = il.Engine(args.model, block_size=args.block_size, attention_backend=args.backend)
    prompt = [{"role": "user", "content": args.prompt}] if args.chat else args.prompt
    params = il.SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature,
                               top_p=args.top_p, top_k=args.top_k, seed=args.seed)
    last = None
    for delta in eng.stream(prompt, params):
        sys.stdout.write(delta.new_text)
        sys.stdout.flush()
        last = delta
    m = last.metrics
    st = eng.stats()
    n = m.num_output_tokens
    rate = 1 / m.tpot if m.tpot else float("nan")          # decode tokens/s
    print()
    print(f"--- {eng.model_name} | prompt {m.num_prompt_tokens} tokens | {n} new tokens "
          f"({last.finish_reason})")
    print(f"TTFT {m.ttft * 1000:.1f} ms | decode {rate:.1f} tokens/s | "
          f"KV blocks used {st.peak_kv_blocks_used} of {st.kv_blocks_total} "
          f"(block size {st.block_size}) | clock {st.clock}")
    return 0


def _bench(args) -> int:
    if args.what == "engine" and args.alone:
        from inferlab.bench.engine import bench_engine_alone
        _save(args, bench_engine_alone(num_requests=args.requests or 32, repeats=args.repeats,
                                       model=args.model))
        return 0
    if args.what == "engine":
        from inferlab.bench.engine import bench_engine
        _save(args, bench_engine(num_requests=args.requests or 32, repeats=args.repeats,
                                 prompt_len=args.input_len or 64,
                                 new_tokens=args.output_len or 64,
                                 model=args.model, device=args.device,
                                 other_linear=args.linear_backend
                                 if args.linear_backend != "auto" else "torch"))
        return 0
    if args.what == "trace":
        from inferlab.bench.engine import bench_trace, print_trace_bench
        print_trace_bench(bench_trace(args.model or "tiny", repeats=args.repeats))
        return 0
    if args.what == "soak":
        from inferlab.bench.engine import bench_soak
        res = bench_soak(num_requests=args.requests or 2000)
        return 0 if res["blocks_leaked"] == 0 and res["rss_growth"] < 0.05 else 1
    if args.what == "vllm":
        from inferlab.bench.vllm import bench_vllm
        _save(args, bench_vllm(num_requests=args.requests or 32, repeats=args.repeats,
                               dtype=args.dtype))
        return 0
    if args.what == "clock":
        from inferlab.bench.clock_validation import main as bench_clock
        return bench_clock(repeats=args.repeats, model=args.model,
                           out=args.out or "build/bench/clock", threads=args.threads)
    if args.what == "roofline":
        from inferlab.bench.roofline import main as bench_roofline
        _save(args, bench_roofline(model=args.model, repeats=args.repeats + 2,
                                   linear_backend=args.linear_backend, dtype=args.dtype))
        return 0
    if args.what == "coldstart":
        from inferlab.bench.coldstart import main as bench_coldstart
        bench_coldstart(repeats=args.repeats + 1,
                        out_path=args.out or "build/bench/coldstart.json")
        return 0
    if args.what == "serve":
        import signal

        from inferlab.bench.serve import main as bench_serve
        signal.signal(signal.SIGTERM, signal.default_int_handler)    # TERM stops the servers too
        given = any(a == "--repeats" or a.startswith("--repeats=") for a in args.argv)
        _save(args, bench_serve(smoke=args.smoke, rates=args.rates, requests=args.requests,
                                input_len=args.input_len, output_len=args.output_len,
                                repeats=args.repeats if given else None))
        return 0
    if args.what == "kernels":
        from inferlab.bench.attention_kernels import main as bench_kernels
        bench_kernels(["--repeats", str(args.repeats + 4)])
        return 0
    if args.what == "gemm":
        from inferlab.bench.gemm import main as bench_gemm
        _save(args, bench_gemm(repeats=args.repeats + 2, dtype=args.dtype))
        return 0
    if args.what == "profile":
        from inferlab.bench.profile import main as bench_profile
        bench_profile(model=args.model, repeats=args.repeats)
        return 0
    if args.what == "threads":
        from inferlab.bench.threads import main as bench_threads
        return bench_threads(repeats=args.repeats, out_path=args.out)
    if args.what == "lab":
        from inferlab.bench.lab_live import main as bench_lab
        return bench_lab(repeats=args.repeats, out_path=args.out)
    if args.what == "widgets":
        from inferlab.bench.widgets import main as bench_widgets
        return bench_widgets(["--requests", str(args.requests or 200)])
    from inferlab.bench.scheduling import run as run_sched
    kw = {"num_requests": args.requests} if args.requests else {}
    run_sched(args.what, repeats=args.repeats, model=args.model, **kw)
    return 0


def _save(args, numbers) -> None:
    """``--out PATH``: the bench's numbers as a result file, with the command, date, CPU and
    load beside them (docs/results/ holds the files README's and BENCHMARKS' tables render
    from: `inferlab results render`)."""
    if args.out:
        import shlex

        from inferlab.bench.common import write_result
        print(f"written to {write_result(args.out, 'inferlab ' + shlex.join(args.argv), numbers)}")


def _results(args) -> int:
    from inferlab.tools.results import main as results_main
    return results_main(args.action)


def _export_hf(args) -> int:
    from inferlab.model.loader import export_hf
    path = export_hf(args.model, args.dir, args.dtype)
    print(f"wrote {path} (a transformers directory with safetensors; load it with "
          f"vllm.LLM(model={path!r}) or transformers' from_pretrained)")
    return 0


def _export_html(args) -> int:
    from inferlab.lab.static_export import export_html
    for nb in args.notebooks:
        print(f"wrote {export_html(nb, args.output if len(args.notebooks) == 1 else None)}")
    return 0


def _cache(args) -> int:
    from inferlab.tools.cache_cmd import run
    return run(args.action)


def _measure_or_records(args) -> bool:
    """Whether to measure (``--measure``, or ``--smoke``: smoke sizes are never recorded);
    else the drawing reads the records, and a missing one is a clear error."""
    return bool(args.measure or args.smoke)


def _figures(args) -> int:
    from inferlab.lab.book import build_all
    build_all(args.out, smoke=args.smoke, only=args.id or None, theme=args.theme,
              measure=_measure_or_records(args))
    return 0


def _gallery(args) -> int:
    from inferlab.tools.gallery import build
    print(build(args.out, smoke=args.smoke, only=args.only or None,
                measure=_measure_or_records(args)))
    return 0


def _record(args) -> int:
    from tqdm.auto import tqdm

    from inferlab.lab import records
    from inferlab.lab.book import chapter_modules
    from inferlab.tools.gallery import record_views
    names = [records.chapter_name(c) for c in args.id if c != "views"] if args.id \
        else chapter_modules()
    if args.rejudge:           # today's judges on the recorded measurements; nothing measured
        names = [n for n in names if n in records.recorded()]
    for name in (bar := tqdm(names, desc="rejudge" if args.rejudge else "record",
                             unit="chapter")):
        bar.set_postfix_str(name)
        out = records.rejudge(name) if args.rejudge else records.record(name, smoke=args.smoke)
        print(f"wrote {out}", file=sys.stderr)
    if (not args.id or "views" in args.id) and not args.rejudge:
        print(f"wrote {record_views(smoke=args.smoke)}", file=sys.stderr)
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


def _vllm(args) -> int:
    import signal
    import time

    from inferlab.connect.front.launcher import VllmServer
    from inferlab.connect.front.machine import default_model_dir
    signal.signal(signal.SIGTERM, signal.default_int_handler)    # stop the server on TERM too
    srv = VllmServer(args.model_dir or default_model_dir(), port=args.port,
                     block_size=args.block_size, max_model_len=args.max_model_len,
                     model_name=None if args.model_dir else "SmolLM2-135M-Instruct")
    print(f"starting vLLM (its own venv, {srv.venv}) on {srv.url} ...", flush=True)
    try:
        srv.start(timeout=args.timeout)
        print(f"vLLM serves {srv.model_name!r} at {srv.url} (OpenAI API)\n"
              f"  KV events  {srv.kv_endpoint}  (replay {srv.replay_endpoint})\n"
              f"  steps      {srv.steps_endpoint}  (inferlab's stat-logger plugin)\n"
              f"  log        {srv.log_path}\nwatch it from a notebook:\n\n{srv.snippet()}\n\n"
              "Ctrl-C stops it.", flush=True)
        while srv.alive:
            time.sleep(1.0)
        print(f"inferlab: vLLM exited (code {srv.returncode}); its log ends:\n{srv.log_tail()}",
              file=sys.stderr)
        return 1
    finally:
        srv.stop()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="inferlab", description="A lab over a real LLM inference "
                                "engine: paged KV cache, continuous batching, live widgets.")
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="stream a completion, then print TTFT, tokens/s, KV use")
    g.add_argument("prompt")
    g.add_argument("--model", default=None, help="None = SmolLM2-135M-Instruct; 'tiny'; a path")
    g.add_argument("--max-tokens", type=int, default=64)
    g.add_argument("--temperature", type=float, default=0.0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--seed", type=int, default=None)
    g.add_argument("--block-size", type=int, default=16)
    g.add_argument("--backend", default="auto")
    g.add_argument("--raw", dest="chat", action="store_false",
                   help="send the prompt as raw text instead of a chat message")
    g.set_defaults(fn=_generate)
    b = sub.add_parser("bench", help="side-by-side benchmarks (ratios)")
    b.add_argument("what", choices=["engine", "batching", "kv", "prefix", "chunked", "soak",
                                    "trace", "widgets", "prefix-reuse", "vllm", "clock",
                                    "roofline", "profile", "gemm", "kernels",
                                    "coldstart", "serve", "threads", "lab"])
    b.add_argument("--repeats", type=int, default=3, help="(serve: default 3, --smoke 1)")
    b.add_argument("--requests", type=int, default=None,
                   help="number of requests (default: engine 32, batching 256, soak 2000; "
                   "serve: prompts per rate and server, 32, --smoke 4)")
    b.add_argument("--smoke", action="store_true", help="serve: small sizes (CI)")
    b.add_argument("--rates", type=float, nargs="+", default=None,
                   help="serve: request rates, req/s, Poisson; inf = all at once "
                   "(default 1 2 4 inf; --smoke 8)")
    b.add_argument("--input-len", type=int, default=None,
                   help="engine: random prompt tokens (default 64); serve: (default 128; "
                   "--smoke 32)")
    b.add_argument("--output-len", type=int, default=None,
                   help="engine, serve: new tokens per request (default 64; serve --smoke "
                   "8)")
    b.add_argument("--model", default=None)
    b.add_argument("--device", default=None)
    b.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                   help="vllm, engine, roofline: weights, KV cache and activations in this dtype "
                   "(default float32)")
    b.add_argument("--alone", action="store_true",
                   help="engine: inferlab and transformers' padded batch each in its own process")
    b.add_argument("--linear-backend", default="auto",
                   help="roofline: the GEMM path (auto, torch, onednn, onednn-packed, numba, "
                   "numba+...); engine: the second inferlab engine's (default torch)")
    b.add_argument("--out", default=None,
                   help="clock: where the table (JSON) and the figure (SVG, PNG) go (default "
                   "build/bench/clock); coldstart: the result file (default "
                   "build/bench/coldstart.json); engine, vllm, roofline, gemm, serve, "
                   "threads, lab: write the numbers with the command, date, CPU and load to this "
                   "JSON file")
    b.add_argument("--threads", type=int, default=None,
                   help="clock: torch/numba threads (default: all CPUs)")
    b.set_defaults(fn=_bench)
    x = sub.add_parser("export-hf", help="write a model as a transformers directory with "
                       "safetensors (what vLLM loads)")
    x.add_argument("dir", help="a new (or empty) directory")
    x.add_argument("--model", default=None, help="None = SmolLM2-135M-Instruct; 'tiny'; a path")
    x.add_argument("--dtype", default="float32")
    x.set_defaults(fn=_export_hf)
    e = sub.add_parser("export-html", help="a notebook as one offline HTML page: every view "
                       "as its picture (no widget JavaScript, nothing from the network)")
    e.add_argument("notebooks", nargs="+", help=".ipynb files (NB.ipynb -> NB.html)")
    e.add_argument("-o", "--output", default=None, help="the page's path (one notebook)")
    e.set_defaults(fn=_export_html)
    c = sub.add_parser("cache", help="the cache of converted weights: info | warm "
                       "(convert the default model and compile the numba kernels now) | verify "
                       "(re-hash every file) | clear")
    c.add_argument("action", choices=["info", "warm", "verify", "clear"])
    c.set_defaults(fn=_cache)
    from inferlab.serve import command as serve_command
    sv = sub.add_parser("serve", help="serve the engine over the OpenAI API (FastAPI + "
                        "uvicorn; 127.0.0.1 unless given an API key; Ctrl-C stops)")
    serve_command.add_arguments(sv)
    sv.set_defaults(fn=serve_command.run)
    v = sub.add_parser("vllm", help="vLLM beside the lab: `inferlab vllm serve`")
    vs = v.add_subparsers(dest="vllm_cmd", required=True)
    vv = vs.add_parser("serve", help="start vLLM's OpenAI server from .venv-vllm, its KV events "
                       "and per-step reports on for the lab's views (foreground; Ctrl-C stops)")
    vv.add_argument("--model-dir", default=None, help="a transformers directory (default: "
                    "SmolLM2-135M-Instruct, exported once with `inferlab export-hf`)")
    vv.add_argument("--port", type=int, default=8000)
    vv.add_argument("--block-size", type=int, default=32)
    vv.add_argument("--max-model-len", type=int, default=2048)
    vv.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for ready")
    vv.set_defaults(fn=_vllm)
    measure_help = ("measure again instead of drawing the recorded runs "
                    "(docs/results/chapters, written by `inferlab record`)")
    smoke_help = "measure small workloads (fast; implies --measure, says 'smoke')"
    f = sub.add_parser("figures", help="every chapter's figure (SVG, PNG, PDF), drawn from "
                       "the recorded runs")
    f.add_argument("--out", default="figures")
    f.add_argument("--id", nargs="+", default=None, help="chapters (e.g. ch05)")
    f.add_argument("--theme", choices=["light", "dark"], default=None)
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
    rc = sub.add_parser("record", help="measure each chapter's full run once and write its "
                        "record (docs/results/chapters): what figures, gallery, report card "
                        "and README draw")
    rc.add_argument("--id", nargs="+", default=None,
                    help="chapters (e.g. ch05), or views (the gallery's views); default all")
    rc.add_argument("--smoke", action="store_true", help="small workloads (a trial run)")
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
    r = sub.add_parser("results", help="README's and BENCHMARKS' tables from the result files "
                       "in docs/results: render (rewrite the marked blocks) | check (list the "
                       "blocks that differ; exit 1)")
    r.add_argument("action", choices=["render", "check"])
    r.set_defaults(fn=_results)
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    from inferlab.errors import InferlabError
    try:
        return args.fn(args)
    except InferlabError as e:
        print(f"inferlab: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninferlab: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
