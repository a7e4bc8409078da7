"""How every rendered table names where its numbers come from: the CPU, the date, the load
and the command (``caption``), or the CPU and the day after an inline number (``short``); and
the one error a result file or a marked block raises."""
from __future__ import annotations

import datetime

from inferlab.errors import InferlabError


class ResultsError(InferlabError, ValueError):
    """A marked block names no known table, its result file is missing or unreadable, or its
    markers do not pair up; the message says which and how to make the file."""


def day_time(value: str) -> str:
    """'2026-12-02 06:40' as written, or an ISO timestamp with its zone as '... UTC'."""
    try:
        d = datetime.datetime.fromisoformat(value)
    except (TypeError, ValueError):
        return str(value)
    if d.tzinfo is not None:
        return d.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return d.strftime("%Y-%m-%d %H:%M")


def load_text(res: dict) -> str:
    """The machine's load as the file records it: one reading, or before and after."""
    if "load_before" in res and "load_after" in res:
        before, after = (v[0] if isinstance(v, list) else v
                         for v in (res["load_before"], res["load_after"]))
        return f"{before:.2f} before and {after:.2f} after"
    return f"{res['load']:.2f}" if "load" in res else "not recorded"


def machine(res: dict) -> str:
    """'Intel(R) Xeon(R) Processor, 2 cores': the CPU a result file was measured on."""
    if not res.get("cpu"):
        raise ResultsError("the result file records no CPU (`cpu`): rerun its command, which "
                           "writes the command, date, CPU and load beside the numbers")
    flags = f" ({', '.join(res['flags']) or 'no AVX2'})" if "flags" in res else ""
    cores = f", {res['cores']} cores" if res.get("cores") else ""
    return f"{res['cpu']}{flags}{cores}"


def caption(res: dict, file: str) -> str:
    """'measured on <CPU>, <date>, load <x>, by `<command>` (<file>)'."""
    return (f"measured on {machine(res)}, {day_time(res.get('date'))}, load {load_text(res)}, "
            f"by `{res.get('command', '?')}` ({file})")


def short(res: dict) -> str:
    """'<CPU>, <day>': what follows a number quoted inline."""
    return f"{machine(res)}, {day_time(res.get('date'))[:10]}"
