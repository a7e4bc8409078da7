"""Chapter 4: where the KV cache's memory goes, reserved in one piece or handed out in blocks.

A server does not know how long an answer will be. The old way reserved, for every request,
one contiguous region big enough for the longest possible sequence; most of it was never
written. Paged attention hands out small fixed-size blocks as the sequence grows, so the
only unused memory is the unfilled end of each request's last block.
"""
from __future__ import annotations

from .. import palette
from . import _kit

TITLE = "KV cache: contiguous reservation vs paged blocks"
CLAIM = ("Reserving contiguous KV memory per request wastes 60-80% of it; paged blocks cut "
         "the waste to under 4%.")
LAYOUTS = ("contiguous", "paged")
BLOCK_SIZE = 16
MAX_MODEL_LEN = 1024


def workload(smoke: bool):
    """Chat-like requests: prompts and answers far shorter than the context window, with
    answer lengths the server cannot know in advance."""
    from inferlab.sim import workloads as wl
    return wl.synthetic(8 if smoke else 24, prompt_len=wl.Uniform(64, 320),
                        output_len=wl.CappedExponential(48 if smoke else 96, 256), seed=0,
                        name="chat-like")


def run(layout: str, smoke: bool):
    """One engine, one layout; returns (engine stats, Trace, the step where allocation peaked)."""
    from inferlab.observe.trace import Trace
    from inferlab.sim.workloads import run_workload
    eng = _kit.engine("tiny", kv_layout=layout, block_size=BLOCK_SIZE,
                      max_model_len=MAX_MODEL_LEN, num_blocks=(8 if smoke else 24) * 64,
                      max_num_seqs=8 if smoke else 24, **_kit.SIM)
    trace = Trace.record(eng)
    run_workload(eng, workload(smoke), progress=False)
    trace.stop()
    peak = max(range(len(trace.records)), key=lambda k: trace.records[k].kv_slots_allocated)
    return eng.stats(), trace, peak


def measure(smoke: bool = False, deterministic: bool = False) -> dict:
    """Token counts only (no clock enters the picture), so every run gives the same data."""
    _kit.seed_everything(0)
    out = {"layouts": {}, "block_size": BLOCK_SIZE, "max_model_len": MAX_MODEL_LEN}
    for layout in LAYOUTS:
        st, trace, peak = run(layout, smoke)
        rec = trace.records[peak]
        out["layouts"][layout] = {
            "peak_waste": st.peak_kv_waste, "slots": rec.kv_slots_allocated,
            "tokens": rec.kv_tokens_used, "blocks_used": rec.kv_blocks_used,
            "blocks_total": rec.kv_blocks_total, "requests": rec.num_running,
            "peak_step": peak}
        out.setdefault("traces", {})[layout] = trace
    return out


def summary(data: dict) -> str:
    c, p = data["layouts"]["contiguous"], data["layouts"]["paged"]
    return (f"at peak: contiguous wastes {c['peak_waste']:.0%} of its reserved slots "
            f"({c['tokens']} tokens in {c['slots']}), paged {p['peak_waste']:.1%} "
            f"({p['tokens']} tokens in {p['slots']}); block size {data['block_size']}")


def figure(data: dict):
    import plotly.graph_objects as go
    names = list(LAYOUTS)
    rows = [data["layouts"][n] for n in names]
    fig = go.Figure()
    fig.add_trace(go.Bar(y=names, x=[r["tokens"] for r in rows], orientation="h",
                         name="holding a token", marker_color=palette.BLUISH_GREEN))
    fig.add_trace(go.Bar(y=names, x=[r["slots"] - r["tokens"] for r in rows], orientation="h",
                         name="reserved, empty (waste)", marker_color=palette.VERMILLION,
                         text=[f"{r['peak_waste']:.1%} wasted" for r in rows],
                         textposition="outside", cliponaxis=False))
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title_text="KV token slots allocated at the peak")
    return _kit.style(fig, TITLE + f" (block size {data['block_size']})",
                      "none: slot counts at the step of peak allocation", left=90)
