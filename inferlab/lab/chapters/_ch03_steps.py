"""Chapter 3: why a short prefill costs what it does on this machine.

Time the single prefill step of prompts of 1..N tokens and fit a line: a fixed cost that every
step pays (reading all the weights once, launching every layer's operations) plus a cost per
prompt token (the arithmetic). Measured twice, interleaved: with the engine's torch threads and
with one thread, because on a shared 2-core machine a matrix-matrix multiply split over two
threads waits for whichever thread another process has pushed off its CPU.
"""
from __future__ import annotations

import numpy as np

from .. import palette, protocol
from . import _kit


def _prompts(lengths, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(3, 49152, size=n).tolist() for n in lengths]


def one_request(eng, ids, max_tokens) -> dict:
    """One request alone: its TTFT and its median inter-token latency (time per output
    token), on the engine's clock."""
    import inferlab as il
    m = eng.generate([ids], il.SamplingParams(max_tokens=max_tokens, ignore_eos=True),
                     use_tqdm=False)[0].metrics
    return {"input_tokens": len(ids), "ttft": m.ttft, "tpot": float(np.median(m.itl))}


def step_times(eng, lengths, repeats: int, threads=(None, 1), seed: int = 1):
    """Wall time of the single prefill step of a prompt of each length (the forward pass and
    the first token's sampling, as the engine's step record reports it; prefix caching must
    be off), for each torch thread count in ``threads`` (None: the engine's own). Each case
    runs once to warm up, then all of them interleaved, ``repeats`` times. Returns
    ({threads: rows of median and range per length}, the protocol's meta)."""
    import torch

    import inferlab as il
    own = torch.get_num_threads()
    counts = list(dict.fromkeys(own if t is None else t for t in threads))
    prompts, seen = _prompts(lengths, seed), []
    unsubscribe = eng.subscribe(lambda rec: seen.append(rec.wall_duration))

    def one(ids, t) -> float:
        seen.clear()
        torch.set_num_threads(t)
        try:
            eng.generate([ids], il.SamplingParams(max_tokens=1, ignore_eos=True),
                         use_tqdm=False)
        finally:
            torch.set_num_threads(own)
        return seen[0]
    arms = {f"{t}:{len(ids)}": (lambda ids=ids, t=t: one(ids, t))
            for t in counts for ids in prompts}
    try:
        for arm in arms.values():
            arm()
        res = protocol.compare(arms, repeats)
    finally:
        unsubscribe()
    out: dict[int, list[dict]] = {t: [] for t in counts}
    for key in res.runs:
        t, n = (int(v) for v in key.split(":"))
        sp = res.spread(key)
        out[t].append({"tokens": n, "step": sp.median, "step_lo": sp.lo, "step_hi": sp.hi})
    return out, {**res.meta(), "engine_threads": own}


def fit_steps(rows, weight_bytes: float, read_gbs: float, params: int) -> dict:
    """A line through the median step times: a fixed cost per step (intercept) plus a cost
    per prompt token (slope), and what each implies on this machine. Theil-Sen (the median of
    the slopes between every pair of lengths, then the median intercept): one step slowed by
    a busy neighbour cannot tilt the line the way it would tilt a least-squares fit."""
    n = np.array([r["tokens"] for r in rows], float)
    t = np.array([r["step"] for r in rows], float)
    slope = float(np.median([(t[j] - t[i]) / (n[j] - n[i]) for i in range(len(n))
                             for j in range(i + 1, len(n)) if n[j] != n[i]]))
    intercept = float(np.median(t - slope * n))
    pred = intercept + slope * n
    r2 = 1 - float(((t - pred) ** 2).sum()) / float(((t - t.mean()) ** 2).sum() or 1.0)
    return {"intercept": intercept, "slope": slope, "r2": r2,
            "break_even": intercept / slope if slope > 0 else float("inf"),
            "weight_bytes": weight_bytes, "read_gbs": read_gbs,
            "weights_read_s": weight_bytes / (read_gbs * 1e9),
            "gflops_per_token": 2 * params / 1e9,
            "gflops": 2 * params / slope / 1e9 if slope > 0 else float("nan"),
            "fit": "Theil-Sen"}


def step_fit(eng, lengths, repeats: int) -> dict:
    """The chapter's measurement: step times, one fit per thread count, this machine's memory
    bandwidth. ``fits``: {threads: fit with its rows}; ``threads``: the engine's own count."""
    from inferlab.core.shapes import model_shape
    from ._kernel_timing import memory_bandwidth
    shape = model_shape("smollm2-135m")          # the real model and tiny-smollm2 alike
    by_threads, meta = step_times(eng, lengths, repeats)
    bw = memory_bandwidth(128)["read_gbs"]       # 128 MB: far past the caches
    fits = {t: {**fit_steps(rows, shape.num_params * 4, bw, shape.num_params), "rows": rows}
            for t, rows in by_threads.items()}
    return {"fits": fits, "threads": meta["engine_threads"], "wall": meta,
            "model": eng.model_name}


def _line(f: dict) -> str:
    return f"{f['intercept'] * 1e3:.0f} ms + {f['slope'] * 1e3:.1f} ms per prompt token"


def fit_text(sf: dict) -> str:
    """The fixed-plus-per-token explanation of a short prefill's cost, in this run's numbers."""
    one, own = sf["fits"][1], sf["fits"][sf["threads"]]
    a, b = one["intercept"] * 1e3, one["slope"] * 1e3
    if a <= 0 or b <= 0:
        return (f"the step times do not fit a fixed cost plus a cost per token this time "
                f"({_line(one)}, r2 = {one['r2']:.2f}, {sf['model']}): too noisy to explain; "
                "see the busy-machine warning and run it again")
    short = a + 16 * b
    text = (f"on one thread a prefill step costs {_line(one)} ({one['fit']} line, r2 = "
            f"{one['r2']:.2f}, {sf['model']}): a 16-token prompt takes {short:.0f} ms, "
            f"{a / short:.0%} of it the fixed part; only past {one['break_even']:.0f} tokens "
            f"does the arithmetic outweigh it. The fixed part is what every step pays whatever "
            f"it computes: it reads all {one['weight_bytes'] / 1e6:.0f} MB of fp32 weights once, "
            f"{one['weights_read_s'] * 1e3:.0f} ms at this machine's measured "
            f"{one['read_gbs']:.0f} GB/s, and launches the 30 layers' operations one by one. "
            f"The per-token part is arithmetic: {one['gflops_per_token']:.2f} GFLOP per token "
            f"at the fitted slope is {one['gflops']:.0f} GFLOP/s")
    if sf["threads"] != 1:
        extra = (own["intercept"] - one["intercept"]) * 1e3
        text += f". With the engine's {sf['threads']} threads: {_line(own)}"
        if extra > 0.5 * a:
            text += (f", {extra:.0f} ms more per step: a matrix-matrix multiply split over "
                     f"{sf['threads']} threads waits for the slowest of them, and with other "
                     "processes on these CPUs (see the warning) one is often off its CPU")
    return text


def fit_figure(data: dict):
    """Measured prefill step time against prompt length, per thread count, with the lines."""
    import plotly.graph_objects as go
    sf = data["step_fit"]
    fig = go.Figure()
    # every point is a prefill step (the phase's colour); thread counts differ by mark; the
    # fitted lines are no phase (grey)
    color, fit = palette.PHASE["prefill"], palette.SERIES["main"]
    marks = [("circle", None), ("circle-open", "dash")]
    for (t, f), (symbol, dash) in zip(sorted(sf["fits"].items()), marks):
        rows = f["rows"]
        n = [r["tokens"] for r in rows]
        fig.add_trace(go.Scatter(
            x=n, y=[r["step"] * 1e3 for r in rows], mode="markers",
            marker=dict(color=color, size=8, symbol=symbol, line=dict(width=1.5, color=color)),
            name=f"{t} thread{'s' if t > 1 else ''}: prefill steps (median, range)",
            error_y=dict(type="data", symmetric=False,
                         array=[(r["step_hi"] - r["step"]) * 1e3 for r in rows],
                         arrayminus=[(r["step"] - r["step_lo"]) * 1e3 for r in rows])))
        xs = np.linspace(0, max(n), 50)
        fig.add_trace(go.Scatter(x=xs, y=np.maximum(f["intercept"] + f["slope"] * xs, 1e-4) * 1e3,
                                 mode="lines", name=f"{t} thread{'s' if t > 1 else ''}: "
                                 f"{_line(f).replace('prompt token', 'token')}",
                                 line=dict(color=fit, width=1.5, dash=dash)))
    w = sf["fits"][1]
    top = max(r["tokens"] for r in w["rows"])
    fig.add_trace(go.Scatter(x=[0, top], y=[w["weights_read_s"] * 1e3] * 2, mode="lines",
                             line=dict(color=palette.MUTED, dash="dot"),
                             name=f"reading the weights once at {w['read_gbs']:.0f} GB/s"))
    # linear axes: the fitted line is a straight line, its intercept the fixed cost
    fig.update_xaxes(title_text="prompt tokens in the step", rangemode="tozero")
    fig.update_yaxes(title_text="prefill step (ms)", rangemode="tozero", tickformat=",~r")
    return _kit.style(fig, "Why a short prefill costs what it does: a fixed cost per "
                      "step, then a cost per token", f"wall clock, this machine: medians of "
                      f"{sf['wall']['repeats']} interleaved repeats; {sf['model']}")
