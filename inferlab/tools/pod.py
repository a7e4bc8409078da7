"""A Binder pod on this machine: processes run in a cgroup with a memory limit (no swap) and a
CPU quota, and the pod's memory is watched as a whole (server + kernel + Chrome + the rest).

    with Pod(memory="2G", cpus=1) as pod:                 # needs root and a cgroup hierarchy
        proc = subprocess.Popen(cmd, preexec_fn=pod.enter)  # it and its children are inside
        ...
        pod.report()      # {"peak_bytes": ..., "by_process": {...}, "oom_kills": 0, ...}

Binder's limit counts what the kernel charged to the pod's cgroup, less the file cache it can
drop at once (the "working set"). Here a page is charged to whoever touched it first: torch's
libraries or the weights file, already read by a process outside the pod, would not count. So
``peak_bytes`` is the pod's footprint as if it owned every page it uses: the distinct physical
pages its processes map (from their page maps, each page once) plus what is charged to it
unmapped, sampled every ``every`` seconds; ``charged_peak_bytes`` is the working set as
charged here, ``usage_peak_bytes`` the kernel's own high-water mark (cache included).
``by_process`` is the largest footprint per kind of process (the Jupyter server, the kernel,
the headless Chrome, ...): what costs what.
cgroup v1 (memory + cpu controllers, as here) and v2 (the unified hierarchy) both work;
``unavailable()`` says why a pod cannot be made here (not root, no controller).
"""
from __future__ import annotations

import os
import pathlib
import signal
import threading
import time

V1 = pathlib.Path("/sys/fs/cgroup")
PERIOD_US = 100_000


def _bytes(text) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = str(text).strip().lower().rstrip("b")
    return int(float(t[:-1]) * units[t[-1]]) if t[-1] in units else int(t)


def _v2_root() -> pathlib.Path | None:
    for root in (V1, V1 / "unified"):
        ctl = root / "cgroup.controllers"
        if ctl.exists() and "memory" in ctl.read_text().split():
            return root
    return None


def unavailable() -> str | None:
    """Why no pod can be made here, or None when one can."""
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        return "making a cgroup needs root"
    if _v2_root() is None and not (V1 / "memory" / "memory.limit_in_bytes").exists():
        return "no cgroup memory controller is mounted under /sys/fs/cgroup"
    root = V1 / "memory" if _v2_root() is None else _v2_root()
    probe = root / f"inferlab-pod-{os.getpid()}-probe"
    try:                                     # the one sure test: make a cgroup and remove it
        probe.mkdir()
        probe.rmdir()
    except OSError as e:
        return f"a cgroup cannot be made here ({e.strerror or e})"
    return None


def _empty(d: pathlib.Path) -> None:
    """Kill what is left in cgroup ``d`` and remove it."""
    for _ in range(50):
        try:
            pids = [int(p) for p in (d / "cgroup.procs").read_text().split()]
        except OSError:
            return
        if not pids:
            break
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    try:
        d.rmdir()
    except OSError:
        pass


def remove_stale() -> None:
    """Pods whose maker died without closing them (a killed benchmark): emptied, removed."""
    roots = [_v2_root()] if _v2_root() is not None else [V1 / "memory", V1 / "cpu"]
    for root in roots:
        for d in root.glob("inferlab-pod-*"):
            maker = d.name.split("-")[2]
            if maker.isdigit() and not os.path.exists(f"/proc/{maker}"):
                _empty(d)


def kind_of(cmdline: str) -> str:
    """What a process in the pod is, for the per-process breakdown."""
    if "precompile" in cmdline:
        return "kernel compile"
    if "ipykernel" in cmdline:
        return "kernel"
    if "jupyter" in cmdline:
        return "jupyter server"
    if "chrom" in cmdline:
        return "chrome"
    return "other"


class Pod:
    """A cgroup with ``memory`` (bytes or "2G"; swap off) and ``cpus`` (a CFS quota)."""

    def __init__(self, memory="2G", cpus: float = 1.0, every: float = 0.5):
        self.limit = _bytes(memory)
        self.cpus, self.every = cpus, every
        self.name = f"inferlab-pod-{os.getpid()}-{time.monotonic_ns() % 10**9}"
        self.v2 = _v2_root()
        self.dirs: list[pathlib.Path] = []
        self._stop = threading.Event()
        self._thread = None
        self.reset()

    # --- setting it up --------------------------------------------------------------------
    def __enter__(self) -> "Pod":
        why = unavailable()
        if why:
            raise RuntimeError(f"cannot make a Binder pod here: {why}")
        remove_stale()
        if self.v2 is not None:
            d = self.v2 / self.name
            d.mkdir()
            self.dirs = [d]
            (d / "memory.max").write_text(str(self.limit))
            (d / "memory.swap.max").write_text("0")
            (d / "cpu.max").write_text(f"{int(self.cpus * PERIOD_US)} {PERIOD_US}")
        else:
            mem, cpu = V1 / "memory" / self.name, V1 / "cpu" / self.name
            mem.mkdir()
            self.dirs = [mem]
            (mem / "memory.limit_in_bytes").write_text(str(self.limit))
            memsw = mem / "memory.memsw.limit_in_bytes"
            if memsw.exists():                      # swap accounting on: memory + swap = limit
                memsw.write_text(str(self.limit))
            (mem / "memory.swappiness").write_text("0")
            if (V1 / "cpu").exists():
                cpu.mkdir()
                self.dirs.append(cpu)
                (cpu / "cpu.cfs_period_us").write_text(str(PERIOD_US))
                (cpu / "cpu.cfs_quota_us").write_text(str(int(self.cpus * PERIOD_US)))
        self._thread = threading.Thread(target=self._watch, name="pod-watch", daemon=True)
        self._thread.start()
        return self

    def enter(self) -> None:
        """Put the calling process in the pod (``preexec_fn`` of a Popen): it and every child
        it starts are inside."""
        pid = str(os.getpid())
        for d in self.dirs:
            (d / "cgroup.procs").write_text(pid)

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.dirs[0] / "cgroup.procs").read_text().split()]
        except (OSError, IndexError):
            return []

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        for d in self.dirs:                          # whatever is still inside goes
            _empty(d)

    # --- watching it ----------------------------------------------------------------------
    def reset(self) -> None:
        """Start a new high-water mark (e.g. per notebook)."""
        self.peak = self.charged_peak = 0
        self.peak_at = 0.0
        self.by_process: dict[str, int] = {}
        self._t0 = time.monotonic()

    def _stat(self) -> dict:
        d = self.dirs[0]
        stat = {k: int(v) for k, v in (line.split() for line in
                                       (d / "memory.stat").read_text().splitlines())}
        if self.v2 is not None:
            usage = int((d / "memory.current").read_text())
            mapped = stat.get("anon", 0) + stat.get("file_mapped", 0)
            inactive = stat.get("inactive_file", 0)
        else:
            usage = int((d / "memory.usage_in_bytes").read_text())
            mapped = stat.get("total_rss", 0) + stat.get("total_mapped_file", 0)
            inactive = stat.get("total_inactive_file", 0)
        return {"working_set": usage - inactive, "unmapped": max(usage - inactive - mapped, 0)}

    def working_set(self) -> int:
        """What the kernel charged to the pod, less the file cache that drops at once."""
        return self._stat()["working_set"]

    def footprint(self) -> int:
        """The pod's memory as if it owned every page it uses: the distinct pages its
        processes map (``resident_pages``) plus what is charged to it unmapped (file cache
        it read, shared memory, kernel memory). Falls back to the charge alone."""
        st = self._stat()
        pages = resident_pages(self.pids())
        return st["working_set"] if pages is None else max(pages + st["unmapped"],
                                                           st["working_set"])

    def _watch(self) -> None:
        while not self._stop.wait(self.every):
            try:
                charged, now = self.working_set(), self.footprint()
            except (OSError, ValueError):
                continue
            self.charged_peak = max(self.charged_peak, charged)
            if now > self.peak:
                self.peak, self.peak_at = now, time.monotonic() - self._t0
            kinds: dict[str, list[int]] = {}
            for pid in self.pids():
                kinds.setdefault(kind_of(_cmdline(pid)), []).append(pid)
            for k, pids in kinds.items():     # each kind's distinct pages, counted once
                self.by_process[k] = max(self.by_process.get(k, 0), resident_pages(pids) or 0)

    def oom_kills(self) -> int:
        d = self.dirs[0]
        try:
            text = (d / ("memory.events" if self.v2 is not None else "memory.oom_control")
                    ).read_text()
        except OSError:
            return 0
        fields = dict(line.split() for line in text.splitlines())
        return int(fields.get("oom_kill", 0))

    def report(self) -> dict:
        """The pod's memory so far: the working-set peak (what Binder counts), when it came,
        the largest RSS per kind of process, the kernel's own high-water mark, OOM kills."""
        d = self.dirs[0]
        usage_peak = d / ("memory.peak" if self.v2 is not None else
                          "memory.max_usage_in_bytes")
        return {"limit_bytes": self.limit, "cpus": self.cpus, "peak_bytes": self.peak,
                "peak_at_s": round(self.peak_at, 1), "charged_peak_bytes": self.charged_peak,
                "usage_peak_bytes": int(usage_peak.read_text()) if usage_peak.exists() else None,
                "by_process": dict(sorted(self.by_process.items())),
                "oom_kills": self.oom_kills()}


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _resident_ranges(pid: int) -> list[tuple[int, int]]:
    """The address ranges of ``pid`` that hold resident pages (smaps: Rss > 0)."""
    ranges, cur = [], None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split(None, 1)[0]
            if "-" in head and not head.endswith(":"):
                a, b = head.split("-")
                cur = (int(a, 16), int(b, 16))
            elif head == "Rss:" and cur and int(line.split()[1]) > 0:
                ranges.append(cur)
    return ranges


def resident_pages(pids) -> int:
    """Bytes of the distinct physical pages the processes ``pids`` map, each counted once
    (their page frames, /proc/PID/pagemap, root only): what a pod that owned all its pages
    holds in them, wherever the kernel charged each page (a library or the weights file a
    process outside the pod touched first is charged to that process's cgroup, not this
    one's). None where page frames cannot be read."""
    import numpy as np
    page = os.sysconf("SC_PAGE_SIZE")
    frames = []
    for pid in pids:
        try:
            ranges = _resident_ranges(pid)
            with open(f"/proc/{pid}/pagemap", "rb") as pm:
                for a, b in ranges:
                    pm.seek(a // page * 8)
                    e = np.frombuffer(pm.read((b - a) // page * 8), dtype=np.uint64)
                    e = e[(e >> np.uint64(63)) == 1] & np.uint64((1 << 55) - 1)
                    frames.append(e)
        except (OSError, ValueError):
            continue                                  # a process that ended meanwhile
    if not frames:
        return 0
    every = np.concatenate(frames)
    if every.size and not every.any():                # frame numbers hidden (not root)
        return None
    return int(np.unique(every).size) * page


def gb(n) -> str:
    return f"{n / 1e9:.2f} GB" if n is not None else "n/a"
