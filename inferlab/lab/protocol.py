"""How the lab measures wall-clock results: interleaved repeats, median and spread, and a
visible warning when the machine was too busy to trust them.

    from inferlab.lab import protocol
    res = protocol.compare({"uncached": run_a, "cached": run_b}, repeats=3)
    res.runs["cached"]            # what run_b returned, once per repeat, in run order
    res.spread("cached", key)     # Spread(median, lo, hi, n) of key(result)
    res.warning                   # None, or a sentence saying why not to trust the numbers

Arms run A B A B ... so a slow minute on a shared machine lands on both sides alike.
Simulated clocks need none of this: their numbers are priced by the cost model, the same on
every run; ``label(clock)`` says so next to every number they produce.
"""
from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from inferlab.model.cpu_features import cpu_flags, cpu_name  # noqa: F401 (result files)

# whether the machine was quiet: its own module, re-exported here (the protocol's API)
from .busy import (BUSY, BUSY_SHARE, DRIFT, STEAL, BusyCheck, warning_from,  # noqa: F401
                   busy_warning, calibrate, cpu_busy_seconds, cpu_ticks, cpus, load_average,
                   others_cpus, others_warning, settle, steal_share)

# The same arm, repeated, doing the same work: its slowest call more than this fraction above
# its fastest means the machine changed under the run (a neighbour's memory traffic slows a
# memory-bound engine without moving the load average or a pure-Python calibration loop).
# Calls shorter than REPEAT_MIN_S are left out: their spread is the timer's, not the machine's.
REPEAT_SPREAD = 0.35
REPEAT_MIN_S = 0.5


@dataclass(frozen=True, slots=True)
class Spread:
    """Median of repeated measurements and their range (min-max)."""
    median: float
    lo: float
    hi: float
    n: int

    @property
    def rel(self) -> float:
        """The range as a fraction of the median (0 for one sample)."""
        return (self.hi - self.lo) / self.median if self.median else 0.0

    def ms(self, digits: int = 1) -> str:
        """'12.3 ms (11.9-13.0, n=3)' for a spread of seconds."""
        f = f"{{:.{digits}f}}"
        if self.n < 2:
            return f.format(self.median * 1e3) + " ms (n=1)"
        return (f.format(self.median * 1e3) + f" ms ({f.format(self.lo * 1e3)}-"
                f"{f.format(self.hi * 1e3)}, n={self.n})")

    def x(self) -> str:
        """'1.52x (1.40-1.61x, n=3)' for a spread of ratios."""
        if self.n < 2:
            return f"{self.median:.2f}x (n=1)"
        return f"{self.median:.2f}x ({self.lo:.2f}-{self.hi:.2f}x, n={self.n})"

    def as_dict(self) -> dict:
        return {"median": self.median, "lo": self.lo, "hi": self.hi, "n": self.n}


def spread(values) -> Spread:
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError("spread() of no values")
    return Spread(statistics.median(xs), min(xs), max(xs), len(xs))


def interleaved(arms: dict[str, Callable[[], Any]], repeats: int) -> dict[str, list]:
    """Call every arm once per repeat, in turn (A B A B ...); results per arm, in run order."""
    return _timed_interleaved(arms, repeats)[0]


def _timed_interleaved(arms, repeats):
    """``interleaved``, and each call's wall time per arm, in run order."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    out: dict[str, list] = {name: [] for name in arms}
    times: dict[str, list] = {name: [] for name in arms}
    for _ in range(repeats):
        for name, fn in arms.items():
            t = time.perf_counter()
            out[name].append(fn())
            times[name].append(time.perf_counter() - t)
    return out, times


def _steady(ts: list) -> list:
    """An arm's call times without a first call that was the slowest: a first call warms
    caches, touches new memory and compiles, which is the arm's own doing, not the machine's."""
    return ts[1:] if len(ts) > 1 and ts[0] == max(ts) else ts


def _repeat_reason(times: dict[str, list]) -> str | None:
    """Why the repeats of one arm disagree beyond REPEAT_SPREAD, or None (see there)."""
    why = [f"{name} took {min(ts):.2f}-{max(ts):.2f} s over {len(ts)} repeats "
           f"({max(ts) / min(ts) - 1:.0%} apart)" for name, ts in
           ((n, _steady(t)) for n, t in times.items())
           if len(ts) > 1 and min(ts) >= REPEAT_MIN_S and max(ts) > (1 + REPEAT_SPREAD) * min(ts)]
    return "the same work, repeated, " + "; ".join(why) if why else None


def repeat_warning(times: dict[str, list]) -> str | None:
    """The busy-machine warning for repeats that disagree (``_repeat_reason``), or None."""
    return warning_from([_repeat_reason(times)])


@dataclass
class WallComparison:
    """What ``compare`` measured: each arm's results in run order, and the busy check."""
    runs: dict[str, list]
    repeats: int
    warning: str | None = None
    readings: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        order = " ".join(list(self.runs) * 2)
        return (f"wall clock, this machine: median and range of {self.repeats} interleaved "
                f"repeats ({order} ...)")

    def spread(self, arm: str, key: Callable[[Any], float] = float) -> Spread:
        return spread(key(r) for r in self.runs[arm])

    def meta(self) -> dict:
        """JSON-friendly summary stored in a chapter's data under ``"wall"``."""
        return {"repeats": self.repeats, "warning": self.warning, "label": self.label,
                "readings": self.readings}


def compare(arms: dict[str, Callable[[], Any]], repeats: int) -> WallComparison:
    """Run ``arms`` interleaved ``repeats`` times under a busy check."""
    with BusyCheck() as chk:
        runs, times = _timed_interleaved(arms, repeats)
    warning = warning_from([w and w.removeprefix(BUSY) for w in (chk.warning,
                                                              repeat_warning(times))])
    return WallComparison(runs, repeats, warning, {**chk.readings, "call_seconds": times})


def label(clock: str) -> str:
    """A clock's name as every summary prints it: simulated clocks say they are simulated
    and deterministic; the wall clock says it is this machine's."""
    if clock.startswith("wall"):
        return f"{clock}: measured on this machine, see spread and warnings"
    if "simulated" in clock:
        return f"{clock}; deterministic, priced by the cost model, not measured"
    return f"{clock} (simulated; deterministic, priced by the cost model, not measured)"


def warning_line(meta: dict | None) -> str:
    """The busy warning of a chapter's wall-clock run as a line to print ('' when quiet)."""
    w = (meta or {}).get("warning")
    return f"\n{w}" if w else ""


# --- what every result file records (docs/results/*.json) ------------------------------------
def result_meta(command: str) -> dict:
    """What every result file records beside its numbers: the command that produced them,
    when, on which CPU, and the machine's load (1-minute average) when they were written."""
    import datetime
    return {"command": command, "date": datetime.datetime.now(datetime.timezone.utc)
            .isoformat(timespec="seconds"), "cpu": cpu_name(), "flags": cpu_isa_flags(),
            "cores": os.cpu_count(), "load": round(os.getloadavg()[0], 2)}


def write_result(path, command: str, numbers: dict) -> str:
    """A result file (``--out PATH``): the numbers with ``result_meta(command)`` beside them,
    as JSON (what ``inferlab results render`` turns into README's and BENCHMARKS' tables)."""
    path = os.path.abspath(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(json.dumps({**result_meta(command), "results": numbers}, indent=1,
                           default=str) + "\n")
    return path


ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")


def cpu_isa_flags() -> list[str]:
    """The CPU flags the fast paths choose by (lscpu's names), those this CPU has: a number
    from an AMD EPYC with AVX512-BF16 and one from an EPYC without AVX-512 are not alike."""
    have = cpu_flags()
    return [f for f in ISA_FLAGS if f in have]
