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
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from inferlab.model.cpu_features import cpu_flags, cpu_name  # noqa: F401 (result files)

# Other processes' load above this share of the CPUs, or a calibration loop whose time
# moves by more than this fraction between before and after, makes a run untrustworthy.
BUSY_SHARE = 0.5
DRIFT = 0.25
STEAL = 0.10          # a virtual machine's CPU time taken by the hypervisor for other guests
# The same arm, repeated, doing the same work: its slowest call more than this fraction above
# its fastest means the machine changed under the run (a neighbour's memory traffic slows a
# memory-bound engine without moving the load average or a pure-Python calibration loop).
# Calls shorter than REPEAT_MIN_S are left out: their spread is the timer's, not the machine's.
REPEAT_SPREAD = 0.35
REPEAT_MIN_S = 0.5
CALIBRATION_LOOPS = 300_000


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
    return _warning([_repeat_reason(times)])


BUSY = "WARNING: busy machine, wall-clock numbers not trustworthy: "


def _warning(reasons) -> str | None:
    why = [r for r in reasons if r]
    return BUSY + "; ".join(why) if why else None


# --- is the machine quiet enough? ------------------------------------------------------
def cpus() -> int:
    """CPUs this process may run on (a container's limit, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):   # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


# in a fresh interpreter: inside this process the loop moved 40-70% with nothing else running
# (16 ms fresh, 9.7 after Engine(), 15.7 after a generate), started anew it stays within ~5%
_LOOP = ("import time\nbest = 1.0\nfor _ in range(3):\n    t = time.perf_counter()\n    s = 0\n"
         "    for i in range({loops}):\n        s += i & 7\n"
         "    best = min(best, time.perf_counter() - t)\nprint(best)\n")


def calibrate(loops: int = CALIBRATION_LOOPS) -> float:
    """Seconds for a fixed pure-Python loop (best of 3) in a fresh interpreter: the machine's
    speed right now, whatever this process's own state."""
    out = subprocess.run([sys.executable, "-S", "-c", _LOOP.format(loops=loops)],
                         capture_output=True, text=True, timeout=60)
    return float(out.stdout)


def load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):   # pragma: no cover - Windows
        return None


def cpu_ticks() -> tuple[int, int] | None:
    """(steal, total) CPU ticks of the whole machine since boot, from Linux's /proc/stat;
    steal is time a virtual machine was ready to run but the hypervisor ran another guest,
    which the load average inside the guest never shows. None where there is no /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):       # pragma: no cover - not Linux
        return None
    steal = fields[7] if len(fields) > 7 else 0
    return steal, sum(fields[:8])


def cpu_busy_seconds() -> float | None:
    """CPU seconds the CPUs this process may run on have spent busy since boot, whoever ran
    on them (every process, the kernel, and time the hypervisor stole), from /proc/stat's
    per-CPU lines: idle and iowait left out. None where there is no /proc/stat. Two readings
    around a run, less the run's own CPU seconds, are what other processes took during it:
    exact over the run, where the load average is a minute's decaying mean that still
    carries whatever ran before."""
    mine, busy = os.sched_getaffinity(0), 0
    try:
        with open("/proc/stat") as f:
            for line in f:
                name, *vals = line.split()
                if name[:3] == "cpu" and name[3:].isdigit() and int(name[3:]) in mine:
                    v = [int(t) for t in vals[:8]]
                    busy += sum(v) - v[3] - v[4]
    except (OSError, ValueError, IndexError):   # pragma: no cover - not Linux
        return None
    return busy / os.sysconf("SC_CLK_TCK")


def others_cpus(busy_before: float | None, busy_after: float | None, own_cpu_s: float,
                wall_s: float) -> float | None:
    """How many of our CPUs other processes kept busy on average over ``wall_s`` seconds,
    given ``cpu_busy_seconds()`` at their start and end and the CPU seconds the measured
    processes used themselves."""
    if busy_before is None or busy_after is None or wall_s <= 0:
        return None
    return max(0.0, (busy_after - busy_before - own_cpu_s) / wall_s)


def others_warning(others: float | None, n_cpus: int, own: str, numbers: str) -> str | None:
    """The busy-machine warning when other processes kept more than ``BUSY_SHARE`` of our
    CPUs busy (``others_cpus``), or None. ``own``: whose CPU time was left out ("the
    engines'"); ``numbers``: what is not to be trusted ("tok/s")."""
    if others is None or others <= BUSY_SHARE * n_cpus:
        return None
    return (f"WARNING: busy machine (other processes kept {others:.1f} of our {n_cpus} CPUs "
            f"busy during the runs, /proc/stat less {own} own CPU time): these {numbers} are "
            "not trustworthy")


def steal_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """The share of the machine's CPU time stolen by the hypervisor between two readings."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


def busy_warning(load: float | None, n_cpus: int, own_cpus: float, cal_before: float,
                 cal_after: float, steal: float | None = None) -> str | None:
    """The warning for these readings, or None. ``own_cpus``: how many CPUs this process kept
    busy on average during the run (its CPU time over the wall time), which the load
    average counts too; ``steal``: the share of CPU time the hypervisor gave other guests."""
    why = []
    if steal is not None and steal > STEAL:
        why.append(f"the hypervisor took {steal:.0%} of this virtual machine's CPU time "
                   "for other guests (steal)")
    if load is not None:
        others = load - own_cpus
        if others > BUSY_SHARE * n_cpus:
            why.append(f"load average {load:.1f} on {n_cpus} CPUs, about {others:.1f} of it "
                       "from other processes")
    drift = abs(cal_after - cal_before) / min(cal_before, cal_after)
    if drift > DRIFT:
        why.append(f"a fixed calibration loop took {cal_before * 1e3:.0f} ms before and "
                   f"{cal_after * 1e3:.0f} ms after ({drift:.0%} apart)")
    return _warning(why)


def settle(timeout: float = 120.0) -> None:
    """Wait for this process's background weight-file checks (they would share the CPU)."""
    from inferlab.model.engine_files import VERIFY_THREAD
    for t in threading.enumerate():
        if t.name == VERIFY_THREAD:
            t.join(timeout)


class BusyCheck:
    """Readings before and after a wall-clock measurement; ``warning`` once finished."""

    def __init__(self):
        self.warning: str | None = None
        self.readings: dict = {}

    def __enter__(self) -> "BusyCheck":
        settle()                     # a weight file's full check hashes ~0.5 GB on a core
        calibrate()                  # the first interpreter started in a while starts slow
        self._cal0 = calibrate()
        self._t0, self._cpu0 = time.perf_counter(), time.process_time()
        self._ticks0 = cpu_ticks()
        return self

    def __exit__(self, *exc) -> None:
        wall = max(time.perf_counter() - self._t0, 1e-9)
        own = (time.process_time() - self._cpu0) / wall
        steal = steal_share(self._ticks0, cpu_ticks())
        cal1, load = calibrate(), load_average()
        self.readings = {"load": load, "cpus": cpus(), "own_cpus": own, "steal": steal,
                         "calibration_before_s": self._cal0, "calibration_after_s": cal1}
        self.warning = busy_warning(load, cpus(), own, self._cal0, cal1, steal)


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
    warning = _warning([w and w.removeprefix(BUSY) for w in (chk.warning,
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
