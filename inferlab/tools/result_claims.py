"""The report card's renderings (docs/results/claims.json, judged on the chapters' records):
the whole table, README's one-line summary, and BENCHMARKS' headline effects."""
from __future__ import annotations

from inferlab.lab.report import markdown_rows
from inferlab.tools.result_format import caption, machine, short

# BENCHMARKS' current table: the effects a reader compares engines by, in this order
HEADLINES = (("05-throughput", "continuous vs static, throughput"),
             ("05-response-time", "continuous vs static, response time"),
             ("04-kv-waste", "contiguous vs paged KV, memory wasted"),
             ("04-paged-throughput", "paged KV, tokens per step"),
             ("07-prefix-reuse", "prefix caching, tokens computed"),
             ("06-chunked-prefill", "chunked prefill"),
             ("09-kernel", "the paged-attention kernel"),
             ("09-memory-bound", "decode step at batch 1"))


def _mode(res: dict) -> str:
    return ("smoke run" if res.get("smoke") else
            "the chapters' recorded full runs" if res.get("from") else "full run")


def _when(res: dict) -> str:
    """'<CPU>, <day>', or '<CPU>, <first day> to <last day>' for runs over several days."""
    first, last = (res.get("first_date") or "")[:10], (res.get("date") or "")[:10]
    return f"{machine(res)}, {first} to {last}" if first and first != last else short(res)


def claims_table(res: dict, file: str) -> str:
    """README's report card from ``inferlab claims --json``: a caption with the machine and
    the verdict counts, then one row per claim (its warning, if any, after the reason)."""
    tally = "; ".join(f"{n} {v}" for v, n in res.get("verdicts", {}).items() if n)
    kinds = "; ".join(f"{n} {k}" for k, n in res.get("rests_on", {}).items() if n)
    mode = _mode(res)
    return "\n".join([f"{mode[0].upper()}{mode[1:]}, {caption(res, file)}: {tally} (rests "
                      f"on: {kinds}).", "", *markdown_rows(res["claims"])])


def claims_summary(res: dict, file: str) -> str:
    """README's line: how many claims, what they rest on, the verdicts, where and when."""
    tally = "; ".join(f"{n} {v}" for v, n in res.get("verdicts", {}).items() if n)
    kinds = ", ".join(f"{n} {k}" for k, n in res.get("rests_on", {}).items() if n)
    return f"{len(res['claims'])} claims ({kinds}): {tally} ({_mode(res)}, {_when(res)}; {file})"


def claims_headlines(res: dict, file: str) -> str:
    """BENCHMARKS' cell: each headline effect's number and verdict, from the report card."""
    rows = {r["id"]: r for r in res["claims"]}
    parts = [f"{what}: {rows[cid]['measured']} ({rows[cid]['verdict']}; {cid})"
             for cid, what in HEADLINES if cid in rows]
    return "; ".join(parts) + f" ({_mode(res)}, {_when(res)}; {file})"
