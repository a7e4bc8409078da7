"""How each claim is judged: one function per claim, from the chapter's measured data to a
Verdict whose reason carries the numbers. The thresholds are the only judgement calls: each
judge states its own (``clear=``), and the helpers in ``verdicts`` (``direction``,
``against_published``, ``worst``) apply them the same way everywhere.

Judges read the deterministic part of a chapter's data (token counts, simulated clocks)
first; a chapter's wall-clock columns, when present, are added to the reason with their
spread and busy-machine warning.
"""
from __future__ import annotations

import statistics

from . import protocol
from .verdicts import (FAILS, HOLDS, HOLDS_SMALLER, UNMEASURABLE, Verdict, against_published,
                       direction, ideal_batching_gain, ms, pct, wall_warning, worst, x)


COUNTS = "none: token counts"


def _clock(label: str) -> str:
    return f"[{label}]"


# --- chapter 1 ------------------------------------------------------------------------------
def ch01_assembly(d: dict) -> Verdict:
    c = d["counts"]
    total, typed = sum(c.values()), c["new message"]
    wrapper = c["system prompt"] + c["tool definitions"] + c["memory"]
    v = direction(total / typed, clear=2) if wrapper and c["history"] else FAILS
    return Verdict(v, f"at turn 3 the model reads {total} tokens and the user typed {typed} "
                   f"of them ({pct(typed / total)}); system prompt {c['system prompt']}, tool "
                   f"definitions {c['tool definitions']}, memory {c['memory']}, earlier turns "
                   f"{c['history']}, chat-template markup {c['template']} (token counts, "
                   "SmolLM2's tokenizer)", measured=f"{typed} of {total} tokens typed",
                   points=tuple((k, c[k]) for k in c), unit="tokens at turn 3", clock=COUNTS)


def ch01_stateless(d: dict) -> Verdict:
    off, on = d["runs"]["uncached · sim"], d["runs"]["cached · sim"]
    redo = all(r["computed_tokens"] == r["prompt_tokens"] for r in off)
    grows = all(b["prompt_tokens"] > a["prompt_tokens"] for a, b in zip(off, off[1:]))
    last, last_on = off[-1], on[-1]
    v = (direction(last["computed_tokens"] / last_on["computed_tokens"], clear=2)
         if redo and grows else FAILS)
    reason = (f"without a cache every turn computes its whole prompt, which grows turn by turn "
              f"({', '.join(str(r['computed_tokens']) for r in off)} tokens); with prefix "
              f"caching turn {last['turn']} finds {last['prompt_tokens'] - last_on['computed_tokens']}"
              f" of its {last['prompt_tokens']} tokens in the cache and computes "
              f"{last_on['computed_tokens']} ({pct(last_on['computed_tokens'] / last['prompt_tokens'])})"
              " (token counts)")
    if "wall" in d:
        sp = {a: protocol.Spread(**s) for a, s in d["wall"]["later_turns_ttft"].items()}
        reason += (f"; wall clock, TTFT summed over turns 2+: {sp['uncached'].ms()} uncached "
                   f"vs {sp['cached'].ms()} cached")
    return Verdict(v, reason, measured=f"{last['computed_tokens']} vs "
                   f"{last_on['computed_tokens']} tokens computed",
                   points=(("prompt sent", last["prompt_tokens"]),
                           ("computed, no cache", last["computed_tokens"]),
                           ("computed, prefix cache", last_on["computed_tokens"])),
                   unit=f"tokens at turn {last['turn']}", clock=COUNTS,
                   warning=wall_warning(d))


# --- chapter 2 ------------------------------------------------------------------------------
def ch02_languages(d: dict) -> Verdict:
    rows = sorted(d["rows"], key=lambda r: r["vs_english"])
    en = next(r for r in rows if r["language"] == "English")
    hi, mid = rows[-1], rows[len(rows) // 2]
    v = direction(hi["vs_english"], clear=2)
    mib = lambda r: f"{r['kv_bytes_8b'] / 2**20:.1f} MiB"
    return Verdict(v, f"{hi['language']} needs {x(hi['vs_english'])} English's tokens for the "
                   f"same message ({hi['tokens']} vs {en['tokens']}), {mid['language']} "
                   f"{x(mid['vs_english'])}; prefill of {d['repeat']} copies "
                   f"{ms(hi['prefill_sim'])} vs {ms(en['prefill_sim'])}, their KV cache "
                   f"{mib(hi)} vs {mib(en)} for an 8B model {_clock(d['clock_sim'])}",
                   measured=f"up to {x(hi['vs_english'])} the tokens",
                   points=tuple((r["language"], r["tokens"]) for r in rows),
                   unit="tokens for the same message", clock=COUNTS)


# --- chapter 3 ------------------------------------------------------------------------------
def _sweep_text(rows) -> tuple[float, float, float, str]:
    a, b = rows[0], rows[-1]
    tpots = [r["tpot"] for r in rows]
    grow, flat = b["ttft"] / a["ttft"], max(tpots) / min(tpots)
    n = b["input_tokens"] / a["input_tokens"]
    return grow, flat, n, (f"input {a['input_tokens']} -> {b['input_tokens']} tokens "
                           f"({n:.0f}x): TTFT {ms(a['ttft'])} -> {ms(b['ttft'])} ({x(grow)}), "
                           f"time per output token {ms(a['tpot'])} -> {ms(b['tpot'])} "
                           f"(at most {x(flat)} apart)")


def ch03_prefill_decode(d: dict) -> Verdict:
    grow, flat, n, text = _sweep_text(d["runs"]["sim"])
    v_flat = HOLDS if flat < 1.25 else HOLDS_SMALLER if flat < 2 else FAILS
    v = worst(direction(grow, clear=2), v_flat)
    reason = f"{text} {_clock(d['clock_sim'])}"
    if "wall" in d["runs"]:
        _, wflat, _, wtext = _sweep_text(d["runs"]["wall"])
        reason += f"; on this machine's wall clock ({d['model_wall']}): {wtext}"
    return Verdict(v, reason, measured=f"TTFT {x(grow)}, per token {x(flat)}",
                   points=(("input length", n), ("TTFT", grow), ("time per output token", flat)),
                   unit="growth, longest vs shortest input (x)", clock=d["clock_sim"],
                   warning=wall_warning(d))


# --- chapter 4 ------------------------------------------------------------------------------
def ch04_kv_waste(d: dict) -> Verdict:
    c, p = d["layouts"]["contiguous"], d["layouts"]["paged"]
    bs = d["block_size"]
    reason = (f"60-80% wasted vs under 4% claimed; here {pct(c['peak_waste'])} vs "
              f"{pct(p['peak_waste'])} at the peak ({c['tokens']} tokens in {c['slots']} "
              f"reserved slots vs {p['tokens']} in {p['slots']}; slot counts)")
    if p["peak_waste"] >= c["peak_waste"] or p["peak_waste"] >= 0.10 or c["peak_waste"] < 0.5:
        v = FAILS
    elif c["peak_waste"] >= 0.6 and p["peak_waste"] < 0.04:
        v = HOLDS
    else:
        v = HOLDS_SMALLER
    if p["peak_waste"] >= 0.04:
        empty = p["slots"] - p["tokens"]
        reason += (f"; paged waste is the unfilled end of each request's last block: "
                   f"{p['requests']} requests leave {empty} slots empty ({empty / p['requests']:.1f}"
                   f" of a {bs}-token block each) while holding only "
                   f"{p['tokens'] / p['requests']:.0f} tokens each; with 1000-token "
                   f"conversations the same tails would waste "
                   f"{pct(empty / p['requests'] / (1000 + empty / p['requests']))}")
    if c["peak_waste"] < 0.6:
        reason += (f"; contiguous reservation wastes what answers leave of max_model_len="
                   f"{d['max_model_len']}: {c['tokens'] / c['requests']:.0f} tokens used per "
                   f"request")
    return Verdict(v, reason, measured=f"{pct(c['peak_waste'])} vs {pct(p['peak_waste'])}",
                   points=(("contiguous, here", 100 * c["peak_waste"]),
                           ("contiguous, published", 70.0),
                           ("paged, here", 100 * p["peak_waste"]),
                           ("paged, published (under)", 4.0)), unit="% of KV slots wasted",
                   clock="none: slot counts at the peak")


# --- chapter 5 ------------------------------------------------------------------------------
def ch05_throughput(d: dict) -> Verdict:
    sim, lens, seats = d["runs"]["sim"], d["output_lens"], d["max_num_seqs"]
    ideal, s_steps, c_steps = ideal_batching_gain(lens, seats)
    steps = {s: len(tr.records) for s, tr in d["traces"]["sim"].items()}
    r = sim["ratio"]
    v = against_published(r, 23.0)
    reason = (f"23x claimed; {x(r)} here {_clock(d['clock_sim'])}: {len(lens)} requests at "
              f"{seats} seats, answers {statistics.mean(lens):.0f} tokens on average (longest "
              f"{max(lens)}), give an ideal of {x(ideal)} in decode steps (static {s_steps} vs "
              f"at least {c_steps}); the engine took {steps['static']} vs "
              f"{steps['continuous']} steps. Scheduling alone gains at most the ratio of each "
              f"static batch's longest answer to the mean answer: {x(ideal)} here, where 23x "
              "would need it at 23")
    points = [("published", 23.0), ("ideal, this workload", ideal), ("simulated H100", r)]
    if "wall" in d["runs"]:
        w = d["runs"]["wall"]
        reason += (f"; wall clock, this CPU (tiny model): {x(w['ratio'])} "
                   f"({w['ratio_lo']:.2f}-{w['ratio_hi']:.2f}x over {w['repeats']} repeats)")
        points.append(("wall, this CPU", w["ratio"]))
    return Verdict(v, reason, measured=x(r), points=tuple(points),
                   unit="throughput, continuous / static (x)", clock=d["clock_sim"],
                   warning=wall_warning(d))


def ch05_response_time(d: dict) -> Verdict:
    sim = d["runs"]["sim"]
    c, s = sim["continuous"]["e2e_median"], sim["static"]["e2e_median"]
    v = direction(s / c, clear=1.2)
    return Verdict(v, f"median time to a finished answer {ms(c, 0)} continuous vs {ms(s, 0)} "
                   f"static ({x(s / c)} lower); mean TTFT {ms(sim['continuous']['ttft_mean'], 0)}"
                   f" vs {ms(sim['static']['ttft_mean'], 0)} {_clock(d['clock_sim'])}",
                   measured=f"{x(s / c)} lower", unit="median E2E (ms)",
                   points=(("static", s * 1e3), ("continuous", c * 1e3)), clock=d["clock_sim"])


# --- chapter 6 ------------------------------------------------------------------------------
def ch06_chunked(d: dict) -> Verdict:
    u, c, s = d["runs"]["unchunked"], d["runs"]["chunked"], d["sizes"]
    r = u["p99"] / c["p99"]
    mean = lambda xs: sum(xs) / len(xs)
    return Verdict(direction(r), f"p99 inter-token latency {ms(u['p99'])} unchunked vs "
                   f"{ms(c['p99'])} chunked ({x(r)} lower) while {s['long_prompts']} prompts of "
                   f"{s['long_len']} tokens arrive among {s['streams']} streams (chunk "
                   f"{s['chunk']}); worst gap {ms(u['max'])} vs {ms(c['max'])}; the price: the "
                   f"long prompts' mean TTFT {ms(mean(u['long_ttft']))} vs "
                   f"{ms(mean(c['long_ttft']))} {_clock(d['clock'])}", measured=f"{x(r)} lower p99",
                   points=(("unchunked", u["p99"] * 1e3), ("chunked", c["p99"] * 1e3)),
                   unit="p99 inter-token latency (ms)", clock=d["clock"])


# --- chapter 7 ------------------------------------------------------------------------------
def ch07_prefix_reuse(d: dict) -> Verdict:
    u, c = d["agent"]["uncached"], d["agent"]["cached"]
    su, sc = d["shared"]["uncached"]["ttft"][1:], d["shared"]["cached"]["ttft"][1:]
    cu, cc = u["computed_tokens"][-1], c["computed_tokens"][-1]
    tu, tc = statistics.mean(su), statistics.mean(sc)
    v = worst(direction(cu / cc, clear=2), direction(tu / tc, clear=1.2))
    s = d["sizes"]
    return Verdict(v, f"the last agent round computes {cu:.0f} prompt tokens without the cache "
                   f"vs {cc:.0f} with it ({pct(cc / cu)}), TTFT {ms(u['ttft'][-1])} vs "
                   f"{ms(c['ttft'][-1])}; {s['shared_requests'] - 1} requests sharing a "
                   f"{s['system_len']}-token system prompt start in {ms(tu)} vs {ms(tc)} on "
                   f"average {_clock(d['clock'])}", measured=f"{cu:.0f} vs {cc:.0f} tokens",
                   points=(("last round, no cache", cu), ("last round, prefix cache", cc)),
                   unit="prompt tokens computed", clock=COUNTS)


def ch07_tool_loop(d: dict) -> Verdict:
    u, s = d["agent"]["uncached"], d["sizes"]
    rounds, total, first = len(u["prompt_tokens"]), sum(u["computed_tokens"]), u["computed_tokens"][0]
    v = direction(total / first, clear=2) if rounds >= 2 else FAILS
    return Verdict(v, f"one task becomes {rounds} model calls ({s['tool_calls']} tool results "
                   f"fed back); without a prefix cache they compute {total:.0f} prompt tokens "
                   f"per task, {x(total / first)} the first call's {first:.0f}; the last call's "
                   f"prompt is {x(u['prompt_tokens'][-1] / u['prompt_tokens'][0])} the first's "
                   "(token counts)", measured=f"{x(total / first)} the tokens of one call",
                   points=tuple((f"call {k}", t) for k, t in enumerate(u["computed_tokens"])),
                   unit="prompt tokens computed per call (no cache)", clock=COUNTS)


# --- chapter 8 ------------------------------------------------------------------------------
def _repeated(d: dict) -> bool:
    """Did chapter 8 repeat its runs (wall clock)? Then its judges read the medians."""
    sp = d.get("first_visible_spread")
    return bool(sp) and sp["chunked"]["n"] > 1


def ch08_input_check(d: dict) -> Verdict:
    t_in, t_ans = d["input_check_s"], d["ttft_after_check_s"]
    if _repeated(d):
        t_in = d["input_check_spread"]["median"]
        t_ans = d["ttft_after_check_spread"]["median"]
    v = direction((t_in + t_ans) / t_ans, clear=1.25)
    return Verdict(v, f"the input check runs before the answer starts: {ms(t_in)} of a "
                   f"{ms(t_in + t_ans)} wait for the first token ({pct(t_in / (t_in + t_ans))}); "
                   f"without it the answer's TTFT is {ms(t_ans)}; model {d['model']} "
                   f"{_clock(d['clock'])}", measured=f"+{ms(t_in)} TTFT",
                   points=(("input check", t_in * 1e3), ("answer's own TTFT", t_ans * 1e3)),
                   unit="ms before the first token", clock=d["clock"],
                   warning=wall_warning(d))


def ch08_output_check(d: dict) -> Verdict:
    fv, s = d["first_visible"], d["sizes"]
    if _repeated(d):
        fv = {p: v["median"] for p, v in d["first_visible_spread"].items()}
    st, ch, bu = fv["streamed"], fv["chunked"], fv["buffered"]
    recovered = (bu - ch) / (bu - st) if bu > st else 0.0
    v_rec = HOLDS if recovered >= 0.5 else HOLDS_SMALLER if recovered > 0.1 else FAILS
    v = worst(direction(bu / st, clear=2), v_rec)
    return Verdict(v, f"first visible word: streamed {ms(st)}, checked every "
                   f"{s['check_every']} tokens {ms(ch)}, checked once at the end {ms(bu)} "
                   f"({x(bu / st)} later than streaming, for a {s['max_tokens']}-token answer); "
                   f"checking in chunks wins back {pct(recovered)} of that delay; model "
                   f"{d['model']} {_clock(d['clock'])}", measured=f"{x(bu / st)} later when buffered",
                   points=(("streamed", st * 1e3), ("chunked", ch * 1e3), ("buffered", bu * 1e3)),
                   unit="ms to the first visible word", clock=d["clock"],
                   warning=wall_warning(d))


# --- chapter 9 ------------------------------------------------------------------------------
def ch09_kernel(d: dict) -> Verdict:
    rows = d["rows"]
    sp = [r["speedup"] for r in rows]
    med, wins, warning = statistics.median(sp), sum(s > 1 for s in sp), wall_warning(d)
    every = HOLDS if wins == len(sp) else HOLDS_SMALLER if 2 * wins > len(sp) else FAILS
    v = worst(direction(med, clear=1.2), every)
    slower = ", ".join(f"{r['batch']}x{r['context']} {x(r['speedup'])}" for r in rows
                       if r["speedup"] <= 1)
    if warning and 0.8 < med < 1.25:        # a busy machine's noise is as big as the effect
        v = UNMEASURABLE
    gpu = "" if d["gpu"]["recorded"] else "; no GPU kernel numbers recorded (CPU only)"
    return Verdict(v, f"numba reading the paged K/V in place vs torch gathering it first: "
                   f"median {x(med)} faster over {len(sp)} shapes ({min(sp):.2f}-{max(sp):.2f}x; "
                   f"faster in {wins} of {len(sp)}"
                   + (f"; slower at batch x context {slower}" if slower else "")
                   + f"){gpu} {_clock(d['clock'])}",
                   measured=f"{x(med)} (median)", warning=warning,
                   points=tuple((f"{r['batch']}x{r['context']}", r["speedup"]) for r in rows),
                   unit="speedup, numba / reference (x), per batch x context",
                   clock=d["clock"])


# --- chapter 10 -----------------------------------------------------------------------------
def ch10_tensor_parallel(d: dict) -> Verdict:
    m = list(d["models"])[-1]
    one, many = d["models"][m][0], d["models"][m][-1]
    gain = one["step_ms"] / many["step_ms"]
    text = (f"on {d['gpu']}: {m} decode step {one['step_ms']:.1f} -> {many['step_ms']:.1f} ms "
            f"on tp={many['tp']} ({x(gain)} faster, not {many['tp']}x; all-reduce "
            f"{many['comm_ms']:.1f} ms per step), weights per GPU {one['weights_gb']:.0f} -> "
            f"{many['weights_gb']:.0f} GB")
    if "simulated" in d["clock"]:
        v = UNMEASURABLE
        reason = (f"this lab runs on one device (0 multi-GPU runs measured); the roofline cost "
                  f"model, a simulation and not a measurement, predicts {text}")
    else:                                   # a measured multi-GPU run, if one is ever added
        v = HOLDS if 1 < gain < many["tp"] else FAILS
        reason = f"measured {text}"
    return Verdict(v, reason, measured=f"{x(gain)} on {many['tp']} GPUs (simulated)",
                   points=(("GPUs", many["tp"]), ("decode speedup (simulated)", gain)),
                   unit=f"{m}, tp={many['tp']} vs tp=1", clock=d["clock"])
