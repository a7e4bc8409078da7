"""Command line: `inferlab generate "prompt"`, `inferlab bench ...`, `inferlab record` (each
chapter's full run, recorded once), `inferlab figures`, `inferlab gallery`, `inferlab animate`,
`inferlab claims` (the report card: every claim's computed verdict; these drawn from the records,
tools/drawing_cmd.py), `inferlab serve` (the
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
    if args.what == "serve-soak":
        from inferlab.bench.serve_soak import main as serve_soak
        res = serve_soak(model=args.model, clients=args.clients, duration_s=args.duration,
                         abandon_share=args.abandon, seed=args.seed)
        _save(args, res)
        ok = (res["counts"]["errored"] == 0 and not any(res["left"].values())
              and res["greedy"]["mismatched"] == 0)
        return 0 if ok else 1
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
                                repeats=args.repeats if given else None, timing=args.timing))
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
    if args.what == "sweep":
        from inferlab.bench.sweep import main as bench_sweep
        if not args.params:
            from inferlab.errors import InvalidInputError
            raise InvalidInputError("bench sweep needs PARAMS.json (vLLM's --serve-params shape)")
        if args.vllm:
            import signal

            from inferlab.bench.sweep_vllm import main as sweep_vllm
            signal.signal(signal.SIGTERM, signal.default_int_handler)    # TERM stops the servers
            sweep_vllm(args.params, workload=args.workload, requests=args.requests,
                       repeats=args.repeats, rate=(args.rates or [4.0])[0],
                       output_len=args.output_len, min_per_user=args.min_per_user,
                       out=args.out, argv=args.argv)
            return 0
        bench_sweep(args.params, workload=args.workload, requests=args.requests,
                    repeats=args.repeats, out=args.out, model=args.model, clock=args.clock,
                    argv=args.argv)
        return 0
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
                                    "coldstart", "serve", "threads", "lab", "sweep",
                                    "serve-soak"])
    b.add_argument("params", nargs="?", default=None,
                   help="sweep: PARAMS.json, a grid in the shape of vLLM's --serve-params")
    b.add_argument("--workload", default="chat",
                   help="sweep: chat (the bundled requests), synthetic, or a request log file")
    b.add_argument("--clock", default="wall",
                   help="sweep: wall, or a GPU (H100 ...) to price the steps (a projection)")
    b.add_argument("--vllm", action="store_true",
                   help="sweep: serve every point by `inferlab serve` and by `vllm serve` (in "
                   "place of the in-process run), both measured by `vllm bench serve` on the "
                   "same traffic (A B A B), and say whether the lab's best "
                   "setting carries over to vLLM; --rates: its one Poisson rate (default 4); "
                   "--output-len: the answers' cap (default 64); writes the result file and "
                   "the figure of both frontiers beside it")
    b.add_argument("--min-per-user", type=float, default=None,
                   help="sweep --vllm: the objective, the most output tokens/s in total with "
                   "at least this many output tokens/s per user (default: no floor)")
    b.add_argument("--repeats", type=int, default=3, help="(serve: default 3, --smoke 1)")
    b.add_argument("--requests", type=int, default=None,
                   help="number of requests (default: engine 32, batching 256, soak 2000; "
                   "serve: prompts per rate and server, 32, --smoke 4)")
    b.add_argument("--smoke", action="store_true", help="serve: small sizes (CI)")
    b.add_argument("--timing", action="store_true",
                   help="serve: run inferlab serve --timing and print where its time went "
                   "(handler, driver, engine step, hand-off, SSE write) beside the client's "
                   "TTFT and TPOT")
    b.add_argument("--clients", type=int, default=20, help="serve-soak: concurrent clients")
    b.add_argument("--duration", type=float, default=300.0, help="serve-soak: seconds")
    b.add_argument("--abandon", type=float, default=0.2,
                   help="serve-soak: share of the streams closed after their first chunks")
    b.add_argument("--seed", type=int, default=0, help="serve-soak: the clients' seed")
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
    from inferlab.tools.drawing_cmd import add_commands
    add_commands(sub)      # record, figures, gallery, claims: drawn from the records
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
