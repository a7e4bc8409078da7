"""How the claims of chapter 13 (sampling, answer length, the KV cache's trade, the network)
are judged: one function per claim, the chapter's measured data in, a Verdict with its
numbers out (the same rules as ``judges``)."""
from __future__ import annotations

from .judges import COUNTS, _clock
from .verdicts import FAILS, HOLDS, Verdict, direction, ms, pct, worst, x


def ch13_sampling(d: dict) -> Verdict:
    a, dist, dr = d["answers"], d["distribution"], d["draws"]
    nuc = dist["nucleus"]
    temps = sorted(nuc, key=float)
    widens = all(nuc[t0] <= nuc[t1] for t0, t1 in zip(temps, temps[1:]))
    ok = a["distinct"] >= 2 and a["repeatable"] and a["greedy_same"] and widens
    v = HOLDS if ok else FAILS
    top = dist["top"][0]
    lo, hi = temps[0], temps[-1]
    return Verdict(v, f"{a['seeds']} seeds at temperature {a['temperature']} gave "
                   f"{a['distinct']} different answers to the same prompt; seed 0 again "
                   f"{'repeated' if a['repeatable'] else 'did not repeat'} its answer and greedy "
                   f"decoding twice gave {'the same' if a['greedy_same'] else 'different'} text. "
                   f"The next-token distribution ({d['model']}): {top['text']!r} has p = "
                   f"{pct(top['p'][lo])} at T={lo} and {pct(top['p'][hi])} at T={hi}; top-p "
                   f"{dist['top_p']} keeps {nuc[lo]} vs {nuc[hi]} of {dist['vocab']} tokens; "
                   f"{dr['n']} seeded draws hit the {len(dr['top'])} likeliest tokens "
                   f"{pct(dr['top_drawn'])} of the time (their p: {pct(dr['top_p'])}) (counts)",
                   measured=f"{a['distinct']} of {a['seeds']} answers differ",
                   points=tuple((f"T={t}", nuc[t]) for t in temps),
                   unit=f"tokens kept by top-p {dist['top_p']}", clock=COUNTS)


def ch13_decode_length(d: dict) -> Verdict:
    rows = d["decode"]
    a, b = rows[0], rows[-1]
    one_each = all(r["steps"] == r["output_tokens"] == r["max_tokens"] for r in rows)
    r = b["decode"] / a["decode"]
    n = (b["max_tokens"] - 1) / (a["max_tokens"] - 1)
    v = direction(r, clear=0.5 * n) if one_each else FAILS
    reason = (f"answers of {a['max_tokens']} -> {b['max_tokens']} tokens took "
              f"{a['steps']} -> {b['steps']} engine steps (one per token, the first from the "
              f"prefill step); decode time {ms(a['decode'])} -> {ms(b['decode'])} ({x(r)} for "
              f"{x(n)} the decode steps), E2E {ms(a['e2e'])} -> {ms(b['e2e'])} "
              f"{_clock(d['clock_sim'])}")
    if "decode_wall" in d:
        w = d["decode_wall"]["rows"]
        reason += (f"; wall clock ({d['decode_wall']['model']}): E2E {ms(w[0]['e2e'], 0)} at "
                   f"{w[0]['max_tokens']} tokens -> {ms(w[-1]['e2e'], 0)} at "
                   f"{w[-1]['max_tokens']}")
    return Verdict(v, reason, measured=f"{b['steps']} steps, {x(b['e2e'] / a['e2e'])} E2E",
                   points=tuple((f"{r['max_tokens']} tokens", r["e2e"] * 1e3) for r in rows),
                   unit="ms to the whole answer", clock=d["clock_sim"],
                   warning=(d.get("decode_wall") or {}).get("warning"))


def ch13_kv_tradeoff(d: dict) -> Verdict:
    s = d["kv"]["saving"]
    w, wo = s["with"], s["without"]
    rt = wo["tokens"] / w["tokens"]
    same = s["same_tokens"] == s["answer"]
    mem = {r["model"]: r for r in d["kv"]["memory"]}
    l8, l70 = mem["llama-3-8b"], mem["llama-3-70b"]
    v = worst(direction(rt, clear=2), direction(wo["time"] / w["time"], clear=1.2)) \
        if same else FAILS
    return Verdict(v, f"a {s['answer']}-token answer to a {s['prompt']}-token prompt pushes "
                   f"{w['tokens']:,} tokens through the model with the KV cache and "
                   f"{wo['tokens']:,} without it ({x(rt)}), {ms(w['time'], 0)} vs "
                   f"{ms(wo['time'], 0)} {_clock(d['clock_sim'])}; {s['same_tokens']} of "
                   f"{s['answer']} answer tokens agree. The price, in bf16: "
                   f"{l8['kv_bytes_per_token'] // 1024} KiB per token for llama-3-8b "
                   f"({l8['per_4k_mb']:.0f} MiB per 4,096-token conversation; "
                   f"{l8['tokens_on_80gb']:,} tokens fit beside its weights on an 80 GB GPU), "
                   f"{l70['kv_bytes_per_token'] // 1024} KiB for llama-3-70b (shapes from "
                   "inferlab.core.shapes)",
                   measured=f"{x(rt)} tokens without the cache",
                   points=(("with KV cache", w["tokens"]), ("without", wo["tokens"])),
                   unit="tokens pushed through the model", clock=COUNTS)


def ch13_network(d: dict) -> Verdict:
    warm = [r for r in d["network"] if not r["new_connection"]]
    short = min(r["prompt"] for r in warm)
    rows = [r for r in warm if r["prompt"] == short]
    far = max(rows, key=lambda r: r["rtt"])
    cold = next(r for r in d["network"] if r["new_connection"] and r["prompt"] == short
                and r["rtt"] == far["rtt"])
    longest = max(warm, key=lambda r: (r["prompt"], r["rtt"]))
    v = direction(far["perceived"] / far["server"], clear=1.5)
    return Verdict(v, f"a {short}-token prompt is served in {ms(far['server'])} "
                   f"{_clock(d['clock_sim'])}; a simulated client {far['rtt'] * 1e3:.0f} ms of "
                   f"round trip away sees its first token after {ms(far['perceived'])} "
                   f"({pct(1 - far['server'] / far['perceived'])} of it network), "
                   f"{ms(cold['perceived'])} on a new connection (TCP and TLS handshakes first); "
                   f"even a {longest['prompt']}-token prompt ({ms(longest['server'])} on the "
                   f"server) is seen after {ms(longest['perceived'])}. The round trips are "
                   "added delays, not a measured network",
                   measured=f"{x(far['perceived'] / far['server'])} the server's TTFT",
                   points=tuple((f"{r['rtt'] * 1e3:.0f} ms RTT", r["perceived"] * 1e3)
                                for r in rows),
                   unit=f"perceived TTFT, {short}-token prompt (ms)", clock=d["clock_sim"])
