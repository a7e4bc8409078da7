"""Chapter 4: where the KV cache's memory goes, reserved in one piece or handed out in blocks.

A server does not know how long an answer will be. The old way reserved, for every request,
one contiguous region big enough for the longest possible sequence; most of it was never
written. Paged attention hands out small fixed-size blocks as the sequence grows, so the
only unused memory is the unfilled end of each request's last block.

Both layouts get the *same* KV memory, and neither the memory nor the reservation is chosen
by the lab: the KV budget is the engine's default one (a fifth of free memory, at most
512 MiB: 512 MiB on any machine with 2.5 GB free) and a contiguous region is the engine's
default context window (the model's context, at most 2,048 tokens: what the PagedAttention
paper's baseline reserved for OPT). Contiguous reservation holds only ``slots //
max_model_len`` requests at a time and queues the rest, while paging fits as many as their
actual tokens allow. Same requests, same greedy outputs; the difference is how much of the
memory holds tokens (at the peak and over the whole run), how many run at once and, on the
simulated clock, how many tokens per second come out.
"""
from __future__ import annotations

from .. import measure_cache, palette, protocol
from ..verdicts import (ENTER, FAILS, HOLDS, HOLDS_SMALLER, PAGED, Claim, Verdict,
                       against_published, clock_note, pct, x)
from . import _kit
from ...model.resources import KV_MEMORY_CAP

TITLE = "KV cache: contiguous reservation vs paged blocks, at the same memory"
CLAIM = ("Reserving contiguous KV memory per request wastes 60-80% of it; paged blocks cut "
         "the waste to under 4%, so the same memory holds more requests and serves more "
         "tokens per second (2-4x in the published benchmark).")
LAYOUTS = ("contiguous", "paged")
# the layouts' own colours (run lines, throughput bars), apart from the slot colours
# (green: holding a token, vermillion: reserved and empty)
# two memory layouts, not policies or phases: neutral inks (palette colours keep one meaning)
COLORS = {"contiguous": palette.MUTED, "paged": palette.INK}
BLOCK_SIZE = 16
KV_MEMORY = KV_MEMORY_CAP  # the engine's default KV budget (model/resources.py)
MAX_NUM_SEQS = 64          # seats are plentiful: the KV memory is what limits either layout


def sizes(smoke: bool) -> dict:
    """The workload. Real chat requests (sim/data/chat_requests.json), answered by SmolLM2
    until EOS under a cap, in the engine's default 2,048-token context window: a contiguous
    layout must reserve the whole window for each (it cannot know where the answer ends), so
    the default 512 MiB (728 blocks of 16 slots at SmolLM2's 46,080 bytes per token) hold 5 of
    them, fewer than the requests waiting. Paged waste is only the unfilled end of each
    request's last block, 7.5 slots on average: 7.5 / 0.04 - 7.5 = 180 tokens per request is
    what "under 4%" needs at 16-token blocks, so requests this short (a prompt of ~50 tokens)
    leave a little more."""
    if smoke:
        return dict(requests=12, answer_cap=64)
    return dict(requests=32, answer_cap=256)


def workload(smoke: bool, tokenizer=None):
    """Real chat requests: prompts and answers far shorter than the context window, with
    answer lengths the server cannot know in advance."""
    from inferlab.sim.chat_requests import chat_requests
    s = sizes(smoke)
    return chat_requests(tokenizer or _kit.tokenizer(), s["requests"],
                         max_tokens=s["answer_cap"], seed=0, name="chat requests")


def run(layout: str, smoke: bool):
    """One engine, one layout, the chapter's fixed KV memory; returns (engine stats, Trace,
    the step where allocation peaked, the outputs)."""
    from inferlab.observe.trace import Trace
    from inferlab.sim.workloads import run_workload
    eng = _kit.engine(None, kv_layout=layout, block_size=BLOCK_SIZE, kv_cache_memory=KV_MEMORY,
                      num_blocks=None,
                      max_num_seqs=MAX_NUM_SEQS, enable_prefix_caching=False, **_kit.SIM)
    trace = Trace.record(eng)
    outs = run_workload(eng, workload(smoke, eng.tokenizer), progress=False)
    trace.stop()
    peak = max(range(len(trace.records)), key=lambda k: trace.records[k].kv_slots_allocated)
    return eng, trace, peak, outs


def _time_mean(trace, value) -> float:
    """``value(record)`` averaged over the run's (simulated) time."""
    recs = trace.records
    span = sum(r.t_end - r.t_start for r in recs)
    return sum(value(r) * (r.t_end - r.t_start) for r in recs) / span if span else 0.0


def _mean_waste(trace) -> float:
    """Reserved slots holding no token, as a share of the reserved slots, over the whole run
    (time-weighted): the waste a run lives with, not only its worst step."""
    slots = _time_mean(trace, lambda r: r.kv_slots_allocated)
    return 1 - _time_mean(trace, lambda r: r.kv_tokens_used) / slots if slots else 0.0


@measure_cache.shared
def measure(smoke: bool = False, deterministic: bool = False, arms: dict | None = None) -> dict:
    """Slot counts and the simulated H100 clock only, so every run gives the same data.
    ``arms``: the layout each named run uses (default its own; a test runs "paged" as
    contiguous to remove the effect)."""
    arms = arms or {n: n for n in LAYOUTS}
    from inferlab.observe.metrics import summarize
    _kit.seed_everything(0)
    s = sizes(smoke)
    out = {"layouts": {}, "block_size": BLOCK_SIZE, "kv_memory": KV_MEMORY,
           "sizes": s, "clock_sim": _kit.SIM_LABEL, "traces": {}}
    tokens = {}
    for layout in LAYOUTS:
        eng, trace, peak, outs = run(arms[layout], smoke)
        st = eng.stats()
        out.update(max_model_len=eng.max_model_len, num_blocks=eng.num_blocks,
                   kv_slots=eng.num_blocks * BLOCK_SIZE)
        m = summarize(outs, clock=st.clock)
        rec = trace.records[peak]
        tokens[layout] = [list(o.token_ids) for o in outs]
        out["layouts"][layout] = {
            "peak_waste": st.peak_kv_waste, "mean_waste": _mean_waste(trace),
            "slots": rec.kv_slots_allocated,
            "tokens": rec.kv_tokens_used, "blocks_used": rec.kv_blocks_used,
            "blocks_total": rec.kv_blocks_total, "requests": rec.num_running,
            "peak_step": peak, "max_running": st.max_concurrent_requests,
            "mean_running": _time_mean(trace, lambda r: r.num_running), "steps": st.num_steps,
            "preemptions": st.num_preemptions, "throughput": m.output_throughput,
            "duration": m.duration, "output_tokens": m.num_output_tokens,
            "queue_median": m.queue_time.median, "e2e_median": m.e2e.median,
            "finished": m.num_requests}
        out["traces"][layout] = trace
    out["model"] = trace.meta["model"]
    out["same_outputs"] = sum(a == b for a, b in zip(tokens["contiguous"], tokens["paged"]))
    out["num_requests"] = s["requests"]
    return out


def tail_text(data: dict) -> str:
    """Why paged waste is what it is: the unfilled ends of the last blocks, in numbers."""
    p, bs = data["layouts"]["paged"], data["block_size"]
    empty, n = p["slots"] - p["tokens"], max(p["requests"], 1)
    need = (bs - 1) / 2 / 0.04 - (bs - 1) / 2
    return (f"paged waste is the unfilled end of each request's last block: at the peak "
            f"{p['requests']} requests hold {p['tokens'] / n:.0f} tokens each on average and "
            f"leave {empty} slots empty ({empty / n:.1f} each, of a {bs}-token block); "
            f"an average of {(bs - 1) / 2:.1f} empty slots stays under 4% once requests hold "
            f"{need:.0f}+ tokens")


def memory_text(d: dict) -> str:
    return (f"{d['kv_memory'] / 2**20:.0f} MiB, {d['kv_slots']:,} token slots "
            f"({d['num_blocks']} blocks of {d['block_size']})")


def summary(data: dict) -> str:
    c, p = data["layouts"]["contiguous"], data["layouts"]["paged"]
    r = p["throughput"] / c["throughput"]
    return "\n".join([
        f"the same KV memory for both, the engine's default: {memory_text(data)}; "
        f"{data['num_requests']} real chat requests answered by {data['model']}, context "
        f"window {data['max_model_len']} (the engine's default)",
        f"waste over the run: contiguous {c['mean_waste']:.0%} of its reserved slots, paged "
        f"{p['mean_waste']:.1%}; at the peak: contiguous {c['peak_waste']:.0%} "
        f"({c['tokens']} tokens in {c['slots']}), paged {p['peak_waste']:.1%} "
        f"({p['tokens']} tokens in {p['slots']})",
        tail_text(data),
        f"requests running at once: contiguous at most {c['max_running']} "
        f"({c['mean_running']:.1f} on average), paged at most {p['max_running']} "
        f"({p['mean_running']:.1f} on average, {p['preemptions']} preemptions)",
        f"throughput: contiguous {c['throughput']:.0f} tok/s, paged {p['throughput']:.0f} "
        f"tok/s ({r:.2f}x); median wait in the queue {c['queue_median'] * 1e3:.0f} vs "
        f"{p['queue_median'] * 1e3:.0f} ms; steps {c['steps']} vs {p['steps']}",
        f"outputs: {data['same_outputs']} of {data['num_requests']} requests produced the same "
        f"tokens under both layouts",
        f"clock: {protocol.label(data['clock_sim'])} (waste and request counts: slot counts)"])


def figure(data: dict):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots
    names = list(LAYOUTS)
    rows = [data["layouts"][n] for n in names]
    fig = make_subplots(rows=1, cols=3, column_widths=[0.42, 0.33, 0.25],
                        horizontal_spacing=0.09, subplot_titles=(
                            "KV slots at the peak", "requests running", "output tokens/s"))
    fig.add_trace(go.Bar(y=names, x=[r["tokens"] for r in rows], orientation="h",
                         name="holding a token", marker_color=palette.CACHE["used"]), 1, 1)
    # reserved but empty: the cache's waste colour, hatched (palette.CACHE), visibly not full
    waste = palette.CACHE["waste"]
    fig.add_trace(go.Bar(y=names, x=[r["slots"] - r["tokens"] for r in rows], orientation="h",
                         name="reserved, empty (waste)",
                         marker=dict(color=palette.CACHE["free"], line=dict(color=waste, width=1),
                                     pattern=dict(shape="/", fgcolor=waste, solidity=0.35)),
                         text=[f"{r['peak_waste']:.1%} wasted" for r in rows],
                         textposition="outside", cliponaxis=False), 1, 1)
    for n in names:
        tr = data["traces"][n]
        t0 = tr.t0
        fig.add_trace(go.Scatter(x=[(r.t_end - t0) * 1e3 for r in tr.records],
                                 y=[r.num_running for r in tr.records], mode="lines",
                                 line_shape="hv", name=n, line_color=COLORS[n]), 1, 2)
        fig.add_trace(go.Bar(x=[n], y=[data["layouts"][n]["throughput"]],
                             marker_color=COLORS[n], showlegend=False,
                             text=[f"{data['layouts'][n]['throughput']:,.0f}"]), 1, 3)
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title_text="token slots", range=[0, 1.35 * data["kv_slots"]], row=1, col=1)
    fig.update_xaxes(title_text="time (ms)", row=1, col=2)
    return _kit.style(fig, TITLE + f" ({data['kv_slots']:,} slots, block size "
                      f"{data['block_size']})", data["clock_sim"] + "; waste: slot counts",
                      left=90)


# --- the chapter's claims: how each is measured and judged --------------------------------------
def measure_for_claims(smoke: bool) -> dict:
    """The measurement every claim below is judged on (``claims.run_all``)."""
    return measure(smoke=smoke)   # slot counts, simulated H100


def _against_range(frac: float, lo: float = 0.6, hi: float = 0.8) -> str:
    return "within" if lo <= frac <= hi else "above" if frac > hi else "below"


def judge_kv_waste(d: dict) -> Verdict:
    """Judged on the waste over the whole run (time-weighted), the peak beside it; the
    memory and the reservation are the engine's defaults, so the reason says where the
    contiguous waste sits against the published 60-80% and why."""
    c, p = d["layouts"]["contiguous"], d["layouts"]["paged"]
    bs = d["block_size"]
    cw, pw = c["mean_waste"], p["mean_waste"]
    reason = (f"60-80% wasted vs under 4% claimed; here {pct(cw)} vs {pct(pw)} over the run "
              f"({pct(c['peak_waste'])} vs {pct(p['peak_waste'])} at the peak: "
              f"{c['tokens']} tokens in {c['slots']} reserved slots vs {p['tokens']} in "
              f"{p['slots']}; slot counts) in the engine's default KV memory "
              f"({memory_text(d)}); contiguous waste is {_against_range(cw)} the published "
              f"range: each request reserves the engine's default window of "
              f"{d['max_model_len']:,} tokens and holds {c['tokens'] / c['requests']:.0f} "
              f"(a short chat request)")
    if pw >= cw or pw >= 0.10 or cw < 0.5:
        v = FAILS
    elif cw >= 0.6 and pw < 0.04:
        v = HOLDS
    else:
        v = HOLDS_SMALLER
    if pw >= 0.04:
        empty = p["slots"] - p["tokens"]
        reason += (f"; paged waste is the unfilled end of each request's last block: "
                   f"{p['requests']} requests leave {empty} slots empty ({empty / p['requests']:.1f}"
                   f" of a {bs}-token block each) while holding only "
                   f"{p['tokens'] / p['requests']:.0f} tokens each; with 1000-token "
                   f"conversations the same tails would waste "
                   f"{pct(empty / p['requests'] / (1000 + empty / p['requests']))}")
    return Verdict(v, reason, measured=f"{pct(cw)} vs {pct(pw)}",
                   points=(("contiguous", 100 * cw),
                           ("contiguous", (60.0, 80.0), "published"),
                           ("paged", 100 * pw),
                           ("paged", (0.0, 4.0), "published")),
                   unit="% of KV slots wasted, over the run", clock="none: slot counts")


def judge_paged_throughput(d: dict) -> Verdict:
    """Measured in engine steps (counts): the same answers, token for token, written in
    fewer steps because more requests share each step; output tokens per second on the
    simulated H100 are a projection beside it (a bigger batch makes each step longer)."""
    c, p = d["layouts"]["contiguous"], d["layouts"]["paged"]
    r = c["steps"] / p["steps"]          # output tokens per step, paged / contiguous
    n, same = d["num_requests"], d["same_outputs"]
    fits = p["max_running"] > c["max_running"]
    v = against_published(r, 2.0, close=1.0) if fits and same == n else FAILS
    rt = p["throughput"] / c["throughput"]
    return Verdict(v, f"2-4x claimed; {x(r)} here in output tokens per engine step "
                   f"({c['output_tokens']} tokens in {c['steps']} steps contiguous vs "
                   f"{p['steps']} paged; step counts): the same {d['kv_slots']:,} KV slots hold "
                   f"at most {c['max_running']} contiguous reservations of "
                   f"{d['max_model_len']} tokens, so the other requests queue, against up to "
                   f"{p['max_running']} paged requests ({c['mean_running']:.1f} vs "
                   f"{p['mean_running']:.1f} running on average, {p['preemptions']} "
                   f"preemptions); {same} of {n} requests gave the same tokens under both "
                   f"layouts; the memory is the engine's default ({memory_text(d)}). Projection {clock_note(d['clock_sim'])}: {x(rt)} in output "
                   f"tok/s ({c['throughput']:.0f} vs {p['throughput']:.0f}), less than in "
                   "steps because a bigger batch makes each step longer",
                   measured=f"{x(r)} tokens/step, {c['max_running']} vs {p['max_running']} "
                   "at once",
                   points=(("contiguous", c["output_tokens"] / c["steps"]),
                           ("paged", p["output_tokens"] / p["steps"])),
                   unit="output tokens per engine step at the same KV memory",
                   clock="none: step counts")


CLAIMS = (
    Claim("04-kv-waste", "Reserving one contiguous KV region per request wastes 60-80% of it; "
          "paged blocks allocated on demand waste under 4%.",
          f"{ENTER}; {PAGED} and the vLLM blog post (2023)", "ch04_kv_cache",
          measure_for_claims, judge_kv_waste),
    Claim("04-paged-throughput", "At the same KV memory, paged blocks fit more requests at "
          "once than contiguous reservations, which raises throughput 2-4x.",
          f"{ENTER}; {PAGED} (2-4x there against whole systems, FasterTransformer and Orca)",
          "ch04_kv_cache", measure_for_claims, judge_paged_throughput),
)
