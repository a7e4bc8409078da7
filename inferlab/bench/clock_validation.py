"""How well does the simulated clock predict real steps? ``inferlab bench clock`` (issue 12).

The roofline cost model (``inferlab.sim``) prices every figure that uses a simulated GPU
clock; nothing can check it on a GPU here. What can be checked is the model itself, on the
one machine we have: ``clock="this-cpu"`` gives it this CPU's measured sgemm FLOP/s, memory
bandwidth and per-op overhead (``sim/this_cpu.py``; nothing is fitted to the engine), and
this bench compares its price of each step with the engine's measured step time on the real
model (SmolLM2-135M, fp32) across decode batches 1-64 and prefills of 16-1024 tokens.

Protocol (a shared, busy machine): every repeat measures the profile again, then runs every
case once, in alternating order; the table gives the median and range over repeats of both
the measured and the predicted step, and a busy-machine warning when the load says so.
Relative error = predicted / measured - 1. ``roofline.measure_parts`` then times the parts
of each step (linear layers, attention kernels, the rest) to say which term misses.
"""
from __future__ import annotations

import json
import os
import pathlib
import statistics
import sys

import numpy as np

from inferlab.lab import protocol
from inferlab.sim import this_cpu
from inferlab.sim.costmodel import step_terms, step_time

DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 64)
PREFILL_TOKENS = (16, 32, 64, 128, 256, 512, 1024)
DECODE_PROMPT = 16          # tokens per request before the decode steps
DECODE_STEPS = 4            # decode steps measured per case and repeat
GOAL = 0.25                 # issue 12: median |error| under 25%


def _ids(rng, n):
    return [int(t) for t in rng.integers(1000, 20000, n)]   # plain-text range of the vocab


def run_case(eng, kind: str, size: int, rng) -> list[tuple[float, list]]:
    """Run one case on ``eng``; (wall seconds, chunks) of each step that is the case:
    decode steps with ``size`` sequences, or the single prefill step of ``size`` tokens."""
    import inferlab as il
    recs = []
    unsub = eng.subscribe(recs.append)
    try:
        if kind == "decode":
            prompts = [_ids(rng, DECODE_PROMPT) for _ in range(size)]
            params = il.SamplingParams(max_tokens=DECODE_STEPS + 1, ignore_eos=True)
        else:
            prompts, params = [_ids(rng, size)], il.SamplingParams(max_tokens=1, ignore_eos=True)
        eng.generate(prompts, params, use_tqdm=False)
    finally:
        unsub()
    out = []
    for r in recs:
        chunks = [(c.num_tokens, c.start + c.num_tokens) for c in r.batch]
        if kind == "decode" and len(chunks) == size and all(n == 1 for n, _ in chunks):
            out.append((r.wall_duration, chunks))
        elif kind == "prefill" and [n for n, _ in chunks] == [size]:
            out.append((r.wall_duration, chunks))
    if not out:
        raise RuntimeError(f"{kind} {size}: no step of that shape was scheduled")
    return out


def make_engine(model=None, cases=None, threads: int | None = None):
    """One engine for every case (prefix caching off, so each prompt is really computed);
    ``threads`` pins torch's and numba's thread counts (None: the engine's default, all)."""
    import torch

    import inferlab as il
    cases = cases or _cases(DECODE_BATCHES, PREFILL_TOKENS)
    batch = max([s for k, s in cases if k == "decode"] + [1])
    tokens = max([s for k, s in cases if k == "prefill"] + [DECODE_PROMPT * batch])
    if threads:
        torch.set_num_threads(threads)
    eng = il.Engine(model, clock="this-cpu", dtype="float32", max_num_seqs=batch,
                    max_num_batched_tokens=max(tokens, DECODE_PROMPT * batch),
                    enable_prefix_caching=False, num_blocks=4 * batch + tokens // 16 + 8,
                    block_size=16)
    if threads:         # again: the engine sets numba's, which can share torch's OpenMP pool
        if eng.runner.backend == "numba-cpu":
            import numba
            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        torch.set_num_threads(threads)
    return eng


def _cases(decode, prefill):
    return [("decode", b) for b in decode] + [("prefill", n) for n in prefill]


def validate(model=None, decode=DECODE_BATCHES, prefill=PREFILL_TOKENS, repeats: int = 3,
             profile=this_cpu.measure, parts: bool = True, seed: int = 0, progress=None,
             engine=None, threads: int | None = None) -> dict:
    """Measure and predict every case ``repeats`` times, interleaved; returns the table
    (``rows``), the error summary and the machine readings. ``profile()`` measures the
    machine (a smaller one in tests); ``parts`` times each step's parts right after it."""
    import torch

    from inferlab.bench.roofline import measure_parts, model_parts
    cases = _cases(decode, prefill)
    eng = engine or make_engine(model, cases, threads)
    shape, dtype_bytes = eng.clock.shape, eng.clock.dtype_bytes
    rng = np.random.default_rng(seed)
    say = progress or (lambda msg: None)
    run_case(eng, "prefill", min(prefill or [8]), rng)        # warm up allocator and kernels
    meas, pred, part = ({c: [] for c in cases} for _ in range(3))
    steps, profiles = {}, []
    load0 = protocol.load_average()
    with protocol.BusyCheck() as chk:
        for r in range(repeats):
            gpu = profile()
            profiles.append(gpu)
            say(f"repeat {r + 1}/{repeats}: {gpu.note}")
            for case in (cases if r % 2 == 0 else cases[::-1]):
                got = run_case(eng, *case, rng)
                wall = statistics.median(w for w, _ in got)
                meas[case].append(wall)
                pred[case].append(statistics.median(step_time(gpu, shape, ch, dtype_bytes)
                                                    for _, ch in got))
                steps[case] = got[len(got) // 2][1]
                if parts:       # the step's parts, timed right after it (same load)
                    part[case].append(measure_parts(eng, steps[case], repeats=1))
    gpu = _median_profile(profiles)
    rows = []
    for case in cases:
        m, p = protocol.spread(meas[case]), protocol.spread(pred[case])
        row = {"kind": case[0], "size": case[1], "tokens": sum(n for n, _ in steps[case]),
               "measured": m.as_dict(), "predicted": p.as_dict(),
               "error": p.median / m.median - 1.0,
               "terms": step_terms(gpu, shape, steps[case], dtype_bytes)}
        if parts:       # rest: what the step's median leaves after the parts' medians
            here = {k: statistics.median(t[k] for t in part[case])
                    for k in ("linear", "attention")}
            here["rest"] = m.median - here["linear"] - here["attention"]
            row["parts"] = {"measured": here,
                            "model": model_parts(gpu, shape, steps[case], dtype_bytes)}
        rows.append(row)
        say(f"{case[0]} {case[1]}: measured {m.ms()}, predicted {p.ms()}, "
            f"error {row['error']:+.0%}")
    errs = [abs(r["error"]) for r in rows]
    worst = max(rows, key=lambda r: abs(r["error"]))
    return {"model": eng.model_name, "shape": shape.name, "dtype_bytes": dtype_bytes,
            "threads": torch.get_num_threads(), "repeats": repeats, "rows": rows,
            "median_abs_error": statistics.median(errs),
            "worst_abs_error": abs(worst["error"]), "worst_case": f"{worst['kind']} {worst['size']}",
            "profile": {"flops": gpu.flops_fp32, "bandwidth": gpu.hbm_bandwidth,
                        "step_overhead_s": gpu.step_overhead_s,
                        "layer_overhead_s": gpu.layer_overhead_s,
                        "notes": [p.note for p in profiles]},
            "warning": chk.warning, "readings": chk.readings,
            "load_before": load0, "load_after": protocol.load_average()}


def _median_profile(profiles):
    """The profile whose numbers are the medians over the repeats' profiles."""
    import dataclasses
    med = lambda attr: statistics.median(getattr(p, attr) for p in profiles)
    return dataclasses.replace(
        profiles[0], hbm_bandwidth=med("hbm_bandwidth"), flops_bf16=med("flops_bf16"),
        flops_tf32=med("flops_tf32"), flops_fp32=med("flops_fp32"),
        step_overhead_s=med("step_overhead_s"), layer_overhead_s=med("layer_overhead_s"),
        note=f"median of {len(profiles)} profiles")


def table(res: dict) -> str:
    """The result as a Markdown table (BENCHMARKS.md) with the error summary under it."""
    ms = lambda s: f"{s * 1e3:.1f}"
    head = ["case", "measured ms (range)", "predicted ms (range)", "error", "model's bound"]
    if res["rows"] and "parts" in res["rows"][0]:
        head += ["linear ms: here / model", "attention ms: here / model",
                 "rest ms: here / model"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in res["rows"]:
        m, p, t = r["measured"], r["predicted"], r["terms"]
        bound = "compute" if t["compute"] >= t["memory"] else "memory"
        what = f"decode, batch {r['size']}" if r["kind"] == "decode" else \
            f"prefill, {r['size']} tokens"
        cells = [what, f"{ms(m['median'])} ({ms(m['lo'])}-{ms(m['hi'])})",
                 f"{ms(p['median'])} ({ms(p['lo'])}-{ms(p['hi'])})", f"{r['error']:+.0%}", bound]
        if "parts" in r:
            h, mo = r["parts"]["measured"], r["parts"]["model"]
            cells += [f"{ms(h[k])} / {ms(mo[k])}" for k in ("linear", "attention", "rest")]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(summary(res))
    return "\n".join(lines)


def summary(res: dict) -> str:
    ok = "meets" if res["median_abs_error"] < GOAL else "misses"
    return (f"median |error| {res['median_abs_error']:.0%}, worst {res['worst_abs_error']:.0%} "
            f"({res['worst_case']}); {ok} the {GOAL:.0%} goal. {res['repeats']} interleaved "
            f"repeats; load average {res['load_before']:.1f} before, {res['load_after']:.1f} "
            f"after.")


def figure(res: dict):
    """Top: measured (median, range) and predicted step time against batch / prompt length.
    Bottom: the step's parts as timed here (solid) and as the model prices them (dotted)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from inferlab.lab import figures, palette
    with_parts = bool(res["rows"]) and "parts" in res["rows"][0]
    fig = make_subplots(rows=2 if with_parts else 1, cols=2, vertical_spacing=0.14,
                        subplot_titles=("decode step", "prefill step")
                        + (("decode: parts", "prefill: parts") if with_parts else ()))
    # a step's parts: no phase or policy, so the neutral scale, one grey each (palette)
    part_color = dict(zip(("linear", "attention", "rest"), palette.sequence(3)))
    for col, kind, xlab in ((1, "decode", "requests in the batch"),
                            (2, "prefill", "prompt tokens (one request)")):
        rows = [r for r in res["rows"] if r["kind"] == kind]
        if not rows:
            continue
        x = [r["size"] for r in rows]
        y = [r["measured"]["median"] * 1e3 for r in rows]
        fig.add_trace(go.Scatter(
            x=x, y=y, mode="markers", name="measured step (median, range)",
            showlegend=col == 1, marker=dict(color=palette.INK, size=9),
            error_y=dict(type="data", symmetric=False,
                         array=[r["measured"]["hi"] * 1e3 - v for r, v in zip(rows, y)],
                         arrayminus=[v - r["measured"]["lo"] * 1e3 for r, v in zip(rows, y)])),
            1, col)
        fig.add_trace(go.Scatter(x=x, y=[r["predicted"]["median"] * 1e3 for r in rows],
                                 mode="lines+markers", name="predicted step (this-cpu roofline)",
                                 showlegend=col == 1, marker=dict(size=6),
                                 line=dict(color=palette.INK, dash="dot")), 1, col)
        # log axes with round ticks: the sizes measured (powers of two) and 1-2-5 ms
        ys = y + [r["predicted"]["median"] * 1e3 for r in rows]
        for row in ((1, 2) if with_parts else (1,)):
            fig.update_xaxes(type="log", title_text=xlab if row == (2 if with_parts else 1)
                             else None, tickvals=x, ticktext=[f"{v:,}" for v in x],
                             minor=dict(ticks="", showgrid=False), row=row, col=col)
        figures.log_axis(fig, "y", ys, title="ms (log scale)" if col == 1 else None,
                         row=1, col=col)
        if not with_parts:
            continue
        figures.log_axis(fig, "y", [v * 1e3 for r in rows for side in ("measured", "model")
                                    for v in r["parts"][side].values()],
                         title="ms (log scale)" if col == 1 else None, row=2, col=col)
        for part, color in part_color.items():
            fig.add_trace(go.Scatter(
                x=x, y=[v * 1e3 if (v := r["parts"]["measured"][part]) > 0 else None
                        for r in rows],
                mode="lines+markers", name=f"{part}: here", showlegend=col == 1,
                line=dict(color=color)), 2, col)
            fig.add_trace(go.Scatter(
                x=x, y=[r["parts"]["model"][part] * 1e3 for r in rows], mode="lines",
                name=f"{part}: model", showlegend=col == 1, line=dict(color=color, dash="dot")),
                2, col)
    title = (f"Simulated clock vs this machine: median |error| {res['median_abs_error']:.0%}, "
             f"worst {res['worst_abs_error']:.0%}")
    figures.style(fig, title, f"this-cpu (roofline from measured FLOP/s, bandwidth, op "
                  f"overhead) vs wall clock; {res['model']} fp32, {res.get('threads', '?')} "
                  f"thread(s), {res['repeats']} interleaved repeats")
    fig.update_layout(margin=dict(t=110, b=150), legend=dict(orientation="h", y=-0.1,
                                                             yanchor="top"))
    return fig


def main(repeats: int = 3, model=None, out="build/bench/clock", threads: int | None = None) -> int:
    say = lambda msg: print(msg, file=sys.stderr, flush=True)
    res = validate(model, repeats=repeats, progress=say, threads=threads)
    from .common import result_meta             # the command, date, CPU and load beside it
    cmd = f"inferlab bench clock --repeats {repeats}" + (f" --model {model}" if model else "") \
        + (f" --threads {threads}" if threads else "") + f" --out {out}"
    res = {**result_meta(cmd), **res}
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "clock_validation.json").write_text(json.dumps(res, indent=1, default=str))
    from inferlab.lab.figures import save
    fig = figure(res)
    for ext in (".svg", ".png"):
        save(fig, out / f"clock_validation{ext}", width=1000, height=820)
    print(f"simulated clock (this-cpu) vs measured steps, {res['model']} fp32, "
          f"{res['threads']} of {os.cpu_count()} CPUs' threads\n")
    print(table(res))
    if res["warning"]:
        print("\n" + res["warning"])
    print(f"\nwrote {out}/clock_validation.{{json,svg,png}}")
    return 0
