"""How each claim is judged: one function per claim, from the chapter's measured data to a
Verdict whose reason carries the numbers. The thresholds are the only judgement calls: each
judge states its own (``clear=``), and the helpers in ``verdicts`` (``direction``,
``against_published``, ``worst``) apply them the same way everywhere.

Chapters 6-10 are judged in ``judges_ch06_10``, chapter 13 in ``judges_ch13``.

Judges read the deterministic part of a chapter's data (token counts, simulated clocks)
first; a chapter's wall-clock columns, when present, are added to the reason with their
spread and busy-machine warning.
"""
from __future__ import annotations

import statistics

from . import protocol
from .verdicts import (FAILS, HOLDS, HOLDS_SMALLER, Verdict, against_published, direction,
                       ideal_batching_gain, ms, pct, wall_warning, worst, x)


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
    t_off = sum(r["computed_tokens"] for r in off)
    t_on = sum(r["computed_tokens"] for r in on)
    v = direction(t_off / t_on, clear=2) if redo and grows else FAILS
    reason = (f"without a cache every turn computes its whole prompt, which grows turn by turn "
              f"({off[0]['computed_tokens']} tokens at turn 1, {last['computed_tokens']} at turn "
              f"{last['turn']}): {t_off:,} tokens over {len(off)} turns; with prefix caching "
              f"{t_on:,} ({pct(t_on / t_off)}), and turn {last['turn']} finds "
              f"{last['prompt_tokens'] - last_on['computed_tokens']} of its "
              f"{last['prompt_tokens']} tokens in the cache and computes "
              f"{last_on['computed_tokens']} (token counts, SmolLM2's tokenizer)")
    if "wall" in d:
        sp = {a: protocol.Spread(**s) for a, s in d["wall"]["later_turns_ttft"].items()}
        reason += (f"; wall clock, TTFT summed over turns 2+: {sp['uncached'].ms()} uncached "
                   f"vs {sp['cached'].ms()} cached")
    return Verdict(v, reason, measured=f"{t_off:,} vs {t_on:,} tokens, {len(off)} turns",
                   points=(("computed, no cache", t_off), ("computed, prefix cache", t_on)),
                   unit=f"prompt tokens computed over {len(off)} turns", clock=COUNTS,
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
    if "step_fit" in d and min(d["step_fit"]["fits"][1]["intercept"],
                               d["step_fit"]["fits"][1]["slope"]) > 0:
        f = d["step_fit"]["fits"][1]
        reason += (f"; on one thread a prefill step here costs {ms(f['intercept'], 0)} fixed "
                   f"(reading {f['weight_bytes'] / 1e6:.0f} MB of weights once, launching 30 "
                   f"layers) + {ms(f['slope'])} per prompt token, so a short prompt costs "
                   "about one step")
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


def ch04_paged_throughput(d: dict) -> Verdict:
    c, p = d["layouts"]["contiguous"], d["layouts"]["paged"]
    r = p["throughput"] / c["throughput"]
    n, same = d["num_requests"], d["same_outputs"]
    fits = p["max_running"] > c["max_running"]
    v = against_published(r, 2.0, close=1.0) if fits and same == n else FAILS
    return Verdict(v, f"2-4x claimed; {x(r)} here {_clock(d['clock_sim'])}: the same "
                   f"{d['kv_slots']:,} KV slots hold at most {c['max_running']} contiguous "
                   f"reservations of {d['max_model_len']} tokens, so the other requests queue "
                   f"(median wait {ms(c['queue_median'], 0)}), against up to "
                   f"{p['max_running']} paged requests ({c['mean_running']:.1f} vs "
                   f"{p['mean_running']:.1f} running on average, {p['preemptions']} "
                   f"preemptions); {c['throughput']:.0f} vs {p['throughput']:.0f} output tok/s; "
                   f"{same} of {n} requests gave the same tokens under both layouts. The gain "
                   f"is capped by how many more requests fit ({x(p['mean_running'] / c['mean_running'])}"
                   " on average) and shrinks because a bigger batch makes each step longer",
                   measured=f"{x(r)} tok/s, {c['max_running']} vs {p['max_running']} at once",
                   points=(("contiguous", c["throughput"]), ("paged", p["throughput"])),
                   unit="output tokens/s at the same KV memory", clock=d["clock_sim"])


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
    c, s = sim["continuous"], sim["static"]
    r = s["e2e_median"] / c["e2e_median"]
    v = direction(r, clear=1.2)
    return Verdict(v, f"median time to a finished answer {ms(c['e2e_median'], 0)} continuous "
                   f"vs {ms(s['e2e_median'], 0)} static ({x(r)} lower), p90 "
                   f"{ms(c['e2e_p90'], 0)} vs {ms(s['e2e_p90'], 0)}; median TTFT "
                   f"{ms(c['ttft_median'], 0)} vs {ms(s['ttft_median'], 0)}, p90 "
                   f"{ms(c['ttft_p90'], 0)} vs {ms(s['ttft_p90'], 0)} {_clock(d['clock_sim'])}",
                   measured=f"{x(r)} lower median E2E", unit="E2E latency (ms)",
                   points=(("static, median", s["e2e_median"] * 1e3),
                           ("continuous, median", c["e2e_median"] * 1e3),
                           ("static, p90", s["e2e_p90"] * 1e3),
                           ("continuous, p90", c["e2e_p90"] * 1e3)), clock=d["clock_sim"])
