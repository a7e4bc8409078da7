"""Paged-attention kernels: a torch reference, numba CPU kernels, numba CUDA kernels.

Every entry point takes numpy arrays or torch tensors (torch in -> torch out) and a
``backend=`` argument: "reference", "numba-cpu", "numba-cuda", or None/"auto" = the best
available for where the data lives (numba-cuda for CUDA tensors, otherwise the CPU backend that
``python -m inferlab.kernels.bench`` measured fastest: numba-cpu). numba is imported only when
a numba backend is first used, so ``import inferlab.kernels`` stays cheap.

Shapes are documented in ``reference.py``; every backend takes exactly the same arguments.
"""
from __future__ import annotations

import functools
import importlib.util

import numpy as np

from inferlab.kernels import reference

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
    if _is_torch(x):
        if x.device.type != "cpu":
            raise ValueError("the numba-cpu backend needs CPU tensors; got " + str(x.device))
        return x.detach().numpy()                       # shares memory (write_kv is in place)
    return np.asarray(x)


def _to_torch(x):
    import torch
    return x if _is_torch(x) else torch.from_numpy(np.asarray(x))


def _cuda_module():
    from inferlab.kernels import numba_cuda
    return numba_cuda


# ---- entry points ----------------------------------------------------------------------------

def write_kv(k, v, k_cache, v_cache, slot_mapping, backend=None) -> None:
    """Scatter k, v [num_tokens, num_kv_heads, head_dim] into the caches, in place."""
    b = _backend_for(backend, k_cache)
    if b == "reference":
        reference.write_kv(_to_torch(k), _to_torch(v), _to_torch(k_cache), _to_torch(v_cache),
                           _to_torch(slot_mapping))
    elif b == "numba-cpu":
        from inferlab.kernels import numba_cpu
        numba_cpu.write_kv(*map(_to_numpy, (k, v, k_cache, v_cache, slot_mapping)))
    else:
        _cuda_module().write_kv(k, v, k_cache, v_cache, slot_mapping)


def paged_attention_decode(q, k_cache, v_cache, block_tables, seq_lens, scale, backend=None):
    """One query per sequence: q [num_seqs, num_heads, head_dim] -> same shape."""
    b = _backend_for(backend, q)
    args = (q, k_cache, v_cache, block_tables, seq_lens)
    if b == "reference":
        out = reference.paged_attention_decode(*map(_to_torch, args), scale)
        return out if _is_torch(q) else out.numpy()
    if b == "numba-cpu":
        from inferlab.kernels import numba_cpu
        out = numba_cpu.paged_attention_decode(*map(_to_numpy, args), scale)
        return _to_torch(out) if _is_torch(q) else out
    return _cuda_module().paged_attention_decode(*args, scale)


def paged_attention_prefill(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale,
                            backend=None):
    """Packed new tokens q [num_tokens, num_heads, head_dim], causal over each sequence."""
    b = _backend_for(backend, q)
    args = (q, k_cache, v_cache, block_tables, seq_lens, query_start_loc)
    if b == "reference":
        out = reference.paged_attention_prefill(*map(_to_torch, args), scale)
        return out if _is_torch(q) else out.numpy()
    if b == "numba-cpu":
        from inferlab.kernels import numba_cpu
        out = numba_cpu.paged_attention_prefill(*map(_to_numpy, args), scale)
        return _to_torch(out) if _is_torch(q) else out
    return _cuda_module().paged_attention_prefill(*args, scale)
