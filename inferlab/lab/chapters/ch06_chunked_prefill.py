"""Chapter 6: chunked prefill and in-flight batching.

A few requests are streaming answers (one token per step) when long prompts arrive. Without
chunking, the step that takes a long prompt computes all of it at once, and every streaming
request waits for that step: its inter-token latency (ITL) spikes. With chunked prefill the
scheduler gives the prompt only a slice of each step's token budget, so decodes keep flowing
and the spikes shrink to the cost of one slice.

The tokens come from the real engine. The figure's clock is the simulated H100 pricing a
Llama-3-8B-shaped model (a projection); the claim is judged on this machine's wall clock,
SmolLM2, the two policies interleaved under a busy check: on a CPU a long prefill takes
seconds against a decode step's tens of milliseconds, an effect far above the noise.
"""
from __future__ import annotations

import numpy as np
from .. import measure_cache, palette
from . import _ch06_feel
from ..verdicts import (AFTER, ENTER, FAILS, SARATHI, Claim, Verdict, clock_note, on_wall, ms,
                        no_wall_run, x)

TITLE = "Chunked prefill and in-flight batching"
CLAIM = ("Splitting long prompts into chunks that share each step with ongoing decodes keeps "
         "inter-token latency smooth: without chunking, one long prefill stalls every stream "
         "behind it, which shows up in the p99 inter-token latency.")

SIM = dict(clock="H100", sim_model="llama-3-8b")


def _sizes(smoke: bool) -> dict:
    # SmolLM2 in both; smoke runs fewer streams and shorter prompts.
    if smoke:
        return dict(model=None, streams=4, stream_tokens=32, long_prompts=2, long_len=512,
                    chunk=128)
    return dict(model=None, streams=8, stream_tokens=96, long_prompts=4, long_len=1800,
                chunk=256)


def workload(streams: int, stream_tokens: int, long_prompts: int, long_len: int,
             vocab_size: int, step_guess: float, seed: int = 0) -> list[dict]:
    """Streams start at t=0; long prompts arrive spread over the streams' lifetime."""
    rng = np.random.default_rng(seed)
    reqs = [dict(id=f"stream-{i}", prompt=rng.integers(3, vocab_size, 32).tolist(),
                 max_tokens=stream_tokens, arrival=0.0) for i in range(streams)]
    span = stream_tokens * step_guess
    for j in range(long_prompts):
        reqs.append(dict(id=f"long-{j}", prompt=rng.integers(3, vocab_size, long_len).tolist(),
                         max_tokens=4, arrival=span * (j + 1) / (long_prompts + 1)))
    return reqs


def run(chunked: bool, reqs: list[dict], model=None, chunk: int = 256, **engine_kw) -> dict:
    """Play ``reqs`` through one engine; return the streams' ITLs and the long prompts' TTFT."""
    import inferlab as il
    # Without chunking a whole prompt is one step, so the budget must hold max_model_len.
    budget = chunk if chunked else max(chunk, engine_kw.setdefault("max_model_len", 2048))
    eng = il.Engine(model, enable_chunked_prefill=chunked, max_num_batched_tokens=budget,
                    enable_prefix_caching=False, **engine_kw)
    t0 = eng.now
    for r in reqs:
        eng.add_request(r["prompt"], il.SamplingParams(max_tokens=r["max_tokens"],
                                                       ignore_eos=True),
                        request_id=r["id"], arrival_time=t0 + r["arrival"])
    outs = {}
    while eng.has_unfinished_requests():
        for o in eng.step():
            if o.finished:
                outs[o.request_id] = o
    streams = [o for k, o in outs.items() if k.startswith("stream")]
    itl = [x for o in streams for x in o.metrics.itl]
    # token times of the streams, for the "latency over time" picture
    points = [(o.metrics.first_token_time - t0 + sum(o.metrics.itl[:i + 1]), x)
              for o in streams for i, x in enumerate(o.metrics.itl)]
    points.sort()
    return {"chunked": chunked, "clock": eng.clock_name, "model": eng.model_name, "itl": itl,
            "itl_t": [p[0] for p in points], "itl_v": [p[1] for p in points],
            "p50": float(np.percentile(itl, 50)), "p99": float(np.percentile(itl, 99)),
            "max": float(max(itl)),
            "long_ttft": [outs[k].metrics.ttft for k in sorted(outs) if k.startswith("long")],
            "requests": {k: {"ttft": o.metrics.ttft, "e2e": o.metrics.e2e}
                         for k, o in outs.items()},
            "arrivals": [r["arrival"] for r in reqs if r["id"].startswith("long")]}


ARMS = ("unchunked", "chunked")


@measure_cache.shared
def measure(smoke: bool = False, clock: str | None = None, chunk: int | None = None,
            deterministic: bool = False, repeats: int | None = None,
            chunking: tuple[bool, bool] = (False, True),
            feel_chunking: tuple[bool, bool] | None = (False, True)) -> dict:
    """The two policies on the simulated H100 (an 8B model's shape priced by the cost model:
    a projection, deterministic) and, unless ``deterministic``, on this machine's wall clock
    with SmolLM2: unchunked and chunked interleaved ``repeats`` times under a busy check, the
    streams' p99 ITL of each run (what the claim is judged on). ``chunking``: each arm's
    ``enable_chunked_prefill`` ((False, False) takes the effect out: the falsification).
    ``feel_chunking``: the same for the second wall-clock run (``_ch06_feel``: short
    questions after a long prompt, their first token against their whole answer; None:
    not run)."""
    s = _sizes(smoke)
    chunk = chunk or s["chunk"]
    kw = dict(SIM) if clock in (None, *SIM.values()) else {"clock": clock}
    vocab = 8000   # token ids below any supported vocabulary; what they say does not matter
    # one decode step of the 8B shape on an H100 is ~6 ms; on the wall clock we guess 50 ms
    step_guess = 0.0065 if kw.get("clock") != "wall" else 0.05
    reqs = workload(s["streams"], s["stream_tokens"], s["long_prompts"], s["long_len"], vocab,
                    step_guess)
    flags = dict(zip(ARMS, chunking))
    runs = {name: run(flags[name], reqs, s["model"], chunk, **kw) for name in ARMS}
    data = {"sizes": {**s, "chunk": chunk}, "runs": runs, "clock": runs["chunked"]["clock"],
            "model": runs["chunked"]["model"]}
    if not deterministic:
        data["wall"] = _wall(s, chunk, vocab, flags, repeats or (2 if smoke else 3))
        if feel_chunking:
            data["feel"] = _ch06_feel.measure(run, smoke, repeats or (2 if smoke else 3),
                                              feel_chunking)
    return data


def _wall(s: dict, chunk: int, vocab: int, flags: dict, repeats: int) -> dict:
    """Both policies on this machine's wall clock, SmolLM2, interleaved: each run's streams'
    p99 and max ITL and the long prompts' mean TTFT, as medians and ranges."""
    from .. import protocol
    reqs = workload(s["streams"], s["stream_tokens"], s["long_prompts"], s["long_len"], vocab,
                    0.05)
    res = protocol.compare({name: (lambda f=flags[name]: run(f, reqs, s["model"], chunk,
                                                             clock="wall"))
                            for name in ARMS}, repeats)
    sp = lambda arm, key: res.spread(arm, key).as_dict()
    return {**res.meta(), "model": res.runs["chunked"][0]["model"],
            "p99": {a: sp(a, lambda r: r["p99"]) for a in ARMS},
            "max": {a: sp(a, lambda r: r["max"]) for a in ARMS},
            "long_ttft": {a: sp(a, lambda r: float(np.mean(r["long_ttft"]))) for a in ARMS}}


def figure(data: dict):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from . import _kit
    runs = data["runs"]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.65, 0.35], horizontal_spacing=0.1,
                        subplot_titles=("inter-token latency of the streams, over time",
                                        "percentiles"))
    # the policies by name (palette.POLICY): unchunked is continuous batching without chunks
    colors = {"unchunked": palette.POLICY["continuous"], "chunked": palette.POLICY["chunked"]}
    names = {"unchunked": "continuous, unchunked", "chunked": "chunked prefill"}
    for name, r in runs.items():
        fig.add_trace(go.Scatter(x=[t * 1e3 for t in r["itl_t"]], y=[v * 1e3 for v in r["itl_v"]],
                                 mode="markers", name=names[name], marker=dict(size=5,
                                 color=colors[name]), legendgroup=name), row=1, col=1)
        fig.add_trace(go.Bar(x=["p50", "p99", "max"],
                             y=[r["p50"] * 1e3, r["p99"] * 1e3, r["max"] * 1e3],
                             name=names[name],
                             marker_color=colors[name], legendgroup=name, showlegend=False),
                      row=1, col=2)
    for a in runs["chunked"]["arrivals"]:
        fig.add_vline(x=a * 1e3, line=dict(dash="dot", color=palette.MUTED), row=1, col=1)
    fig.update_xaxes(title_text="time (ms); dotted: a long prompt arrives", row=1, col=1)
    fig.update_yaxes(title_text="ITL (ms)", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="ITL (ms)", row=1, col=2)
    fig.update_layout(barmode="group")
    s = data["sizes"]
    return _kit.style(fig, f"Chunked prefill: {s['long_prompts']} prompts of {s['long_len']} "
                     f"tokens arrive while {s['streams']} answers stream (chunk {s['chunk']})",
                     data["clock"])


def summary(data: dict) -> str:
    u, c = data["runs"]["unchunked"], data["runs"]["chunked"]
    return (f"model: {data['model']}\n"
            f"p99 ITL: {u['p99'] * 1e3:.1f} ms unchunked vs {c['p99'] * 1e3:.1f} ms chunked "
            f"({u['p99'] / c['p99']:.1f}x); worst ITL {u['max'] * 1e3:.1f} vs "
            f"{c['max'] * 1e3:.1f} ms; long-prompt TTFT "
            f"{np.mean(u['long_ttft']) * 1e3:.1f} vs {np.mean(c['long_ttft']) * 1e3:.1f} ms "
            f"[clock: {data['clock']}]" + _wall_line(data.get("wall")))


def _wall_line(w: dict | None) -> str:
    """The wall clock's p99s as a summary line ('' without a wall-clock run)."""
    if not w:
        return ""
    from .. import protocol
    pu, pc = (protocol.Spread(**w["p99"][a]) for a in ARMS)
    return (f"\n{w['label']}, {w['model']}: p99 ITL {pu.ms(0)} unchunked vs {pc.ms(0)} "
            f"chunked" + protocol.warning_line(w))


# --- the chapter's claims: how each is measured and judged --------------------------------------
def measure_for_claims(smoke: bool) -> dict:
    """The measurement every claim below is judged on (``claims.run_all``)."""
    return measure(smoke=smoke)  # the wall clock, with the simulated H100 as a projection


def judge_chunked(d: dict) -> Verdict:
    """The streams' p99 inter-token latency unchunked against chunked, medians of the
    interleaved runs on this machine's wall clock (SmolLM2): chunking must lower it clearly
    (1.5x), the two arms' ranges apart (an effect inside the noise is none); the simulated
    H100 numbers are a projection beside it."""
    from .. import protocol
    u, c, s = d["runs"]["unchunked"], d["runs"]["chunked"], d["sizes"]
    mean = lambda xs: sum(xs) / len(xs)
    sim = (f"projection {clock_note(d['clock'])}: p99 {ms(u['p99'])} unchunked vs "
           f"{ms(c['p99'])} chunked ({x(u['p99'] / c['p99'])}), the long prompts' mean TTFT "
           f"{ms(mean(u['long_ttft']))} vs {ms(mean(c['long_ttft']))}")
    if "wall" not in d:
        return no_wall_run(f"chunked prefill is judged on this machine's wall clock; {sim}")
    w = d["wall"]
    pu, pc = (protocol.Spread(**w["p99"][a]) for a in ARMS)
    apart = pu.lo > pc.hi
    r = pu.median / pc.median
    lu, lc = (protocol.Spread(**w["long_ttft"][a]) for a in ARMS)
    return Verdict(on_wall(r) if apart else FAILS,
                   f"p99 inter-token latency of {s['streams']} streams while {s['long_prompts']} "
                   f"prompts of {s['long_len']} tokens arrive: {pu.ms(0)} unchunked vs "
                   f"{pc.ms(0)} chunked (chunk {s['chunk']}; {x(r)} lower"
                   f"{'' if apart else ', the ranges overlap'}); worst gap "
                   f"{protocol.Spread(**w['max']['unchunked']).ms(0)} vs "
                   f"{protocol.Spread(**w['max']['chunked']).ms(0)}; the price: the long "
                   f"prompts' mean TTFT {lu.ms(0)} vs {lc.ms(0)}; this machine's wall clock "
                   f"({w['model']}, medians of {w['repeats']} interleaved runs); {sim}",
                   measured=f"{x(r)} lower p99",
                   points=(("unchunked", pu.median * 1e3, "continuous"),
                           ("chunked", pc.median * 1e3, "chunked")),
                   unit="p99 inter-token latency (ms)", clock=w["label"],
                   warning=w.get("warning"))


def judge_feel(d: dict) -> Verdict:
    """06-first-token-feel, on the second wall-clock run (``_ch06_feel``)."""
    return _ch06_feel.judge(d.get("feel"))


CLAIMS = (
    Claim("06-chunked-prefill", "Chunked prefill lets long prompts share steps with running "
          "decodes, so streams keep a smooth inter-token latency (lower p99).",
          f"{AFTER} (chunked prefill balances prefill with decode); the p99 framing: {SARATHI}",
          "ch06_chunked_prefill", measure_for_claims, judge_chunked),
    Claim("06-first-token-feel", "An answer that starts sooner feels faster even when the "
          "whole answer takes about as long: the first token can move a lot while the time to "
          "the last one barely does.", ENTER, "ch06_chunked_prefill", measure_for_claims,
          judge_feel),
)
