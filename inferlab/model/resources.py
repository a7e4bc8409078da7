"""What the machine (or container) gives us: memory and CPUs, cgroup-aware (Binder)."""
from __future__ import annotations

import os

MIB = 1 << 20
KV_MEMORY_CAP = 512 * MIB     # the default KV budget's ceiling (default_kv_cache_memory)
DEFAULT_CONTEXT_CAP = 2048     # the default max_model_len: the model's context, at most this


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            v = f.read().strip().split()[0]
        return None if v == "max" else int(v)
    except (OSError, ValueError, IndexError):
        return None


def _parse_bytes(text: str) -> int | None:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower().rstrip("ib").rstrip("b") if text else ""
    try:
        return int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)
    except (ValueError, IndexError):
        return None


def _self_rss() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _own_cgroup(controller: str) -> str:
    """This process's cgroup directory for ``controller`` (v1), or the unified one (v2,
    ``controller`` ""), from /proc/self/cgroup: a process placed in a cgroup without a cgroup
    namespace (a pod reproduced on a host, tests/test_binder.py) reads its own limits, not the
    host's root. In a container with its own namespace this is the mount's root, as before."""
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, names, path = line.rstrip("\n").split(":", 2)
                if controller in names.split(",") or (not controller and names == ""):
                    base = "/sys/fs/cgroup" + (f"/{controller}" if controller else "")
                    own = base + path.rstrip("/")
                    return own if os.path.isdir(own) else base
    except (OSError, ValueError):
        pass
    return "/sys/fs/cgroup" + (f"/{controller}" if controller else "")


def _inactive_file(*stat_files: str) -> int:
    """Inactive file cache in a cgroup's memory.stat (v2 ``inactive_file``, v1
    ``total_inactive_file``): reclaimable at once, so not counted as used."""
    for path in stat_files:
        try:
            with open(path) as f:
                fields = dict(line.split() for line in f)
        except (OSError, ValueError):
            continue
        return int(fields.get("inactive_file", fields.get("total_inactive_file", 0)))
    return 0


def available_memory() -> int:
    """Bytes this process may still use: min of the cgroup's room and MemAvailable.

    INFERLAB_MEMORY_LIMIT (e.g. "2G") acts as a memory limit for this process, to see what a
    smaller machine (a 2 GB Binder pod) would get without being in one."""
    limits = []
    override = _parse_bytes(os.environ.get("INFERLAB_MEMORY_LIMIT", ""))
    if override:
        limits.append(max(override - _self_rss(), 0))
    v2, v1 = _own_cgroup(""), _own_cgroup("memory")
    limit = _read_int(f"{v2}/memory.max") or _read_int(f"{v1}/memory.limit_in_bytes")
    usage = _read_int(f"{v2}/memory.current") or _read_int(f"{v1}/memory.usage_in_bytes")
    if limit and limit < (1 << 50):   # the room left: file cache that drops at once is room
        usage = (usage or 0) - _inactive_file(f"{v2}/memory.stat", f"{v1}/memory.stat")
        limits.append(max(limit - max(usage, 0), 0))
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    limits.append(int(line.split()[1]) * 1024)
    except OSError:
        pass
    return min(limits) if limits else 4 << 30


def cpu_count() -> int:
    """CPUs we may use: cgroup quota if set, else the affinity mask."""
    quota = None
    try:
        with open(f"{_own_cgroup('')}/cpu.max") as f:
            q, period = f.read().split()
            if q != "max":
                quota = max(1, int(int(q) / int(period)))
    except (OSError, ValueError):
        q1, p1 = (_read_int(f"{_own_cgroup('cpu')}/cpu.cfs_{k}_us") for k in ("quota", "period"))
        if q1 and q1 > 0 and p1:                    # cgroup v1: -1 is no quota
            quota = max(1, int(q1 / p1))
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(n, quota) if quota else n


def default_kv_cache_memory() -> int:
    """KV budget when none is given: a fifth of what is free, between 64 MiB and 512 MiB."""
    return int(min(KV_MEMORY_CAP, max(64 * MIB, available_memory() // 5)))


def auto_num_blocks(budget: int, bytes_per_token: int, block_size: int, most_needed: int) -> int:
    """KV blocks that ``budget`` bytes hold, never more than ``most_needed`` (every sequence
    at full length); a clear error when not even one block fits."""
    n = min(budget // (bytes_per_token * block_size), most_needed)
    if n < 1:
        from ..errors import InvalidInputError
        raise InvalidInputError(f"kv_cache_memory={budget} bytes holds no block of "
                                f"{block_size} tokens ({bytes_per_token} bytes/token)")
    return int(n)
