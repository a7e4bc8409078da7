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
  here, level with it at 2048; single rows through the numba GEMV (``kernels.gemv``). In
  bfloat16 (CPUs with AVX512-BF16) the panels hold bf16 pairs and the GEMM multiplies with
  ``vdpbf16ps``: 1.2-1.5x oneDNN's packed bf16 GEMM at 8-64 rows on Zen 4.
* ``"numba+onednn"``, ``"numba+onednn-packed"``: a single row (one sequence decoding: the
  token stream a reader watches) through a numba GEMV that streams the plain fp32 weights
  over all cores (~1.6x oneDNN's packed GEMV here); more rows as the oneDNN backend named.
  With these backends and numba attention the runner picks the fast forward
  (model/fused.py): one sequence decoding as a single numba call over all layers, more rows
  with the small ops between the GEMMs in numba kernels.
* ``"auto"`` (model/linear_choice.py ``resolve``): ``numba`` when the packed copy fits
  comfortably in free memory (less than a third of it), else ``numba+onednn``; ``torch``
  where oneDNN cannot run (GPU, other dtypes, bfloat16 where oneDNN cannot run it: no
  AVX512); without numba, the oneDNN backend alone. In bfloat16, oneDNN uses AMX or
  AVX512-BF16 where the CPU has them (model/cpu_features.py) and the numba GEMM AVX512-BF16
  dot products (kernels/gemm_cpu.py); where both can run, ``auto`` takes the faster one
  measured on this CPU (model/linear_choice.py), not a rule.

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
        if dtype == torch.bfloat16 and name != "numba":
            return "the numba GEMV takes float32 weights (in bfloat16: linear_backend='numba')"
        why = numba_runs(dtype)
        if why is not None or name == "numba":
            return why
    if dtype not in (torch.float32, torch.bfloat16):
        return f"oneDNN linear here takes float32 or bfloat16 weights, not {dtype}"
    if not torch.backends.mkldnn.is_available():
        return "this torch build has no oneDNN (mkldnn)"
    if dtype == torch.bfloat16 and not cpu_features.onednn_runs("bfloat16"):
        return ("oneDNN cannot run bfloat16 on this CPU (it needs AVX512; or ONEDNN_MAX_CPU_ISA "
                "caps it below): use linear_backend='torch'")
    return None


def numba_runs(dtype) -> str | None:
    """Why the numba GEMM cannot take ``dtype`` weights here, or None when it can: float32
    anywhere numba is installed; bfloat16 where the CPU has AVX512-BF16 (kernels/gemm_cpu.py)."""
    if dtype not in (torch.float32, torch.bfloat16):
        return f"the numba GEMM takes float32 or bfloat16 weights, not {dtype}"
    if importlib.util.find_spec("numba") is None:
        return "numba is not installed"
    if dtype == torch.bfloat16:
        if not kernels.bf16_gemm_available():
            return "the numba bfloat16 GEMM needs AVX512-BF16, which this CPU lacks"
    return None


def kernel_array(t: torch.Tensor):
    """A CPU tensor as a numpy array for the numba kernels (no copy when contiguous):
    bfloat16 as its uint16 bits (numpy has no bfloat16)."""
    t = t.detach().contiguous()
    return t.view(torch.int16).numpy().view("uint16") if t.dtype == torch.bfloat16 else t.numpy()


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
                return kernels.pack_panels(kernel_array(w))
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

    def packed_copies(self) -> list:
        """The packed copies this backend multiplies with (not the rest of a shared store)."""
        return [p for _, p in self._packed.values()]

    def __call__(self, x: torch.Tensor, w: torch.Tensor, bias=None) -> torch.Tensor:
        """``F.linear(x, w, bias)`` in ``x``'s dtype (which is ``w``'s)."""
        if self.backend == "torch":
            return torch.nn.functional.linear(x, w, bias)
        if self._gemv and x.shape[0] == 1 and w.dtype == torch.float32:
            return gemv(x, w, bias)
        if self._pack == "numba":
            return self.float_out(x, w, bias).to(x.dtype)
        hit = self._packed.get(id(w))
        return onednn_linear(x, hit[1] if hit is not None else w, bias)

    def float_out(self, x: torch.Tensor, w: torch.Tensor, bias=None) -> torch.Tensor:
        """``F.linear`` in float32 for float32 rows ``x`` and weights in the model's dtype: a
        bfloat16 model's GEMM takes the rows rounded to bf16 and accumulates in fp32 (the
        numba GEMM writes its fp32 sums as they are; other backends widen their bf16 out)."""
        if self._gemv and x.shape[0] == 1 and w.dtype == torch.float32:
            return gemv(x.float(), w, bias)
        hit = self._packed.get(id(w)) if self._pack == "numba" else None
        if hit is None:                     # not the numba GEMM, or a weight never prepared
            if self._pack == "numba":
                return torch.nn.functional.linear(x.to(w.dtype), w, bias).float()
            return self(x.to(w.dtype), w, bias).float()
        y = torch.empty((x.shape[0], w.shape[0]), dtype=torch.float32)
        kernels.gemm(kernel_array(x.to(w.dtype)), hit[1], y.numpy())
        return y if bias is None else y + bias
