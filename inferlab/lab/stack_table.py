"""Two serving stacks side by side, as a table: the rows ``inferlab bench serve`` prints and
BENCHMARKS.md renders (``inferlab results render``) from the same result file."""
from __future__ import annotations

import statistics

from .stack_bench import LATENCIES, PERCENTILES

COLUMNS = [(f"{m.upper()} {p} ms", f"{p}_{m}_ms") for m in LATENCIES for p in PERCENTILES] + [
    ("out tok/s", "output_throughput"), ("req/s", "request_throughput")]
HEADER = ["rate", "server", *(h for h, _ in COLUMNS), "done"]


def cell(s: dict | None, digits: int = 1) -> str:
    """'12.3 (11.0-13.1)': a median and its range over the repeats."""
    if not s:
        return "-"
    f = f"{{:.{digits}f}}"
    if s["n"] < 2:
        return f.format(s["median"])
    return f"{f.format(s['median'])} ({f.format(s['lo'])}-{f.format(s['hi'])})"


def rows(result: dict) -> list[list[str]]:
    """One row per rate and server: the COLUMNS' medians (ranges), then requests completed
    (the fewest over the repeats) of those sent."""
    sent = result["config"]["num_prompts"]
    out = []
    for rate, by_server in result["summary"].items():
        for name, s in by_server.items():
            done = s.get("completed", {}).get("lo")
            out.append([f"{rate} req/s", name, *(cell(s.get(k)) for _, k in COLUMNS),
                        f"{done:.0f}/{sent}" if done is not None else "-"])
    return out


def markdown(result: dict) -> str:
    """The same rows as a Markdown table."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows(result)])


TIMING_HEADER = ["rate", "TTFT p50 ms (client)", "server: parse", "to driver", "queued",
                 "first step", "hand-off + write", "TPOT p50 ms (client)",
                 "server: forward", "rest of step", "between steps", "delivery", "batch"]
SLOWEST_HEADER = ["rate", "TTFT p99 ms (client)", "slowest: parse", "to driver", "queued",
                  "first step", "hand-off + write", "server's TTFT"]


def _timed(result: dict, rate: str) -> list[dict]:
    return [r["server_timing"] for r in result["runs"] if r["rate"] == rate
            and r["server"] == "inferlab" and r.get("server_timing", {}).get("requests")]


def _med(ts: list[dict], key: str, *parts: str) -> str:
    return "{:.1f}".format(statistics.median(sum(t[key][p] for p in parts) for t in ts))


def timing_rows(result: dict) -> list[list[str]]:
    """Where inferlab's time went at each rate (``measure_stacks(timing=True)``): the client's
    TTFT and TPOT p50 beside the server's parts, each the median over requests, then over the
    repeats; what the parts do not reach is the client's side."""
    out = []
    for rate, by_server in result["summary"].items():
        ts = _timed(result, rate)
        if not ts:
            continue
        s = by_server["inferlab"]
        out.append([f"{rate} req/s", cell(s.get("p50_ttft_ms")), _med(ts, "ttft_ms", "parse"),
                    _med(ts, "ttft_ms", "to_driver"), _med(ts, "ttft_ms", "queued"),
                    _med(ts, "ttft_ms", "first_step"),
                    _med(ts, "ttft_ms", "flush", "handoff", "write"),
                    cell(s.get("p50_tpot_ms")), _med(ts, "per_token_ms", "forward"),
                    _med(ts, "per_token_ms", "step_other"),
                    _med(ts, "per_token_ms", "between_steps"),
                    _med(ts, "per_token_ms", "delivery_drift"),
                    "{:g}".format(statistics.median(t["batch_p50"] for t in ts))])
    return out


def slowest_rows(result: dict) -> list[list[str]]:
    """What each rate's slowest first token was made of (each run's slowest request; the
    median over the repeats), beside the client's TTFT p99."""
    out = []
    for rate, by_server in result["summary"].items():
        ts = [t for t in _timed(result, rate) if "slowest_ttft_ms" in t]
        if not ts:
            continue
        k = "slowest_ttft_ms"
        out.append([f"{rate} req/s", cell(by_server["inferlab"].get("p99_ttft_ms")),
                    _med(ts, k, "parse"), _med(ts, k, "to_driver"), _med(ts, k, "queued"),
                    _med(ts, k, "first_step"), _med(ts, k, "flush", "handoff", "write"),
                    _med(ts, k, "total")])
    return out


GOAL = (("TTFT p50", "p50_ttft_ms", -1), ("TTFT p99", "p99_ttft_ms", -1),
        ("TPOT p50", "p50_tpot_ms", -1), ("TPOT p99", "p99_tpot_ms", -1),
        ("output tok/s", "output_throughput", 1))     # -1: lower is better


def gaps(result: dict, ours: str = "inferlab", theirs: str = "vLLM") -> dict:
    """Per rate, where ``ours`` is behind ``theirs`` on the serving goal (TTFT and TPOT p50
    and p99 no higher, output tok/s no lower; medians over the repeats): [(metric, how far
    behind in %, whether the two ranges overlap)]; an empty list: not behind at that rate."""
    out = {}
    for rate, by in result["summary"].items():
        if ours not in by or theirs not in by:
            continue
        behind = []
        for name, key, sign in GOAL:
            a, b = by[ours].get(key), by[theirs].get(key)
            if not a or not b or b["median"] <= 0 or sign * (a["median"] - b["median"]) >= 0:
                continue
            overlap = a["lo"] <= b["hi"] and b["lo"] <= a["hi"]
            behind.append((name, abs(a["median"] / b["median"] - 1) * 100, overlap))
        out[rate] = behind
    return out


def gaps_sentence(result: dict, theirs: str = "vLLM") -> str:
    """The serving goal rate by rate: 'at 1 and 4 req/s TTFT and TPOT p50 and p99 at or
    below vLLM's and output tok/s at or above; at 2 req/s behind on TTFT p99 (+7.8%)'."""
    g = gaps(result, theirs=theirs)
    name = lambda r: "all at once" if r == "inf" else f"{r} req/s"   # noqa: E731
    ahead = [name(r) for r, b in g.items() if not b]
    listed = ", ".join(ahead[:-1]) + (" and " if len(ahead) > 1 else "") + ahead[-1] if ahead \
        else ""
    parts = [f"at {listed}: TTFT and TPOT p50 and p99 at or below {theirs}'s, "
             "output tok/s at or above"] if ahead else []
    for r, b in g.items():
        if b:
            parts.append(f"{name(r)}: behind on " + ", ".join(
                f"{m} by {p:.1f}%{' (the ranges overlap)' if o else ''}" for m, p, o in b))
    return "; ".join(parts)
