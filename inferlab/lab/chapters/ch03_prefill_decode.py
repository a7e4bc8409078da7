"""Chapter 3: the wait before the first word grows with the input; the typing speed does not.

Prefill pushes every prompt token through the model in one pass: a lot of arithmetic, so its
time grows with the prompt (compute-bound). Decode makes one token per pass, and each pass
must still read every weight from memory: little arithmetic per byte, so its time is set by
memory bandwidth and barely moves with the prompt length (memory-bound). The roofline shows
where each kind of step sits on a GPU.
"""
from __future__ import annotations

import numpy as np

from .. import measure_cache, palette, protocol
from ..verdicts import (AFTER, ENTER, FAILS, HOLDS, HOLDS_SMALLER, UNMEASURABLE, Claim, Verdict,
                       clock_note, on_wall, ms, wall_warning, worst, x)
from . import _ch03_context, _ch03_sizes, _kit
from ._ch03_steps import (fit_figure, fit_steps, fit_text, one_request,  # noqa: F401 (API)
                          step_fit)

TITLE = "Prefill vs decode: TTFT grows with the input, per-token latency stays flat"
HEADING = "Prefill vs decode: TTFT grows with the input, time per token is flat"
CLAIM = ("Prefill is compute-bound and its time (TTFT) scales with input length; decode is "
         "memory-bound and the per-token speed stays roughly constant.")
# Wall-clock lengths stay small (a 2-core CPU prefills a few hundred tokens a second); the
# simulated GPU gets long prompts, since an 8B model on an H100 stays memory-bound (prefill
# time flat) below ~200 tokens per step, where the roofline's ridge sits.
LENGTHS, LENGTHS_SMOKE = [32, 128, 256, 512, 1024, 1536], [32, 128, 512]
# the simulated sweep's prompts are prefilled for real by SmolLM2 (8000 tokens: ~20 s on two
# cores), so smoke runs stop at 2048
SIM_LENGTHS, SIM_LENGTHS_SMOKE = [256, 1024, 2048, 4096, 6144, 8000], [256, 1024, 2048]
OUTPUT, OUTPUT_SMOKE = 32, 12
# Why a short prefill costs what it does: prefill steps of 1..256 prompt tokens, fitted as a
# fixed cost per step plus a cost per token.
FIT_LENGTHS, FIT_LENGTHS_SMOKE = [1, 2, 4, 8, 16, 32, 64, 128, 256], [1, 4, 16, 64]


def _prompts(lengths, seed=0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(3, 49152, size=n).tolist() for n in lengths]


def sweep(eng, lengths, max_tokens, seed=0) -> list[dict]:
    """One request at a time (nothing shares its steps), prompt of each length."""
    return [one_request(eng, ids, max_tokens) for ids in _prompts(lengths, seed)]


def wall_sweep(eng, lengths, max_tokens, repeats: int, seed=0) -> tuple[list[dict], dict]:
    """The sweep on the wall clock, lengths interleaved (L1 L2 L3 L1 L2 L3 ...): each row
    holds the median TTFT and time per output token, with their ranges (``*_lo``, ``*_hi``)."""
    prompts = _prompts(lengths, seed)
    res = protocol.compare({str(len(ids)): (lambda ids=ids: one_request(eng, ids, max_tokens))
                            for ids in prompts}, repeats)
    rows = []
    for n, reps in res.runs.items():
        row = {"input_tokens": int(n)}
        for key in ("ttft", "tpot"):
            sp = res.spread(n, lambda r, key=key: r[key])
            row.update({key: sp.median, f"{key}_lo": sp.lo, f"{key}_hi": sp.hi})
        rows.append(row)
    return rows, res.meta()


def roofline(gpu="H100", model="llama-3-8b", lengths=(32, 512, 8192)) -> dict:
    """Arithmetic intensity (FLOPs per byte moved) and attainable FLOP/s of prefill and
    decode steps on ``gpu``, from the same cost model that drives the simulated clock."""
    from inferlab.core.shapes import model_shape
    from inferlab.sim import costmodel as cm
    from inferlab.sim.gpus import BANDWIDTH_EFFICIENCY, FLOPS_EFFICIENCY
    from inferlab.sim.profiles import get_gpu
    g, s = get_gpu(gpu), model_shape(model)
    peak = g.peak_flops(2) * FLOPS_EFFICIENCY
    bw = g.hbm_bandwidth * BANDWIDTH_EFFICIENCY

    def point(label, chunks):
        i = cm.step_flops(s, chunks) / cm.step_bytes(s, chunks)
        return {"label": label, "intensity": i, "flops": min(peak, bw * i)}
    pts = [point(f"prefill {n} tok", [(n, n)]) for n in lengths]
    pts += [point(f"decode, batch {b}", [(1, 512)] * b) for b in (1, 16, 128)]
    return {"gpu": g.name, "model": s.name, "peak": peak, "bandwidth": bw,
            "ridge": peak / bw, "points": pts}


@measure_cache.shared
def measure(smoke: bool = False, deterministic: bool = False, repeats: int | None = None,
            with_fit: bool = True, wall_lengths=None, contexts=(), shapes=()) -> dict:
    """The sweep priced on the simulated H100 (a projection) and, unless ``deterministic``,
    on this machine's wall clock (SmolLM2, lengths interleaved, ``repeats`` each), plus the
    fixed + per-token fit of a prefill step (``with_fit``). ``wall_lengths``: the wall sweep's
    input lengths (default: the chapter's). Two more wall-clock runs, unless
    ``deterministic``: the decode step against the context (``_ch03_context``; ``contexts``:
    its lengths, None: not run) and the model sizes (``_ch03_sizes``; ``shapes``: their
    names, None: not run); () takes each part's own."""
    _kit.seed_everything(0)
    lengths = wall_lengths or (LENGTHS_SMOKE if smoke else LENGTHS)
    out = OUTPUT_SMOKE if smoke else OUTPUT
    sim = _kit.engine(None, enable_prefix_caching=False, max_model_len=8192,
                      num_blocks=_kit.SMOKE_BLOCKS if smoke else 1024, **_kit.SIM)
    runs = {"sim": sweep(sim, SIM_LENGTHS_SMOKE if smoke else SIM_LENGTHS, out)}
    model_sim = sim.model_name
    del sim                  # its KV blocks go before the wall clock's engine takes its own
    model_wall, wall, fit = None, None, None
    if not deterministic:
        eng = _kit.engine(None, enable_prefix_caching=False)
        _kit.warm_up(eng)
        runs["wall"], wall = wall_sweep(eng, lengths, out, repeats or (2 if smoke else 3))
        model_wall = eng.model_name
        fit = step_fit(eng, FIT_LENGTHS_SMOKE if smoke else FIT_LENGTHS,
                       repeats or (2 if smoke else 3)) if with_fit else None
    data = {"runs": runs, "roofline": roofline(), "clock_sim": _kit.SIM_LABEL,
            "model": model_sim, "model_wall": model_wall}
    if wall is not None:
        data["wall"] = wall
    if fit is not None:
        data["step_fit"] = fit
    reps = repeats or (2 if smoke else 3)
    if not deterministic and contexts is not None:
        data["context"] = _ch03_context.measure(smoke, reps, contexts or None)
    if not deterministic and shapes is not None:
        data["sizes"] = _ch03_sizes.measure(smoke, reps, shapes or None)
    return data


def _point_label(label: str) -> str:
    """A roofline point's size, from its label: "prefill 512 tok" -> "512 tokens",
    "decode, batch 16" -> "batch 16"."""
    words = label.replace(",", "").split()
    if words[-2] == "batch":
        return f"batch {int(words[-1]):,}"
    return f"{int(words[1]):,} tokens"


def figure(data: dict, clock: str = "sim"):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots
    rows, rf = data["runs"][clock], data["roofline"]
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12, subplot_titles=(
        "time per request phase (ms)", f"roofline: {rf['gpu']}, {rf['model']} (bf16)"))
    inputs = [r["input_tokens"] for r in rows]
    fig.add_trace(go.Scatter(x=inputs, y=[r["ttft"] * 1e3 for r in rows], mode="lines+markers",
                             name="time to first token (prefill)",
                             line_color=palette.PHASE["prefill"]), 1, 1)
    fig.add_trace(go.Scatter(x=inputs, y=[r["tpot"] * 1e3 for r in rows], mode="lines+markers",
                             name="time per output token (decode)",
                             line_color=palette.PHASE["decode"]), 1, 1)
    xs = np.logspace(-0.5, 4.8, 64)     # to 60,000: room for the last label
    fig.add_trace(go.Scatter(x=xs, y=np.minimum(rf["peak"], rf["bandwidth"] * xs) / 1e12,
                             mode="lines", name="attainable (roofline)",
                             line=dict(color=palette.INK, width=1.5)), 1, 2)
    # each kind of step one trace; a point says only its size (the colour, its phase)
    # labels: the two prefill points on the roof sit close together: the first one's label
    # goes above it, the next one's below the roof; a decode point's below, to its right
    for kind in ("prefill", "decode"):
        pts = [p for p in rf["points"] if p["label"].startswith(kind)]
        on_roof = [p["flops"] >= rf["peak"] for p in pts]
        where = ["bottom right" if kind == "decode" else "top left" if not roof else
                 "bottom center" if any(on_roof[:i]) else "top center"
                 for i, roof in enumerate(on_roof)]
        fig.add_trace(go.Scatter(
            x=[p["intensity"] for p in pts], y=[p["flops"] / 1e12 for p in pts],
            mode="markers+text", text=[_point_label(p["label"]) for p in pts],
            textposition=where, name=f"{kind} step", showlegend=False,
            marker=dict(size=10, color=palette.PHASE[kind])), 1, 2)
    r0, r1 = rows[0], rows[-1]
    fig.add_annotation(
        text=f"{r0['input_tokens']:,} to {r1['input_tokens']:,} input tokens:<br>"
             f"TTFT {x(r1['ttft'] / r0['ttft'])}, per output token {x(r1['tpot'] / r0['tpot'])}",
        xref="x domain", yref="y domain", x=0.02, y=0.98, xanchor="left", yanchor="top",
        showarrow=False, align="left", font=dict(size=13), row=1, col=1)
    fig.update_xaxes(title_text="input tokens", tickformat=",~r", row=1, col=1)
    fig.update_yaxes(title_text="ms", rangemode="tozero", row=1, col=1)
    # log-log, with round ticks (powers of ten) and no minor labels
    from .. import figures as ilf
    roof = np.minimum(rf["peak"], rf["bandwidth"] * xs) / 1e12
    ilf.log_axis(fig, "x", [xs[0], xs[-1]], title="FLOPs per byte moved (log scale)",
                 row=1, col=2, pad=0)
    # room above the roof for the label of the first point on it
    ilf.log_axis(fig, "y", [*roof, rf["peak"] * 2.5 / 1e12],
                 title="TFLOP/s (log scale)", row=1, col=2)
    label = data["clock_sim"] if clock == "sim" else f"wall, this machine ({data['model_wall']})"
    return _kit.style(fig, HEADING, label)


def summary(data: dict) -> str:
    lines = []
    for clock, rows in data["runs"].items():
        name = (f"{protocol.label(data['clock_sim'])} ({data['model']})" if clock == "sim" else
                f"{data['wall']['label']} ({data['model_wall']})")
        lines.append(name + ":")
        for r in rows:
            rng = lambda k: (f" [{r[k + '_lo'] * 1e3:.1f}-{r[k + '_hi'] * 1e3:.1f}]"
                             if k + "_lo" in r else "")
            lines.append(f"  {r['input_tokens']:5d} input tokens: TTFT {r['ttft'] * 1e3:8.1f} ms"
                         f"{rng('ttft')}, per output token {r['tpot'] * 1e3:6.1f} ms{rng('tpot')}")
    rf = data["roofline"]
    lines.append(f"roofline ridge on {rf['gpu']}: {rf['ridge']:.0f} FLOPs/byte (steps below it "
                 "are memory-bound)")
    if "step_fit" in data:
        sf = data["step_fit"]
        lines.append("prefill step, fixed + per token (wall clock, see 'Why a short prefill "
                     "costs what it does'): " + "; ".join(
                         f"{t} thread{'s' if t > 1 else ''} {f['intercept'] * 1e3:.0f} ms + "
                         f"{f['slope'] * 1e3:.1f} ms per token" for t, f in sorted(sf["fits"].items()))
                     + protocol.warning_line(sf["wall"]))
    return "\n".join(lines) + protocol.warning_line(data.get("wall"))


# --- the chapter's claims: how each is measured and judged --------------------------------------
def measure_for_claims(smoke: bool) -> dict:
    """The measurement every claim below is judged on (``claims.run_all``): the wall-clock
    sweep on SmolLM2 (and the projection beside it), the step fit, the decode step against
    the context and the model sizes: the notebook's own measurement (one truth: with
    INFERLAB_MEASURE_CACHE set, the report card reads the notebook's run)."""
    return measure(smoke=smoke)


def _sweep_text(rows) -> tuple[float, float, float, str]:
    a, b = rows[0], rows[-1]
    tpots = [r["tpot"] for r in rows]
    grow, flat = b["ttft"] / a["ttft"], max(tpots) / min(tpots)
    n = b["input_tokens"] / a["input_tokens"]
    return grow, flat, n, (f"input {a['input_tokens']} -> {b['input_tokens']} tokens "
                           f"({n:.0f}x): TTFT {ms(a['ttft'])} -> {ms(b['ttft'])} ({x(grow)}), "
                           f"time per output token {ms(a['tpot'])} -> {ms(b['tpot'])} "
                           f"(at most {x(flat)} apart)")


def judge_prefill_decode(d: dict) -> Verdict:
    """On this machine's wall clock (SmolLM2, A B A B): TTFT must grow clearly with the
    input, the time per output token stay about flat; the simulated H100 sweep is shown
    beside it as a projection."""
    if "wall" not in d["runs"]:
        return Verdict(UNMEASURABLE, "no wall-clock sweep in this measurement (0 rows); the "
                       "simulated sweep is a projection", clock=d["clock_sim"])
    grow, flat, n, text = _sweep_text(d["runs"]["wall"])
    v_flat = HOLDS if flat < 1.25 else HOLDS_SMALLER if flat < 2 else FAILS
    v = worst(on_wall(grow, clear=2), v_flat)
    _, _, _, sim_text = _sweep_text(d["runs"]["sim"])
    reason = (f"on this machine's wall clock ({d['model_wall']}, medians over "
              f"{d['wall']['repeats']} interleaved repeats): {text}; projection "
              f"{clock_note(d['clock_sim'])}: {sim_text}")
    if "step_fit" in d and min(d["step_fit"]["fits"][1]["intercept"],
                               d["step_fit"]["fits"][1]["slope"]) > 0:
        f = d["step_fit"]["fits"][1]
        reason += (f"; on one thread a prefill step here costs {ms(f['intercept'], 0)} fixed "
                   f"(reading {f['weight_bytes'] / 1e6:.0f} MB of weights once, launching 30 "
                   f"layers) + {ms(f['slope'])} per prompt token, so a short prompt costs "
                   "about one step")
    return Verdict(v, reason, measured=f"TTFT {x(grow)}, per token {x(flat)}",
                   points=(("TTFT", grow), ("time per output token", flat),
                           ("input length", n, "reference")),
                   unit="growth, longest vs shortest input (x)", axis="log",
                   clock=d["wall"]["label"], warning=wall_warning(d))


def judge_context(d: dict) -> Verdict:
    return _ch03_context.judge(d.get("context"))


def judge_sizes(d: dict) -> Verdict:
    return _ch03_sizes.judge(d.get("sizes"))


CLAIMS = (
    Claim("03-prefill-decode", "Time to first token grows with the input (prefill is "
          "compute-bound); the time per output token stays about the same (decode is "
          "memory-bound).", f"{ENTER}; {AFTER}", "ch03_prefill_decode", measure_for_claims,
          judge_prefill_decode),
    Claim("03-decode-context", "Each generated token extends the sequence, so the time per "
          "output token grows with the context: a decode step reads the keys and values of "
          "every token before it.", AFTER, "ch03_prefill_decode", measure_for_claims,
          judge_context),
    Claim("03-model-sizes", "Some models respond faster than others: a bigger model takes "
          "longer to the first token and per output token on the same machine.", ENTER,
          "ch03_prefill_decode", measure_for_claims, judge_sizes),
)
