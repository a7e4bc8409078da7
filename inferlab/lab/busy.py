"""Is the machine quiet enough to trust a wall-clock run? Readings taken around it: the
hypervisor's steal, the CPU time other processes took on our CPUs (/proc/stat), a fixed
calibration loop in a fresh interpreter before and after; ``BusyCheck`` takes them and says
why not to trust the run (``warning``), or None. ``protocol.compare`` runs every wall-clock
measurement inside one.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

# Other processes keeping more than this share of our CPUs busy during a run (from
# /proc/stat, exact over the run; the load average where there is none) makes it
# untrustworthy. So does a calibration loop that ran at half the speed (or twice it) after
# the run: on these virtual machines a fresh interpreter's loop moves 5-65% between two
# readings with nothing else running (a quiet run was flagged at 24 -> 37 ms), which is the
# host's clock, not a neighbour; arms interleaved A B A B share such a slow change, and a
# change inside the run shows as repeats that disagree (REPEAT_SPREAD).
BUSY_SHARE = 0.5
DRIFT = 1.0
STEAL = 0.10          # a virtual machine's CPU time taken by the hypervisor for other guests
CALIBRATION_LOOPS = 300_000


BUSY = "WARNING: busy machine, wall-clock numbers not trustworthy: "


def warning_from(reasons) -> str | None:
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
                 cal_after: float, steal: float | None = None,
                 others: float | None = None) -> str | None:
    """The warning for these readings, or None. ``own_cpus``: how many CPUs this process kept
    busy on average during the run (its CPU time over the wall time), which the load
    average counts too; ``steal``: the share of CPU time the hypervisor gave other guests;
    ``others``: how many of our CPUs other processes kept busy during the run
    (``others_cpus``), which replaces the load average where it was read (the load
    average is a minute's decaying mean: it still carries this process's own previous
    work, and flagged a quiet run as 1.5 CPUs of "others")."""
    why = []
    if steal is not None and steal > STEAL:
        why.append(f"the hypervisor took {steal:.0%} of this virtual machine's CPU time "
                   "for other guests (steal)")
    if others is not None:
        if others > BUSY_SHARE * n_cpus:
            why.append(f"other processes kept {others:.1f} of {n_cpus} CPUs busy during the "
                       "run (/proc/stat, less this process's own CPU time)")
    elif load is not None:
        others = load - own_cpus
        if others > BUSY_SHARE * n_cpus:
            why.append(f"load average {load:.1f} on {n_cpus} CPUs, about {others:.1f} of it "
                       "from other processes")
    drift = abs(cal_after - cal_before) / min(cal_before, cal_after)
    if drift > DRIFT:
        why.append(f"a fixed calibration loop took {cal_before * 1e3:.0f} ms before and "
                   f"{cal_after * 1e3:.0f} ms after ({drift:.0%} apart)")
    return warning_from(why)


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
        self._t0, self._cpu0 = time.perf_counter(), _own_cpu_seconds()
        self._ticks0, self._busy0 = cpu_ticks(), cpu_busy_seconds()
        return self

    def __exit__(self, *exc) -> None:
        wall = max(time.perf_counter() - self._t0, 1e-9)
        own_s = _own_cpu_seconds() - self._cpu0
        busy1 = cpu_busy_seconds()
        others = others_cpus(self._busy0, busy1, own_s, wall)
        steal = steal_share(self._ticks0, cpu_ticks())
        cal1, load = calibrate(), load_average()
        self.readings = {"load": load, "cpus": cpus(), "own_cpus": own_s / wall,
                         "others_cpus": others, "steal": steal,
                         "calibration_before_s": self._cal0, "calibration_after_s": cal1}
        self.warning = busy_warning(load, cpus(), own_s / wall, self._cal0, cal1, steal, others)


def _own_cpu_seconds() -> float:
    """CPU seconds of this process (every thread) and of its children that have ended."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system
