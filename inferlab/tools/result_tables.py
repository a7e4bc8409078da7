"""The tables README and BENCHMARKS render from result files (``inferlab.tools.results`` finds
their markers and writes them): each ``Table`` names its marker, its file in docs/results/,
the command that writes that file, and the function that turns the file into Markdown. Every
rendering names the CPU, the date and the load the numbers were measured at.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from inferlab.lab import stack_table
from inferlab.lab.chapters._display import md_table
from inferlab.lab.protocol import spread
from inferlab.tools.result_binder import (cells_table, kernels_table, kv_pages_table,
                                          pod_summary, pod_table)
from inferlab.tools.result_claims import claims_headlines, claims_summary, claims_table
from inferlab.tools.result_format import (ResultsError, caption, day_time, load_text,  # noqa: F401
                                          machine, short)
from inferlab.tools.result_sweep_vllm import sweep_vllm_summary, sweep_vllm_table


# ---- the renderers -------------------------------------------------------------------------

# ---- the tables -----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Table:
    name: str                          # the marker's name
    file: str                          # the result file, relative to docs/results
    produce: str                       # the command that writes the file
    render: Callable[[dict, str], str]  # (result, its path as shown) -> Markdown
    inline: bool = False               # one line inside a sentence or a table cell


def _range(s: dict, fmt: str = "{:.2f}") -> str:
    return f"{fmt.format(s['median'])} ({fmt.format(s['min'])}-{fmt.format(s['max'])})"


COLD_NEW = "new CPU (empty numba cache)"


def coldstart_table(res: dict, file: str) -> str:
    """BENCHMARKS' cold-start table: each start's phases, median (range)."""
    rows = [f"Medians with the range, {caption(res, file)}:", "",
            "| start | `Engine()` (s) | first token (s) | import + `Engine()` + first token (s) "
            "| whole process (s) |", "|---|---:|---:|---:|---:|"]
    for name, s in res["summary"].items():
        rows.append(f"| {name} | " + " | ".join(_range(s[ph]) for ph in
                                                  ("engine", "first token", "total", "process"))
                    + " |")
    return "\n".join(rows)


def coldstart_summary(res: dict, file: str) -> str:
    """README's row: the warm start against transformers and a CPU numba has not seen."""
    s = res["summary"]
    warm = s["engine files"]["total"]
    text = f"{warm['median']:.2f} s median ({warm['min']:.2f}-{warm['max']:.2f})"
    if "transformers" in s:
        text += f", against {s['transformers']['total']['median']:.2f} s through transformers"
    if COLD_NEW in s:
        said = any(r.get("said") for r in res.get("runs", {}).get(COLD_NEW, []))
        text += (f"; a CPU numba has not compiled for: {s[COLD_NEW]['total']['median']:.1f} s, "
                 f"once{', saying so' if said else ''}")
    return f"{text} ({machine(res)}, {day_time(res.get('date'))}, load {load_text(res)}; {file})"


def coldstart_warm(res: dict, file: str) -> str:
    return f"{res['summary']['engine files']['total']['median']:.2f} s ({short(res)})"


def coldstart_new_cpu(res: dict, file: str) -> str:
    return f"{res['summary'][COLD_NEW]['engine']['median']:.1f} s ({short(res)})"


def serve_table(res: dict, file: str) -> str:
    """BENCHMARKS' two serving stacks from ``inferlab bench serve --out``: the caption, the
    side-by-side table, the greedy agreement, how the processes shared the CPUs."""
    r = res["results"]
    c, g = r["config"], r["greedy"]
    lines = [f"Measured on {caption(res, file)[len('measured on '):]}. {c['model']} "
             f"{c['dtype']}, {c['num_prompts']} prompts of {c['input_len']} random tokens, "
             f"{c['output_len']} new tokens each (ignore_eos, temperature 0), Poisson arrivals; "
             f"A B A B x {c['repeats']}, median (range); client: {r['client']}.", "",
             stack_table.markdown(r), "",
             f"Greedy answers (temperature 0, {g['max_tokens']} tokens): the two servers agree "
             f"on {g['agree']} of {g['of']} prompts. Placement: {r['placement']}."]
    return "\n".join(lines + ([r["warning"]] if r.get("warning") else []))


def serve_summary(res: dict, file: str) -> str:
    """README's row: inferlab / vLLM medians at the lowest rate and at the highest (often
    all at once), and the greedy agreement."""
    r = res["results"]
    rates = list(r["summary"])
    med = lambda rate, key: tuple(r["summary"][rate][s][key]["median"]
                                  for s in ("inferlab", "vLLM"))
    parts = []
    for rate in (rates[0], rates[-1]):
        name = "all at once" if rate == "inf" else f"at {rate} req/s"
        (ti, tv), (pi, pv), (oi, ov) = (med(rate, k) for k in
                                        ("p50_ttft_ms", "p50_tpot_ms", "output_throughput"))
        parts.append(f"{name}: TTFT p50 {ti:.0f} vs {tv:.0f} ms, TPOT p50 {pi:.0f} vs {pv:.0f} "
                     f"ms, {oi:.0f} vs {ov:.0f} tok/s")
    g = r["greedy"]
    return (f"inferlab vs vLLM {'; '.join(parts)}; greedy answers agree on {g['agree']} of "
            f"{g['of']}. Against the goal, medians over the repeats: "
            f"{stack_table.gaps_sentence(r)} ({short(res)}; {file})")


def serve_timing_table(res: dict, file: str) -> str:
    """BENCHMARKS' breakdown of inferlab's side of ``inferlab bench serve --timing``."""
    r = res["results"]
    rows = stack_table.timing_rows(r)
    if not rows:
        raise ResultsError(f"{file} has no server timing: measure it with `inferlab bench serve "
                           "--timing`")
    lines = [f"Where inferlab's time went, {caption(res, file)}: the client's TTFT and TPOT p50 "
             "(median, range over the repeats) beside `inferlab serve --timing`'s parts, each "
             "the median request's, then the median over the repeats; the TPOT parts are per "
             "token, and what they do not reach is the client's side (socket, parsing, its "
             "event loop). 'batch': requests in the median step of a request's decode.", "",
             md_table(stack_table.TIMING_HEADER, rows)]
    slow = stack_table.slowest_rows(r)
    if slow:
        lines += ["", "The slowest first token of each run (what a TTFT p99 is made of; the "
                  "median over the repeats), in the same parts:", "",
                  md_table(stack_table.SLOWEST_HEADER, slow)]
    return "\n".join(lines)


def engine_summary(res: dict, file: str) -> str:
    """README's row: the engine against transformers on ``inferlab bench engine``'s workload
    (tok/s in one process, the paths interleaved, medians)."""
    r = res["results"]
    ours = r["inferlab engine"]
    vs = [(k, ours / v) for k, v in r.items() if k.startswith("transformers")]
    return (", ".join(f"{x:.2f}x {k}" for k, x in vs) + f" ({ours:.0f} tok/s; "
            f"{short(res)}; {file})")


def vllm_summary(res: dict, file: str) -> str:
    """README's row: inferlab against vLLM's CPU build on the engine benchmark's workload."""
    r = res["results"]
    t, runs = r["tok_s"], r["runs"]
    n = len(next(iter(runs.values())))
    return (f"{r['ratio']:.2f}x tokens/s ({t['inferlab']:.0f} vs {t['vLLM']:.0f} tok/s, medians "
            f"of {n} A B A B runs), greedy tokens equal on {r['same_tokens']} of "
            f"{r.get('requests', 32)} "
            f"({short(res)}; {file})")


def roofline_table(res: dict, file: str) -> str:
    """BENCHMARKS' table: each batch's decode step against this CPU's roofline
    (``inferlab bench roofline``)."""
    r = res["results"]
    m = r["machine"]
    rows = [f"| {b} | {row['ideal']:.1f} | {row['step']:.1f} | {row['share']:.0%} | "
            f"{row['tok_s']:.1f} | {row['forward']} |" for b, row in
            sorted(r["rows"].items(), key=lambda kv: int(kv[0]))]
    return "\n".join([
        "| batch | roofline ms | step ms | share of the roofline | tok/s | forward |",
        "|---:|---:|---:|---:|---:|---|", *rows, "",
        f"Roofline: this machine's streaming read {m['read_bandwidth'] / 1e9:.1f} GB/s and "
        f"sgemm {m['sgemm_flops'] / 1e9:.0f} GFLOP/s ({m['threads']} threads); "
        + caption(res, file) + "."])


def roofline_summary(res: dict, file: str) -> str:
    """BENCHMARKS' row: each batch's decode step as a share of this CPU's roofline."""
    rows = sorted(res["results"]["rows"].items(), key=lambda kv: int(kv[0]))
    batches = " / ".join(b for b, _ in rows)
    shares = " / ".join(f"{r['share']:.0%}" for _, r in rows)
    tok_s = " / ".join(f"{r['tok_s']:.0f}" for _, r in rows)
    return f"batch {batches}: {shares} of the roofline ({tok_s} tok/s; {short(res)}; {file})"


def _mmss(s: float) -> str:
    return f"{int(s // 60)} min {s % 60:02.0f} s"


def tests_table(res: dict, file: str, shown_s: float = 10.0) -> str:
    """BENCHMARKS' test tiers: pytest's time per tier, then the seconds per file (tests and
    notebooks) in each tier, the files under ``shown_s`` summed in one row."""
    tiers = res["tiers"]
    out = ["| tier | pytest time | started | passed | skipped | failed |",
           "|---|---:|---|---:|---:|---:|"]
    out += [f"| `{'make test' if t == 'default' else 'make test-all' if t == 'all' else t}` | "
            f"{_mmss(r['wall_s'])} | {day_time(r.get('started'))} | {r['passed']} | "
            f"{r['skipped']} | {r['failed']} |" for t, r in tiers.items()]
    names = list(tiers)
    peak = {f: max(r["files"].get(f, 0) for r in tiers.values())
            for r0 in tiers.values() for f in r0["files"]}
    files = sorted(peak, key=lambda f: (-peak[f], f))                    # ties by name
    big = [f for f in files if peak[f] >= shown_s]
    out += ["", "| file | " + " | ".join(f"{t} (s)" for t in names) + " |",
            "|---|" + "---:|" * len(names)]
    cell = lambda r, f: f"{r['files'][f]:.0f}" if f in r["files"] else "—"  # noqa: E731
    out += [f"| `{f}` | " + " | ".join(cell(tiers[t], f) for t in names) + " |" for f in big]
    rest = [f for f in files if f not in big]
    out.append(f"| {len(rest)} other files (under {shown_s:.0f} s each) | " + " | ".join(
        f"{sum(tiers[t]['files'].get(f, 0) for f in rest):.0f}" for t in names) + " |")
    return "\n".join(out + ["", caption(res, file) + "; seconds per file are each test's "
                             "setup, call and teardown summed (a session fixture counts "
                             "where it is first used), nbval cells summed per notebook."])


def _med_range(xs, fmt: str) -> str:
    """'median (lo-hi)' of repeated measurements (``protocol.spread``), each in ``fmt``."""
    s = spread(xs)
    return f"{fmt.format(s.median)} ({fmt.format(s.lo)}-{fmt.format(s.hi)})"


def threads_table(res: dict, file: str) -> str:
    """BENCHMARKS' OpenMP wait policies: median (range) of each, quiet and beside a busy
    neighbour (``inferlab bench threads``)."""
    out = ["| machine | policy | batch 1 tok/s | batch 8 tok/s | TTFT ms |",
           "|---|---|---:|---:|---:|"]
    for machine, r in res["results"].items():
        for name, runs in r["runs"].items():
            cells = [_med_range([x[k] for x in runs], fmt) for k, fmt in
                     (("b1_tok_s", "{:.1f}"), ("b8_tok_s", "{:.1f}"), ("ttft_ms", "{:.0f}"))]
            out.append(f"| {machine} | {name} | " + " | ".join(cells) + " |")
    return "\n".join(out + ["", "Medians (range) of the interleaved runs, each a fresh "
                             "process; " + caption(res, file) + "."])


def lab_live_table(res: dict, file: str) -> str:
    """BENCHMARKS' Lab run with its views live in JupyterLab + chromium beside headless, per
    machine and OpenMP policy (``inferlab bench lab``): medians (range). The done lag of a
    live run is the page's Run -> done less the kernel's time to the engine's last step."""
    out = ["| machine | policy | views | output tok/s | ITL p50 ms | ITL p99 ms | Run → done s "
           "| done lag s | redraws / step (3 views) |", "|---|---|---|" + "---:|" * 6]
    ratios = []
    for machine, r in res["results"].items():
        if not isinstance(r, dict) or "runs" not in r:
            continue
        for policy in dict.fromkeys(x["policy"] for x in r["runs"]):
            for side in ("headless", "live"):
                rows = [x for x in r["runs"] if x["policy"] == policy and x["side"] == side]
                live = side == "live"
                done = [x["page_run_to_done_s"] if live else x["run_to_done_s"] for x in rows]
                lag = [x["page_run_to_done_s"] - x["run_to_done_s"] + x["done_lag_s"] if live
                       else x["done_lag_s"] for x in rows]
                draws = [sum(v["draws_per_step"] for v in x["views"].values()) for x in rows]
                out.append(f"| {machine} | {policy} | {'live in the page' if live else 'no page'}"
                           f" | " + " | ".join([
                               _med_range([x["output_tok_s"] for x in rows], "{:.1f}"),
                               _med_range([x["itl_p50_ms"] for x in rows], "{:.0f}"),
                               _med_range([x["itl_p99_ms"] for x in rows], "{:.0f}"),
                               _med_range(done, "{:.1f}"), _med_range(lag, "{:.2f}"),
                               _med_range(draws, "{:.2f}")]) + " |")
            ratios.append(f"{policy} on the {machine} machine "
                          f"{r['median'][policy]['ratio_tok_s']:.2f}")
    return "\n".join(out + ["", "Live / headless output tok/s (medians): " + "; ".join(ratios)
                             + ". Medians (range) of the interleaved runs (headless: a fresh "
                             "process each); " + caption(res, file) + "."])


def showcase_summary(res: dict, file: str) -> str:
    """README's caption of the screenshots: the numbers the pictures show, as the page showed
    them (``python -m inferlab.tools.showcase``)."""
    r = res["results"]
    arms = "; ".join(f"{arm} {v['tok/s']} tok/s, 90% of answers within {v['E2E p90']}"
                     for arm, v in r["comparison"].items())
    lab = next(iter(r["lab"].values()))
    return (f"the screenshots' own runs: 16 synthetic requests on 4 seats, {arms}; the Lab's "
            f"12 requests, {lab['output tok/s']} output tok/s, TTFT p50 "
            f"{lab['TTFT p50 (ms)']} ms ({short(res)}; {file})")



SERVE_AMD_CMD = ("inferlab bench serve --rates 1 2 4 inf --repeats 3 --timing "
                 "--out docs/results/serve-amd.json")
CLAIMS_CMD = "inferlab record (each chapter's full run; the report card judged on the records)"
COLDSTART = ("coldstart-xeon.json",
             "inferlab bench coldstart --out docs/results/coldstart-xeon.json")
BINDER_POD = ("binder-pod-amd.json",
              "python -m inferlab.bench.binder_pod --scenarios --out docs/results/binder-pod-amd.json")
SWEEP_VLLM_CMD = ("inferlab bench sweep docs/sweep-vllm-grid.json --vllm --min-per-user 2 "
                  "--repeats 2 --rates 1 --output-len 64 --out docs/results/sweep-vllm-amd.json")
TABLES = {t.name: t for t in (
    Table("coldstart", *COLDSTART, coldstart_table),
    Table("coldstart-summary", *COLDSTART, coldstart_summary, inline=True),
    Table("coldstart-warm", *COLDSTART, coldstart_warm, inline=True),
    Table("coldstart-new-cpu", *COLDSTART, coldstart_new_cpu, inline=True),
    Table("tests", "tests-amd.json", "make test / make test-all PYTEST_ARGS=--junitxml=... "
          "then python -m inferlab.tools.test_times (its docstring)", tests_table),
    Table("threads", "threads-amd.json", "inferlab bench threads --out "
          "docs/results/threads-amd.json", threads_table),
    Table("lab-live", "lab-live-amd.json", "inferlab bench lab --repeats 3 --out "
          "docs/results/lab-live-amd.json", lab_live_table),
    Table("showcase", "showcase-amd.json", "python -m inferlab.tools.showcase",
          showcase_summary, inline=True),
    Table("binder-pod", *BINDER_POD, pod_table),
    Table("binder-pod-summary", *BINDER_POD, pod_summary, inline=True),
    Table("binder-chapters", "binder-chapters-amd.json", "python -m inferlab.bench.binder_pod "
          "--notebooks all --out docs/results/binder-chapters-amd.json", pod_table),
    Table("binder-ch13", "binder-ch13-amd.json", "python -m inferlab.bench.binder_pod "
          "--notebooks 13_sampling_and_decode --out docs/results/binder-ch13-amd.json",
          pod_table),
    Table("binder-cells", "binder-cells-amd.json", "python -m inferlab.bench.binder_cells "
          "--out docs/results/binder-cells-amd.json", cells_table),
    Table("kv-pages", "kv-pages-amd.json", "python -m inferlab.bench.kv_pages --repeats 5 "
          "--out docs/results/kv-pages-amd.json", kv_pages_table),
    Table("binder-kernels", "binder-kernels-amd.json", "python -m inferlab.bench.binder_kernels "
          "--repeats 3 --out docs/results/binder-kernels-amd.json", kernels_table),
    *(Table(name, "sweep-vllm-amd.json", SWEEP_VLLM_CMD, fn, inline=inline)
      for name, fn, inline in (("sweep-vllm", sweep_vllm_table, False),
                               ("sweep-vllm-summary", sweep_vllm_summary, True))),
    Table("claims", "claims.json", CLAIMS_CMD,
          claims_table),
    Table("claims-summary", "claims.json", CLAIMS_CMD,
          claims_summary, inline=True),
    Table("claims-headlines", "claims.json", CLAIMS_CMD, claims_headlines, inline=True),
    Table("engine-summary", "engine-xeon.json", "inferlab bench engine --out "
          "docs/results/engine-xeon.json", engine_summary, inline=True),
    Table("vllm-summary", "vllm-xeon.json", "inferlab bench vllm --out "
          "docs/results/vllm-xeon.json", vllm_summary, inline=True),
    Table("vllm-bf16-summary", "vllm-bf16-amd.json", "inferlab bench vllm --dtype bfloat16 "
          "--out docs/results/vllm-bf16-amd.json", vllm_summary, inline=True),
    *(Table(f"roofline-{dt}{part}", f"roofline-{dt}-amd.json", f"inferlab bench roofline "
            f"--dtype {full} --out docs/results/roofline-{dt}-amd.json", fn, inline=bool(part))
      for dt, full in (("fp32", "float32"), ("bf16", "bfloat16"))
      for part, fn in (("", roofline_table), ("-summary", roofline_summary))),
    Table("serve", "serve-xeon.json", "inferlab bench serve --rates 1 4 inf --repeats 2 "
          "--out docs/results/serve-xeon.json", serve_table),
    *(Table(name, "serve-amd.json", SERVE_AMD_CMD, fn, inline=inline)
      for name, fn, inline in (("serve-amd", serve_table, False),
                               ("serve-amd-timing", serve_timing_table, False),
                               ("serve-summary", serve_summary, True))),
)}
