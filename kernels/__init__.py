"""Every compute kernel of the engine, behind this small public API (the model uses nothing else).

Paged attention (``write_kv``, ``paged_attention_decode``, ``paged_attention_prefill``): a torch
reference (reference.py), numba CPU kernels (numba_cpu.py), numba CUDA kernels (numba_cuda.py,
cuda_launch.py). Every entry point takes numpy arrays or torch tensors (torch in -> torch out)
and a ``backend=`` argument: "reference", "numba-cpu", "numba-cuda", or None/"auto" = the best
available for where the data lives (numba-cuda for CUDA tensors, otherwise the CPU backend that
``inferlab bench kernels`` measured fastest: numba-cpu). ``paged_attention_sdpa`` (sdpa.py):
torch's SDPA over K/V gathered from the cache, for long prompt chunks. Shapes are documented in
``reference.py``; every backend takes exactly the same arguments. numba-cpu takes float32,
float16 and bfloat16 (q and caches of one dtype; half read zero copy, float32 accumulation).

The CPU kernels of the fast forward, numpy float32 in, results written in place (their
references are the torch ops of ``inferlab.model.llama``):
``pack_panels`` / ``gemm`` (gemm_cpu.py: a register-tiled GEMM over prepacked weights, float32
or, where the CPU has AVX512-BF16, bfloat16), ``gemv`` (gemv_cpu.py), the row kernels
``rms_rows``, ``add_rms_rows``, ``silu_mul``, ``rotary_write`` (rows_cpu.py), and
``decode_pass`` (decode_cpu.py: one sequence's whole one-token forward as one call). numba is
imported only when a numba kernel is first used, so ``import inferlab.kernels`` stays cheap.
"""
from __future__ import annotations

import functools
import importlib.util
import sys

import numpy as np

if __name__ != "inferlab.kernels":
    # This folder found as a top-level ``kernels`` (a Python started at the repository root):
    # transformers (5.x depends on Hugging Face's ``kernels`` package) imports that name. Step
    # aside: load the installed ``kernels`` from the rest of sys.path in our place, or, where
    # none is installed, an empty module with no file, which transformers reads as "not
    # installed". Nothing of ours is loaded a second time under another name.
    import importlib.machinery
    import os
    import types

    def _real_kernels(name: str):
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != root]
        spec = importlib.machinery.PathFinder.find_spec(name, rest)
        if spec is None or spec.loader is None:
            return types.ModuleType(
                name, "not a package: inferlab's kernels/ folder (installed as inferlab.kernels)")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    sys.modules[__name__] = _real_kernels(__name__)

ALL_BACKENDS = ("reference", "numba-cpu", "numba-cuda")
CPU_AUTO_ORDER = ("numba-cpu", "reference")   # fastest first, per BENCHMARKS.md ## Kernels


@functools.cache
def _unavailable(name: str) -> str | None:
    """Why backend ``name`` cannot run here, or None when it can."""
    if name == "reference":
        return None
    if importlib.util.find_spec("numba") is None:
        return "numba is not installed"
    if name == "numba-cpu":
        return None
    try:
        from numba import cuda
    except Exception as exc:                            # numba-cuda is an optional extra
        return f"numba.cuda cannot be imported ({exc}); pip install numba-cuda"
    try:
        if cuda.is_available():                         # also true in the CUDA simulator
            return None
    except Exception as exc:
        return f"no usable CUDA driver ({exc})"
    return "no CUDA GPU is visible (and NUMBA_ENABLE_CUDASIM is not set)"


def available_backends() -> tuple[str, ...]:
    return tuple(b for b in ALL_BACKENDS if _unavailable(b) is None)


def resolve_backend(name: str | None, device: str = "cpu") -> str:
    """The concrete backend for ``name`` on ``device`` ("cpu", "cuda", "cuda:1", ...)."""
    if name in (None, "auto"):
        if str(device).startswith("cuda"):
            return "numba-cuda" if _unavailable("numba-cuda") is None else "reference"
        return next(b for b in CPU_AUTO_ORDER if _unavailable(b) is None)
    if name not in ALL_BACKENDS:
        raise ValueError(f"attention backend must be 'auto' or one of {ALL_BACKENDS}; "
                         f"got {name!r}")
    why = _unavailable(name)
    if why is not None:
        raise ValueError(f"attention backend {name!r} is not available: {why}")
    return name


# ---- array plumbing: numpy or torch in, the same kind out -------------------------------------

def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch")


def _device_of(x) -> str:
    if _is_torch(x):
        return x.device.type
    return "cuda" if hasattr(x, "__cuda_array_interface__") else "cpu"


def _backend_for(backend, x) -> str:
    return resolve_backend(backend, _device_of(x))


def _to_numpy(x):
    """A numpy view of ``x``, sharing its memory (write_kv is in place). numpy has no bfloat16:
    a bfloat16 tensor comes as its bits, uint16, which the numba-cpu kernels read as bfloat16."""
    if _is_torch(x):
        if x.device.type != "cpu":
            raise ValueError("the numba-cpu backend needs CPU tensors; got " + str(x.device))
        import torch
        x = x.detach()
        if x.dtype == torch.bfloat16:
            return x.view(torch.int16).numpy().view(np.uint16)
        return x.numpy()
    return np.asarray(x)


def _to_torch(x):
    import torch
    return x if _is_torch(x) else torch.from_numpy(np.asarray(x))


def _to_torch_like(out, q):
    """numba-cpu's result (numpy, q's dtype; bfloat16 as its uint16 bits) as a tensor like q."""
    import torch
    if q.dtype == torch.bfloat16:
        return torch.from_numpy(out.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(out)


def _cuda_module():
    from inferlab.kernels import numba_cuda
    return numba_cuda


# ---- entry points ----------------------------------------------------------------------------

def write_kv(k, v, k_cache, v_cache, slot_mapping, backend=None) -> None:
    """Scatter k, v [num_tokens, num_kv_heads, head_dim] into the caches, in place."""
    b = _backend_for(backend, k_cache)
    if b == "reference":
        from inferlab.kernels import reference
        reference.write_kv(_to_torch(k), _to_torch(v), _to_torch(k_cache), _to_torch(v_cache),
                           _to_torch(slot_mapping))
    elif b == "numba-cpu":
        from inferlab.kernels import numba_cpu
        if _is_torch(k_cache):                          # k, v in the cache's dtype (rounded)
            k, v = (x.to(k_cache.dtype) if _is_torch(x) else x for x in (k, v))
        numba_cpu.write_kv(*map(_to_numpy, (k, v, k_cache, v_cache, slot_mapping)))
    else:
        _cuda_module().write_kv(k, v, k_cache, v_cache, slot_mapping)


def paged_attention_decode(q, k_cache, v_cache, block_tables, seq_lens, scale, backend=None):
    """One query per sequence: q [num_seqs, num_heads, head_dim] -> same shape."""
    b = _backend_for(backend, q)
    args = (q, k_cache, v_cache, block_tables, seq_lens)
    if b == "reference":
        from inferlab.kernels import reference
        out = reference.paged_attention_decode(*map(_to_torch, args), scale)
        return out if _is_torch(q) else out.numpy()
    if b == "numba-cpu":
        from inferlab.kernels import numba_cpu
        out = numba_cpu.paged_attention_decode(*map(_to_numpy, args), scale)
        return _to_torch_like(out, q) if _is_torch(q) else out
    return _cuda_module().paged_attention_decode(*args, scale)


def paged_attention_prefill(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale,
                            backend=None):
    """Packed new tokens q [num_tokens, num_heads, head_dim], causal over each sequence."""
    b = _backend_for(backend, q)
    args = (q, k_cache, v_cache, block_tables, seq_lens, query_start_loc)
    if b == "reference":
        from inferlab.kernels import reference
        out = reference.paged_attention_prefill(*map(_to_torch, args), scale)
        return out if _is_torch(q) else out.numpy()
    if b == "numba-cpu":
        from inferlab.kernels import numba_cpu
        out = numba_cpu.paged_attention_prefill(*map(_to_numpy, args), scale)
        return _to_torch_like(out, q) if _is_torch(q) else out
    return _cuda_module().paged_attention_prefill(*args, scale)


# ---- torch SDPA over the paged cache (long prompt chunks) -------------------------------------

def paged_attention_sdpa(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale):
    """``paged_attention_prefill`` through torch's SDPA, one sequence at a time (sdpa.py)."""
    from inferlab.kernels import sdpa
    return sdpa.paged_attention_sdpa(q, k_cache, v_cache, block_tables, seq_lens,
                                     query_start_loc, scale)


SDPA_MIN_TOKENS = 256       # new tokens of one sequence from which SDPA beats numba (sdpa.py)


# ---- the CPU kernels of the fast forward (numba, imported on first use) -----------------------

def pack_panels(w):
    """Weights ``w`` [N, K] packed once for ``gemm``: float32 -> panels [ceil(N / 32), K, 32];
    bfloat16 bits (uint16) -> [ceil(N / 32), K / 2, 64] (see ``bf16_gemm_available``)."""
    from inferlab.kernels import gemm_cpu
    return gemm_cpu.pack(w)


def gemm(x, panels, out):
    """``out[M, N] = x[M, K] @ w.T`` (float32) for ``panels = pack_panels(w)``; ``x`` in the
    panels' dtype (bfloat16 as its uint16 bits)."""
    from inferlab.kernels import gemm_cpu
    return gemm_cpu.gemm(x, panels, out)


def bf16_gemm_available() -> bool:
    """Whether ``gemm`` takes bfloat16 panels here (AVX512-BF16 and numba compiling for it)."""
    if importlib.util.find_spec("numba") is None:
        return False
    from inferlab.kernels import gemm_cpu
    return gemm_cpu.bf16_dot_available()


def gemv(w, x, y):
    """``y[N] = w[N, K] @ x[K]``, rows over all cores."""
    from inferlab.kernels import gemv_cpu
    return gemv_cpu.gemv(w, x, y)


def read_all(a) -> float:
    """Sum of a float32 array over all cores: one read of it (memory-bandwidth probes)."""
    from inferlab.kernels import gemv_cpu
    return gemv_cpu.read_all(a)


def rms_rows(x, w, eps, out) -> None:
    """``out[t] = rms_norm(x[t]) * w`` for every row."""
    from inferlab.kernels import rows_cpu
    rows_cpu.rms_rows(x, w, eps, out)


def add_rms_rows(x, y, w, eps, out) -> None:
    """``x[t] += y[t]`` (the residual add), then ``out[t] = rms_norm(x[t]) * w``."""
    from inferlab.kernels import rows_cpu
    rows_cpu.add_rms_rows(x, y, w, eps, out)


def silu_mul(gate_up, act) -> None:
    """``act[t] = silu(gate[t]) * up[t]`` for ``gate_up[t] = [gate | up]``."""
    from inferlab.kernels import rows_cpu
    rows_cpu.silu_mul(gate_up, act)


def rotary_write(qkv, cos, sin, k_cache, v_cache, slot_mapping, q) -> None:
    """Rotary on the q and k parts of ``qkv`` [T, (H + 2 KVH) D]: q into ``q`` [T, H, D],
    k and v into the paged caches [blocks, bs, KVH, D] at ``slot_mapping`` [T]."""
    from inferlab.kernels import rows_cpu
    rows_cpu.rotary_write(qkv, cos, sin, k_cache, v_cache, slot_mapping, q)


def decode_pass(token, pos, table, weights, k_cache, v_cache, logits) -> None:
    """One sequence's whole one-token forward as one numba call (decode_cpu.py)."""
    from inferlab.kernels import decode_cpu
    decode_cpu.decode_pass(token, pos, table, weights, k_cache, v_cache, logits)


def cuda_probe_kernels():
    """The GPU probe's micro-kernels (probe_cuda.py: launch timing, a kernel for CUDA-graph
    capture, bf16 sums at three load widths); numba-cuda imported on first use."""
    from inferlab.kernels import probe_cuda
    return probe_cuda


__all__ = ["ALL_BACKENDS", "available_backends", "resolve_backend", "write_kv",
           "paged_attention_decode", "paged_attention_prefill", "paged_attention_sdpa",
           "SDPA_MIN_TOKENS", "pack_panels", "gemm", "bf16_gemm_available", "gemv", "read_all",
           "rms_rows", "add_rms_rows", "silu_mul", "rotary_write", "decode_pass",
           "cuda_probe_kernels"]
