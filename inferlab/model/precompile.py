"""The numba kernels compiled for this CPU, once, on every core at a time, with a word on screen.

numba keys its on-disk cache by the CPU it compiled for, so a machine it has not seen (a
Binder pod on another host than the image was built on, a new laptop) compiles every kernel
again: ~30 s of one core here, half of it the one-token decode pass alone. Done silently
inside ``Engine()`` that is a minute of nothing on a 2-core machine. So ``ensure_compiled``:

* knows whether this CPU has compiled these kernels before: a marker file named by numba's
  own cache key for the CPU (target triple, CPU name, features), numba's version and the
  kernel sources' sizes and times (and, for a bfloat16 engine, its dtype and GEMM backend:
  its kernels are others), written once every kernel is in the cache;
* if not, says so ("compiling the engine's kernels for this CPU, once, ~N s") and compiles
  them in two worker processes at once, each running the real forward code on a tiny
  random model with the engine's number of layers (the compiled signatures depend on the
  types and tuple lengths, not the sizes), so the engine then finds all of them in the
  cache, not only those its warm-up touches;
* and then reports how long it took. Where a process cannot be started, the engine's own
  warm-up compiles what it needs, as before.
"""
from __future__ import annotations

import hashlib
import os
import pathlib
import subprocess
import sys
import time

PARTS = ("decode pass", "other kernels")
ESTIMATE_S = 30          # one core, all kernels, measured on the 2-core Xeon (BENCHMARKS.md)


def _marker(num_layers: int, bias: bool, dtype: str = "float32",
            linear_backend: str = "numba") -> pathlib.Path | None:
    """Where this CPU's 'compiled' marker lives (beside numba's cache), or None if unknown.
    The layer count, biases, dtype and linear backend are in it: the one-token pass's types
    depend on them (a bfloat16 pass reads the numba GEMM's panels, or plain rows beside
    oneDNN's GEMM)."""
    try:
        import numba
        from numba.core.registry import cpu_target
        magic = cpu_target.target_context.codegen().magic_tuple()
    except Exception:  # noqa: BLE001 - no numba: nothing to compile
        return None
    import inferlab.kernels as k
    src = pathlib.Path(k.__file__).parent
    stamps = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in src.glob("*.py"))
    what = (num_layers, bias) if dtype == "float32" else (num_layers, bias, dtype,
                                                          linear_backend)
    key = hashlib.sha256(repr((magic, numba.__version__, stamps) + what).encode()
                         ).hexdigest()[:16]
    base = pathlib.Path(numba.config.CACHE_DIR) if numba.config.CACHE_DIR else src / "__pycache__"
    return base / f"inferlab-kernels-{key}.compiled"


def is_compiled(num_layers: int, bias: bool, dtype: str = "float32",
                linear_backend: str = "numba") -> bool:
    m = _marker(num_layers, bias, dtype, linear_backend)
    return m is None or m.exists()


def _tiny_runner(num_layers: int, bias: bool, dtype: str = "float32",
                 linear_backend: str = "numba"):
    """A runner over a random model with the engine's layer count, dtype and linear backend,
    tiny otherwise."""
    import torch
    from transformers import LlamaConfig

    from .llama import LlamaForward
    from .weights import LayerWeights, ModelWeights
    cfg = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=64, head_dim=32,
                      num_hidden_layers=num_layers, num_attention_heads=2,
                      num_key_value_heads=1, max_position_embeddings=4096)
    g = torch.Generator().manual_seed(0)
    t = getattr(torch, dtype)
    r = lambda *shape: (torch.randn(*shape, generator=g) * 0.1).to(t)   # noqa: E731
    one = lambda: torch.ones(64, dtype=t)                                # noqa: E731
    layers = [LayerWeights(one(), r(128, 64), r(128) if bias else None, r(64, 64),
                           one(), r(128, 64), r(64, 64)) for _ in range(num_layers)]
    emb = r(64, 64)
    w = ModelWeights(cfg, emb, one(), emb, layers, 1.0 / 10000 ** (
        torch.arange(0, 32, 2).float() / 32), 1.0)
    return LlamaForward(w, linear_backend)


def compile_part(part: str, num_layers: int, bias: bool, dtype: str = "float32",
                 linear_backend: str = "numba") -> float:
    """Run one part of the forward code so numba compiles (and caches) its kernels; seconds."""
    import torch

    from inferlab import kernels

    from .fused import FusedForward, HalfDecode
    from .llama import AttentionMetadata
    t0 = time.perf_counter()
    fwd = _tiny_runner(num_layers, bias, dtype, linear_backend)
    bs, nb = 16, 160
    kc = torch.zeros((num_layers, nb, bs, 1, 32), dtype=fwd.dtype)
    vc = torch.zeros_like(kc)

    def meta(counts, starts, backend="numba-cpu"):
        tables, slots, q = [], [], [0]
        for s, (n, st) in enumerate(zip(counts, starts)):
            need = -(-(st + n) // bs)
            tables.append(list(range(s * 80, s * 80 + need)))
            slots += [tables[-1][p // bs] * bs + p % bs for p in range(st, st + n)]
            q.append(q[-1] + n)
        width = max(len(t) for t in tables)
        return AttentionMetadata(
            torch.tensor(slots), torch.tensor([t + [0] * (width - len(t)) for t in tables],
                                              dtype=torch.int32),
            torch.tensor([s + n for s, n in zip(starts, counts)], dtype=torch.int32),
            torch.tensor(q, dtype=torch.int32), sum(counts) == len(counts), backend)

    def run(forward, counts, starts, backend="numba-cpu"):
        m = meta(counts, starts, backend)
        ids = torch.ones(sum(counts), dtype=torch.int64)
        pos = torch.tensor([p for n, s in zip(counts, starts) for p in range(s, s + n)])
        forward(ids, pos, m, kc, vc, m.query_start_loc[1:].long() - 1)

    fused = HalfDecode(fwd) if dtype == "bfloat16" else FusedForward(fwd)
    if part == "decode pass":
        run(fused, [1], [0])
    else:
        if dtype == "float32":
            kernels.pack_panels(fwd.embed.numpy())         # (panels may come from the cache)
        for counts, starts in (([3], [0]), ([1, 1], [4, 5]), ([1, 1], [1100, 1100]),
                               ([20], [1100]), ([2, 3], [0, 0])):
            run(fused, counts, starts)                      # serial and parallel kernels
        run(fwd.forward, [3], [0])                          # the op-by-op path's numba kernels
        run(fwd.forward, [1, 1], [1100, 1100])
    return time.perf_counter() - t0


def ensure_compiled(num_layers: int, bias: bool, out=None, dtype: str = "float32",
                    linear_backend: str = "numba") -> float | None:
    """Compile every kernel for this CPU unless it already was (then None, instantly).
    Returns the seconds it took. ``out``: where the one-line notes go (stderr). ``dtype``,
    ``linear_backend``: the engine's ("float32" or "bfloat16"; bfloat16 compiles its own
    kernels, for the GEMM the engine runs)."""
    marker = _marker(num_layers, bias, dtype, linear_backend)
    if marker is None or marker.exists():
        return None
    out = out or (lambda s: print(s, file=sys.stderr, flush=True))
    from .resources import cpu_count       # the cgroup's quota (a Binder pod: one CPU)
    cores = min(len(PARTS), cpu_count())
    which = "" if dtype == "float32" else f" in {dtype}"
    guess = f"~{ESTIMATE_S // cores}-{ESTIMATE_S}" if cores > 1 else f"~{ESTIMATE_S}"
    out(f"inferlab: compiling the engine's kernels{which} for this CPU, once (numba caches "
        f"them), {guess} s on {cores} CPU{'s' if cores > 1 else ''} ...")
    t0 = time.perf_counter()
    # plain subprocesses, not multiprocessing: spawn would re-run the user's script or
    # notebook's __main__ in each worker
    code = ("import sys; from inferlab.model.precompile import compile_part; "
            "compile_part(sys.argv[1], int(sys.argv[2]), sys.argv[3] == '1', *sys.argv[4:])")
    failed = []
    # the workers compile the parallel kernels too, whatever this process's thread count
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_NUM_THREADS"}
    for i in range(0, len(PARTS), cores):
        procs = [(p, subprocess.Popen([sys.executable, "-c", code, p, str(num_layers),
                                       "1" if bias else "0", dtype, linear_backend],
                                      env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True))
                 for p in PARTS[i:i + cores]]
        for p, proc in procs:
            _, err = proc.communicate()
            if proc.returncode:
                failed.append(f"{p}: {err.strip().splitlines()[-1] if err.strip() else proc.returncode}")
            elif i + cores < len(PARTS):            # one at a time: say how far it got
                out(f"inferlab: ... {p} compiled ({time.perf_counter() - t0:.0f} s)")
    if failed:
        out(f"inferlab: compiling in worker processes failed ({'; '.join(failed)}); "
            "compiling in this one")
        return None
    took = time.perf_counter() - t0
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(f"compiled in {took:.1f} s\n")
    except OSError:
        pass
    out(f"inferlab: kernels compiled in {took:.0f} s; later starts on this CPU load them")
    return took
