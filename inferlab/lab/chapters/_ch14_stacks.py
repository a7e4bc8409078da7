"""Chapter 14, the same model on two serving stacks: measured by one client, judged on what
differs and by how much against the run-to-run spread.

    data = measure(smoke=False)          # both stacks now, under `vllm bench serve`
    data = measure(smoke=True)           # the recorded run: docs/results/stacks.json
    judge_stacks(data)                   # a Verdict

The measuring is ``inferlab.lab.stack_bench.measure_stacks`` (``inferlab bench serve``):
``inferlab serve`` and ``vllm serve`` on the same weights, vLLM's own benchmark client against
each in turn, A B A B, and the same greedy prompts to both. A full run measures it now
(``SIZES``: one rate, all at once, a few minutes with vLLM's start); a smoke run (CI,
Binder: no vLLM to start) judges the run the last full run recorded (``RECORDED``; before
one, ``inferlab bench serve``'s) and says so: "recorded on <CPU>, <date>".

The judge asks two things of the measurement. The same model: every greedy answer equal,
word for word, on both stacks. Feels different: some latency or throughput differs between
the stacks by at least ``FEEL`` (a fifth: less is not a difference a user notices), and the
gap between the two medians is at least ``MARGIN`` times the run-to-run spread (the wider of
the two stacks' ranges over their repeats), so that the machine's own noise cannot make it.
The same stack twice (``measure_stacks(against="inferlab")``) removes the effect: the
verdict must then be "does not hold" (tests/test_claims_stacks.py). A measurement taken while
other processes kept the CPUs busy (its busy-machine warning) is not judged on its times: the
verdict is "not measurable here", whichever way the times point.
"""
from __future__ import annotations

import json
import math
import os

from .. import measure_cache
from ..verdicts import (FAILS, HOLDS, UNMEASURABLE, Verdict, direction, worst, x)

FEEL = 1.2          # the smallest ratio between the stacks a user would notice
MARGIN = 2.0        # the gap between medians, in run-to-run spreads (the wider range)
CLEAR = 1.5         # a clear difference (holds); FEEL to CLEAR: holds, smaller
# what is compared (the client's p50 latencies and output throughput): key, name, unit
METRICS = (("p50_ttft_ms", "TTFT p50", "ms"), ("p50_tpot_ms", "TPOT p50", "ms"),
           ("p50_itl_ms", "ITL p50", "ms"), ("output_throughput", "throughput", "tok/s"))
# the live run: every request at once (no Poisson wait), a few repeats for the spread
SIZES = {False: dict(rates=(math.inf,), num_prompts=16, input_len=128, output_len=32,
                     repeats=3, greedy_prompts=4, greedy_tokens=32),
         True: dict(rates=(math.inf,), num_prompts=4, input_len=32, output_len=8,
                    repeats=3, greedy_prompts=1, greedy_tokens=8)}
# what a smoke run judges: the claim's last full run (written by it), else the run
# ``inferlab bench serve`` recorded before there was one
RECORDED = os.path.join("docs", "results", "stacks.json")
RECORDED_BENCH = os.path.join("docs", "results", "serve-xeon.json")
FULL_RUN = "make notebooks NB=14_your_own_traffic SMOKE=0 (the 14-stacks claim's full run)"


def recorded(path: str | None = None) -> dict:
    """The recorded run (the claim's last full run, or ``inferlab bench serve --out``) as
    the judge reads it."""
    from ..stack_bench import REPO
    tried = []
    for rel in ([path] if path else [RECORDED, RECORDED_BENCH]):
        try:
            with open(REPO / rel) as f:
                saved = json.load(f)
        except OSError as e:
            tried.append(f"{e.strerror}: {rel}")
            continue
        meta = {k: saved.get(k) for k in ("command", "date", "cpu", "cores", "load")}
        return {"source": "recorded", "recorded": meta, "path": rel, "result": saved["results"]}
    return {"unmeasurable": f"no recorded run to judge in this smoke run and 0 measured here "
                            f"({'; '.join(tried)}); a full run measures it"}


@measure_cache.shared
def measure(smoke: bool = False, against: str = "vLLM", **sizes) -> dict:
    """The stack claim's measurement: smoke, the recorded run (unless ``sizes`` or
    ``against`` ask for a live one); else both servers measured now with SIZES[False]
    (``sizes`` override it). vLLM's venv missing: not measurable, with the reason."""
    if smoke and not sizes and against == "vLLM":
        return recorded()
    from ...connect.front.machine import VllmServerError
    from ..stack_bench import measure_stacks
    cfg = {**SIZES[bool(smoke)], **sizes}
    try:
        res = measure_stacks(against=against, **cfg)
    except VllmServerError as e:
        return {"unmeasurable": f"2 stacks on the same weights need vLLM's CPU build: {e}"}
    if not smoke and not sizes and against == "vLLM":    # the claim's own full run: recorded
        from .. import protocol                          # for the smoke runs that follow
        from ..stack_bench import REPO
        protocol.write_result(REPO / RECORDED, FULL_RUN, res)
    return {"source": "measured now", "result": res}


def differences(res: dict) -> list[dict]:
    """Per rate and metric: both stacks' spreads, the ratio of their medians (>= 1) and the
    gap between the medians in run-to-run spreads (the wider of the two ranges)."""
    rows = []
    for rate, by in res["summary"].items():
        a, b = list(by)[:2]
        for key, name, unit in METRICS:
            sa, sb = by[a].get(key), by[b].get(key)
            if not sa or not sb or min(sa["median"], sb["median"]) <= 0:
                continue
            lo, hi = sorted((sa["median"], sb["median"]))
            noise = max(sa["hi"] - sa["lo"], sb["hi"] - sb["lo"])
            gap = hi - lo
            rows.append({"rate": rate, "key": key, "name": name, "unit": unit,
                         "stacks": (a, b), "a": sa, "b": sb, "ratio": hi / lo,
                         "noise": noise, "n": min(sa["n"], sb["n"]),
                         "margin": gap / noise if noise > 0 else math.inf if gap else 0.0})
    return rows


def rate_name(rate: str) -> str:
    return "all at once" if rate == "inf" else f"{rate} req/s"


def _value(s: dict, unit: str) -> str:
    return f"{s['median']:.0f} {unit}"


def _provenance(d: dict) -> str:
    res, c = d["result"], d["result"]["config"]
    work = (f"{c['num_prompts']} prompts x {c['input_len']} random tokens -> "
            f"{c['output_len']}, {c['repeats']} A B A B repeats, {res['client']}")
    if d.get("source") == "recorded":
        m = d["recorded"]
        return (f"recorded on {m['cpu']}, {m['date'][:10]}, not measured in this run "
                f"({d['path']}: `{m['command']}`, {m['cores']} cores, load {m['load']:.2f}; "
                f"{work})")
    return f"measured now ({work})"


def judge_stacks(d: dict) -> Verdict:
    """The same greedy tokens on both stacks, and a difference a user would notice that the
    run-to-run spread cannot explain (see the module's docstring)."""
    if "unmeasurable" in d:
        return Verdict(UNMEASURABLE, d["unmeasurable"], measured="not measured",
                       points=(("stacks measured", 0),), unit="stacks", clock="none")
    res = d["result"]
    g, rows = res["greedy"], differences(res)
    a, b = rows[0]["stacks"]
    same = g["agree"] == g["of"] and g["of"] > 0
    tokens = (f"greedy answers agree word for word on {g['agree']} of {g['of']} prompts "
              f"({g['max_tokens']} tokens each)")
    n = min(r["n"] for r in rows)
    if n < 2:
        return Verdict(FAILS, f"{tokens}; {n} repeat per stack gives no run-to-run spread to "
                       "judge a difference against (at least 2 needed)", measured="no spread",
                       points=((a, 0), (b, 0)), unit="repeats", clock="wall clock")
    felt = [r for r in rows if r["ratio"] >= FEEL and r["margin"] >= MARGIN]
    best = max(felt, key=lambda r: r["ratio"]) if felt else max(rows, key=lambda r: r["margin"])
    v = worst(HOLDS if same else FAILS,
              direction(best["ratio"], clear=CLEAR, no_effect=FEEL) if felt else FAILS)
    busy = res.get("warning")
    if busy and same:                   # the times are the machine's noise, not the stacks'
        v = UNMEASURABLE
    at = [r for r in rows if r["rate"] == best["rate"]]
    side = "; ".join(f"{r['name']} {_value(r['a'], r['unit'])} vs {_value(r['b'], r['unit'])}"
                     for r in at)
    how = (f"{best['name']} {rate_name(best['rate'])} differs {x(best['ratio'])}, "
           f"{best['margin']:.1f}x the run-to-run spread ({best['noise']:.1f} {best['unit']}, "
           f"the wider range over {n} repeats)")
    if felt:
        judged = (f"the clearest difference: {how}; {len(felt)} of {len(rows)} metric-rate "
                  f"pairs differ by {FEEL:.1f}x or more and by {MARGIN:.0f}x their spread")
    else:
        judged = (f"no metric differs by {FEEL:.1f}x or more and by {MARGIN:.0f}x its "
                  f"run-to-run spread (0 of {len(rows)} metric-rate pairs); the largest gap: "
                  f"{how}")
    reason = (f"the same weights behind {a} and {b}, the same client: {tokens}; "
              f"{rate_name(best['rate'])}, {a} vs {b}: {side}; {judged}; {_provenance(d)}")
    if busy and same:
        reason = ("other processes were busy on this machine during the runs, so these "
                  "times cannot tell the stacks apart (run it again on a quiet machine): "
                  + reason)
    tag = " (recorded)" if d.get("source") == "recorded" else ""
    return Verdict(v, reason, measured=f"{x(best['ratio'])} {best['name']}{tag}",
                   points=((a, best["a"]["median"]), (b, best["b"]["median"])),
                   unit=f"{best['name']} ({best['unit']}), {rate_name(best['rate'])}",
                   clock="wall clock (vllm bench serve, the client)",
                   warning=res.get("warning"), counts_only=not same)


def stacks_lines(d: dict) -> list[str]:
    """The measurement as the chapter prints it: the side-by-side table, greedy agreement,
    where it comes from, and the busy-machine warning if any."""
    if "unmeasurable" in d:
        return [d["unmeasurable"]]
    from ..stack_table import HEADER, rows
    res = d["result"]
    table = [HEADER] + rows(res)
    widths = [max(len(r[i]) for r in table) for i in range(len(HEADER))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table]
    g = res["greedy"]
    lines.append(f"greedy answers (temperature 0, {g['max_tokens']} tokens) agree on "
                 f"{g['agree']} of {g['of']} prompts; median (range) over the repeats; "
                 f"{_provenance(d)}")
    return lines + ([res["warning"]] if res.get("warning") else [])
