"""Two serving stacks side by side, as a table: the rows ``inferlab bench serve`` prints and
BENCHMARKS.md renders (``inferlab results render``) from the same result file."""
from __future__ import annotations

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
