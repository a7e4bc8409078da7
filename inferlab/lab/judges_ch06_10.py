"""How the claims of chapters 6 to 10 are judged (chapters 1-5: ``judges``; the same rules:
one function per claim, measured data in, a Verdict with its numbers out)."""
from __future__ import annotations

import statistics

from . import protocol
from .judges import COUNTS, _clock
from .verdicts import (FAILS, HOLDS, HOLDS_SMALLER, UNMEASURABLE, Verdict, direction, ms, pct,
                       wall_warning, worst, x)


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
def _wall08(d: dict) -> str:
    """Chapter 8's wall-clock medians, when it ran them, as a clause of a reason."""
    if "wall_first_visible" not in d:
        return ""
    sp = {p: protocol.Spread(**v) for p, v in d["wall_first_visible"].items()}
    return (f"; on this machine's wall clock ({d['wall']['model']}): first visible word "
            + ", ".join(f"{p} {sp[p].ms(0)}" for p in ("streamed", "chunked", "buffered")))


def ch08_input_check(d: dict) -> Verdict:
    t_in, t_ans = d["input_check_s"], d["ttft_after_check_s"]
    v = direction((t_in + t_ans) / t_ans, clear=1.25)
    wall = ""
    if "wall_input_check" in d:
        wall = (f"; wall clock ({d['wall']['model']}): input check "
                f"{protocol.Spread(**d['wall_input_check']).ms(0)}")
    return Verdict(v, f"the input check runs before the answer starts: {ms(t_in)} of a "
                   f"{ms(t_in + t_ans)} wait for the first token ({pct(t_in / (t_in + t_ans))}); "
                   f"without it the answer's TTFT is {ms(t_ans)}; model {d['model']} "
                   f"{_clock(d['clock'])}{wall}", measured=f"+{ms(t_in)} TTFT",
                   points=(("input check", t_in * 1e3), ("answer's own TTFT", t_ans * 1e3)),
                   unit="ms before the first token", clock=d["clock"],
                   warning=wall_warning(d))


def ch08_output_check(d: dict) -> Verdict:
    fv, s, runs = d["first_visible"], d["sizes"], d["runs"]
    st, ch, bu = fv["streamed"], fv["chunked"], fv["buffered"]
    recovered = (bu - ch) / (bu - st) if bu > st else 0.0
    v_rec = HOLDS if recovered >= 0.5 else HOLDS_SMALLER if recovered > 0.1 else FAILS
    v = worst(direction(bu / st, clear=2), v_rec) if st < ch < bu else FAILS
    return Verdict(v, f"three runs of the same message: first visible word streamed "
                   f"{ms(st)}, checked every {s['check_every']} tokens {ms(ch)} "
                   f"({runs['chunked']['num_checks']} checks), checked once at the end "
                   f"{ms(bu)} ({x(bu / st)} later than streaming, for a {s['max_tokens']}-token "
                   f"answer); checking in chunks wins back {pct(recovered)} of that delay; "
                   f"model {d['model']} {_clock(d['clock'])}{_wall08(d)}",
                   measured=f"{x(bu / st)} later when buffered",
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


def ch09_memory_bound(d: dict) -> Verdict:
    """Memory-bound where decode attention over K/V too large for the caches reads it at a
    large share of the machine's measured memory bandwidth; the reason says why not, when not."""
    from .chapters.ch09_kernels import MEMORY_BOUND_SHARE, bound_text, from_memory
    m = d["machine"]
    shares = [r["share"] for r in from_memory(d)]
    share = max(shares, default=0.0)
    v = HOLDS if share >= MEMORY_BOUND_SHARE else FAILS
    warning = m.get("warning") or wall_warning(d)
    if not shares or (warning and 0.5 * MEMORY_BOUND_SHARE < share < 1.5 * MEMORY_BOUND_SHARE):
        v = UNMEASURABLE            # nothing read from memory, or a busy machine's noise
    return Verdict(v, bound_text(d), measured=f"at most {share:.0%} of memory bandwidth",
                   points=(("memory bandwidth", m["read_gbs"]),
                           *((r["label"], r["gbs"]) for r in from_memory(d))),
                   unit="K/V read from memory, GB/s", clock=d["clock"], warning=warning)


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
