"""The linear layers' matrix multiply: torch's reference path or oneDNN, with or without
prepacked weights, and a numba GEMV for single rows. With torch's GEMMs ~90% of a CPU step was
these (BENCHMARKS.md, section "Speed").

* ``"torch"``: ``torch.nn.functional.linear`` (MKL on x86). The readable reference path;
  the only one on a GPU.
* ``"onednn"``: oneDNN's matmul (``torch.ops.mkldnn._linear_pointwise``, the op
  ``torch.compile`` emits for a frozen CPU linear) on the same weight tensors: no extra
  memory; ~1.3-1.8x faster than MKL here at 1-32 rows.
* ``"onednn-packed"``: the weights also reordered once into oneDNN's blocked layout (a copy,
  as large as the weights: +0.54 GB for SmolLM2 in fp32); ~2-2.6x faster at 1-32 rows.
* ``"numba"``: the weights also copied once into 32-column panels (as large as the weights)
  for a numba GEMM (``inferlab.kernels.gemm``): ~1.2-1.6x oneDNN's packed GEMM at 8-64 rows
  here, level with it at 2048; single rows through the numba GEMV (``kernels.gemv``).
* ``"numba+onednn"``, ``"numba+onednn-packed"``: a single row (one sequence decoding: the
  token stream a reader watches) through a numba GEMV that streams the plain fp32 weights
  over all cores (~1.6x oneDNN's packed GEMV here); more rows as the oneDNN backend named.
  With these backends and numba attention the runner picks the fast forward
  (model/fused.py): one sequence decoding as a single numba call over all layers, more rows
  with the small ops between the GEMMs in numba kernels.
* ``"auto"``: ``numba`` when the packed copy fits comfortably in free memory (less than a
  third of it), else ``numba+onednn``; ``torch`` where oneDNN cannot run (GPU,
  other dtypes, bfloat16 where oneDNN cannot run it: no AVX512); without numba, the oneDNN
  backend alone. In bfloat16, oneDNN uses AMX or AVX512-BF16 where the CPU has them
  (model/cpu_features.py).

Outputs agree with the reference to float32 rounding (summation order differs, ~1e-4
absolute on these layers); greedy tokens are checked against transformers and vLLM by the
parity tests with every backend.
"""
from __future__ import annotations

import importlib.util

import torch

from inferlab import kernels

from . import cpu_features

LINEAR_BACKENDS = ("torch", "onednn", "onednn-packed", "numba", "numba+onednn",
                   "numba+onednn-packed")
PACK_HINT_ROWS = 32      # the row count oneDNN lays the packed weights out for (any count runs)


def unavailable(name: str, device: str, dtype) -> str | None:
    """Why linear backend ``name`` cannot run here, or None when it can."""
    if name == "torch":
        return None
    if not str(device).startswith("cpu"):
        return f"the {name} linear backend runs on the CPU only (the model is on {device})"
    if name.startswith("numba"):
        if dtype != torch.float32:
            return f"the numba GEMV and GEMM take float32 weights, not {dtype}"
        if importlib.util.find_spec("numba") is None:
            return "numba is not installed"
        if name == "numba":
            return None
    if dtype not in (torch.float32, torch.bfloat16):
        return f"oneDNN linear here takes float32 or bfloat16 weights, not {dtype}"
    if not torch.backends.mkldnn.is_available():
        return "this torch build has no oneDNN (mkldnn)"
    if dtype == torch.bfloat16 and not cpu_features.onednn_runs("bfloat16"):
        return ("oneDNN cannot run bfloat16 on this CPU (it needs AVX512; or ONEDNN_MAX_CPU_ISA "
                "caps it below): use linear_backend='torch'")
    return None


def resolve(name: str, device: str, dtype, weight_bytes: int, free_bytes: int) -> str:
    """The concrete backend for ``name``, or ValueError naming why it cannot run."""
    if name == "auto":
        fits = 3 * weight_bytes < free_bytes
        for choice in ("numba" if fits else "numba+onednn", "onednn-packed" if fits else "onednn"):
            if unavailable(choice, device, dtype) is None:
                return choice
        return "torch"
    if name not in LINEAR_BACKENDS:
        raise ValueError(f"linear backend must be 'auto' or one of {LINEAR_BACKENDS}; got {name!r}")
    why = unavailable(name, device, dtype)
    if why is not None:
        raise ValueError(f"linear backend {name!r} is not available: {why}")
    return name


def gemv(x: torch.Tensor, w: torch.Tensor, bias=None) -> torch.Tensor:
    """``F.linear`` for one row of float32 ``x`` [1, in] and a contiguous ``w`` [out, in]."""
    y = torch.empty((1, w.shape[0]), dtype=x.dtype)
    kernels.gemv(w.numpy(), x.reshape(-1).contiguous().numpy(), y[0].numpy())
    return y if bias is None else y + bias


def onednn_linear(x, w, bias=None):
    """oneDNN's ``F.linear`` on plain weights or on ``onednn_pack(w)``."""
    return torch.ops.mkldnn._linear_pointwise(x, w, bias, "none", [], "")


def onednn_pack(w):
    """``w`` [out, in] reordered once into oneDNN's blocked layout for ``PACK_HINT_ROWS``."""
    return torch.ops.mkldnn._reorder_linear_weight(w, PACK_HINT_ROWS)


class Linear:
    """``y = x @ w.T + b`` by one backend. The model keeps its plain weights; ``prepare(w,
    name, store)`` adds what the backend needs beside them (oneDNN's packed copy or the numba
    GEMM's panels), kept in ``store`` under ``name`` (``ModelWeights.packed``: every engine on
    the same weights shares one copy; numba panels may come from the weights cache)."""

    def __init__(self, backend: str):
        self.backend = backend
        self._gemv = backend.startswith("numba")
        self._pack = ("numba" if backend == "numba"
                      else "onednn" if backend.endswith("-packed") else None)
        self._packed: dict[int, tuple[torch.Tensor, object]] = {}

    def _make_packed(self, w: torch.Tensor):
        with torch.no_grad():
            if self._pack == "numba":
                return kernels.pack_panels(w.numpy())
            return onednn_pack(w)

    def prepare(self, w: torch.Tensor, name: str, store: dict) -> torch.Tensor:
        if self._pack:
            key = (self._pack, name)
            if key not in store:
                store[key] = self._make_packed(w)
            self._packed[id(w)] = (w, store[key])                  # w kept: its id stays its own
        return w

    def packed(self, w: torch.Tensor):
        hit = self._packed.get(id(w))
        return hit[1] if hit is not None else None

    def __call__(self, x: torch.Tensor, w: torch.Tensor, bias=None) -> torch.Tensor:
        if self.backend == "torch":
            return torch.nn.functional.linear(x, w, bias)
        if self._gemv and x.shape[0] == 1:
            return gemv(x, w, bias)
        hit = self._packed.get(id(w))
        if self._pack == "numba":
            if hit is None:                          # a weight it was not given to prepare
                return torch.nn.functional.linear(x, w, bias)
            y = torch.empty((x.shape[0], w.shape[0]), dtype=x.dtype)
            kernels.gemm(x.contiguous().numpy(), hit[1], y.numpy())
            return y if bias is None else y + bias
        return onednn_linear(x, hit[1] if hit is not None else w, bias)
