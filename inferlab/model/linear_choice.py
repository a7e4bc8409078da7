"""Which linear backend ``"auto"`` takes for a bfloat16 model on this CPU: the fastest one
measured here, not a rule.

In float32 the rule holds everywhere we measured (the numba GEMM, BENCHMARKS.md "Speed"). In
bfloat16 the answer depends on the CPU: where it has AVX512-BF16 (AMD Zen 4) the numba GEMM's
``vdpbf16ps`` tile beat oneDNN's packed bf16 GEMM 1.2-1.5x at 8-64 rows (``inferlab bench gemm
--dtype bfloat16``); on an Intel Xeon with AMX, oneDNN multiplies in AMX tiles, which a
vector kernel does not match. So the first bf16 engine on a machine times each candidate on
the same weights: SmolLM2's four projections over ``LAYERS`` layers (bf16, ~57 MB, more than
a CPU's last-level cache, so the weights stream from memory as in a step), at a decode step's
8 and 32 rows, through the same call the fused forward makes (``Linear.float_out``), the
candidates alternating (A B A B), the median of ``REPEATS`` per candidate. The result is kept
in ``<cache root>/linear-choice.json`` under this machine's key (CPU model, its bf16 flags,
thread count, torch and numba versions, oneDNN's and numba's ISA switches), so every later
engine takes it without measuring (about a second, once, said on stderr with the times and
the choice). ``INFERLAB_WEIGHTS_CACHE=0`` keeps nothing on disk: it measures once per process.
"""
from __future__ import annotations

import functools
import json
import os
import statistics
import sys
import time

import torch

from . import cpu_features, linear

SHAPES = ((960, 576), (576, 576), (3072, 576), (576, 1536))     # [out, in], SmolLM2's
LAYERS = 8
ROWS = (8, 32)
REPEATS = 3
BOOK = "linear-choice.json"


def resolve(name: str, device: str, dtype, weight_bytes: int, free_bytes: int) -> str:
    """The concrete backend for ``name``, or ValueError naming why it cannot run; "auto" as
    model/linear.py says (in bfloat16 with two candidates: the one ``fastest`` measured)."""
    if name == "auto":
        fits = 3 * weight_bytes < free_bytes
        ok = [c for c in ("numba" if fits else "numba+onednn",
                          "onednn-packed" if fits else "onednn")
              if linear.unavailable(c, device, dtype) is None]
        if dtype == torch.bfloat16 and len(ok) > 1:
            return fastest(ok, dtype)                     # measured on this CPU, kept
        return ok[0] if ok else "torch"
    if name not in linear.LINEAR_BACKENDS:
        raise ValueError(f"linear backend must be 'auto' or one of {linear.LINEAR_BACKENDS}; "
                         f"got {name!r}")
    why = linear.unavailable(name, device, dtype)
    if why is not None:
        raise ValueError(f"linear backend {name!r} is not available: {why}")
    return name


def machine_key(dtype: torch.dtype) -> str:
    """What the timing depends on besides the weights: one line."""
    flags = sorted(cpu_features.cpu_flags() & {"avx512_bf16", "amx_bf16", "avx512_fp16"})
    try:
        import numba
        nb = numba.__version__
    except ImportError:
        nb = "-"
    return " | ".join([cpu_features.cpu_name(), ",".join(flags) or "no-half-flags", str(dtype),
                       f"{torch.get_num_threads()} threads", f"torch {torch.__version__}",
                       f"numba {nb}"] + [f"{v}={os.environ.get(v, '')}" for v in
                                         ("ONEDNN_MAX_CPU_ISA", "NUMBA_CPU_FEATURES")])


def measure(candidates, dtype=torch.bfloat16, layers: int = LAYERS, rows=ROWS,
            repeats: int = REPEATS) -> dict[str, float]:
    """Median ms of one pass over ``layers`` layers at each of ``rows``, per candidate."""
    gen = torch.Generator().manual_seed(0)
    weights = [torch.randn(n, k, generator=gen).to(dtype) for _ in range(layers)
               for n, k in SHAPES]
    xs = [{k: torch.randn(m, k, generator=gen) for k in (576, 1536)} for m in rows]
    linears = {}
    for name in candidates:
        lin, store = linear.Linear(name), {}
        for i, w in enumerate(weights):
            lin.prepare(w, str(i), store)
        linears[name] = lin

    def one_pass(lin):
        for x in xs:
            for w in weights:
                lin.float_out(x[w.shape[1]], w)
    times = {name: [] for name in candidates}
    for name in candidates:
        one_pass(linears[name])                         # warm-up (and numba's compile)
    for _ in range(repeats):
        for name in candidates:
            t = time.perf_counter()
            one_pass(linears[name])
            times[name].append((time.perf_counter() - t) * 1e3)
    return {name: statistics.median(v) for name, v in times.items()}


def fastest(candidates, dtype=torch.bfloat16) -> str:
    """The fastest of ``candidates`` here (the first, when there is one), measured once per
    machine and kept (see the module docstring)."""
    candidates = tuple(candidates)
    if len(candidates) == 1:
        return candidates[0]
    return _fastest(candidates, dtype, _book_path())


@functools.cache
def _fastest(candidates: tuple, dtype, path: str | None) -> str:
    key = machine_key(dtype) + " | " + ",".join(candidates)
    book = _read(path)
    ms = book.get(key, {}).get("ms")
    if not ms or set(ms) != set(candidates):
        _say(f"inferlab: timing the {str(dtype).removeprefix('torch.')} GEMMs of "
             f"{' and '.join(candidates)} on this CPU, once ...")
        ms = measure(candidates, dtype)
        best = min(candidates, key=lambda c: ms[c])
        book[key] = {"ms": ms, "choice": best, "candidates": list(candidates),
                     "measured": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                     "load": round(os.getloadavg()[0], 2)}
        _write(path, book)
        _say("inferlab: " + ", ".join(f"{c} {ms[c]:.1f} ms" for c in candidates)
             + f": linear backend {best}" + (f" (kept in {path})" if path else ""))
    return min(candidates, key=lambda c: ms[c])


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def forget() -> None:
    """Drop what this process remembers (the file stays): the next ``fastest`` reads it again."""
    _fastest.cache_clear()


def recorded() -> dict:
    """What this machine measured so far (key -> {"ms": {backend: ms}, "choice", "candidates",
    "measured", "load"})."""
    return _read(_book_path())


def _book_path() -> str | None:
    from . import weights_cache
    return os.path.join(weights_cache.cache_root(), BOOK) if weights_cache.enabled() else None


def _read(path: str | None) -> dict:
    if path is None or not os.path.isfile(path):
        return {}
    try:
        with open(path) as f:
            book = json.load(f)
        return book if isinstance(book, dict) else {}
    except (OSError, ValueError):
        return {}                                       # unreadable: measure again


def _write(path: str | None, book: dict) -> None:
    if path is None:
        return
    from .hf_dir import write_file_atomically
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_file_atomically(path, json.dumps(book, indent=1, sort_keys=True).encode())
    except OSError:
        pass                                            # a read-only cache: measure next time
