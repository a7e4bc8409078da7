"""The linear layers' matrix multiply: torch's reference path or oneDNN, with or without
prepacked weights. ~90% of a step on a CPU is these GEMMs (BENCHMARKS.md, "Where a step's
time goes").

* ``"torch"``: ``torch.nn.functional.linear`` (MKL on x86). The readable reference path;
  the only one on a GPU.
* ``"onednn"``: oneDNN's matmul (``torch.ops.mkldnn._linear_pointwise``, the op
  ``torch.compile`` emits for a frozen CPU linear) on the same weight tensors: no extra
  memory; ~1.3-1.8x faster than MKL here at 1-32 rows.
* ``"onednn-packed"``: the weights also reordered once into oneDNN's blocked layout (a copy,
  as large as the weights: +0.54 GB for SmolLM2 in fp32); ~2-2.6x faster at 1-32 rows.
* ``"auto"``: ``onednn-packed`` when the copy fits comfortably in free memory (less than a
  third of it), else ``onednn``; ``torch`` where oneDNN cannot run (GPU, other dtypes).

Outputs agree with the reference to float32 rounding (summation order differs, ~1e-4
absolute on these layers); greedy tokens are checked against transformers and vLLM by the
parity tests with every backend.
"""
from __future__ import annotations

import torch

LINEAR_BACKENDS = ("torch", "onednn", "onednn-packed")
PACK_HINT_ROWS = 32      # the row count oneDNN lays the packed weights out for (any count runs)
_PACKED_ATTR = "_inferlab_packed"


def unavailable(name: str, device: str, dtype) -> str | None:
    """Why linear backend ``name`` cannot run here, or None when it can."""
    if name == "torch":
        return None
    if not str(device).startswith("cpu"):
        return f"oneDNN linear runs on the CPU only (the model is on {device})"
    if dtype not in (torch.float32, torch.bfloat16):
        return f"oneDNN linear here takes float32 or bfloat16 weights, not {dtype}"
    if not torch.backends.mkldnn.is_available():
        return "this torch build has no oneDNN (mkldnn)"
    return None


def resolve(name: str, device: str, dtype, weight_bytes: int, free_bytes: int) -> str:
    """The concrete backend for ``name``, or ValueError naming why it cannot run."""
    if name == "auto":
        if unavailable("onednn", device, dtype) is not None:
            return "torch"
        return "onednn-packed" if 3 * weight_bytes < free_bytes else "onednn"
    if name not in LINEAR_BACKENDS:
        raise ValueError(f"linear backend must be 'auto' or one of {LINEAR_BACKENDS}; got {name!r}")
    why = unavailable(name, device, dtype)
    if why is not None:
        raise ValueError(f"linear backend {name!r} is not available: {why}")
    return name


def _pointwise(x, w, bias):
    return torch.ops.mkldnn._linear_pointwise(x, w, bias, "none", [], "")


class Linear:
    """``y = x @ w.T + b`` by one backend. ``prepare(w, owner)`` returns what ``__call__``
    takes in place of ``w``: the weight itself, or its packed copy, which is kept on
    ``owner`` (the model's own module) so that every engine sharing a cached model shares
    one packed copy too."""

    def __init__(self, backend: str):
        self.backend = backend
        self._fn = torch.nn.functional.linear if backend == "torch" else _pointwise

    def prepare(self, w: torch.Tensor, owner) -> torch.Tensor:
        if self.backend != "onednn-packed":
            return w
        cache = getattr(owner, _PACKED_ATTR, None)
        key = (w.data_ptr(), tuple(w.shape))
        if cache is None or cache[0] != key:
            with torch.no_grad():
                cache = (key, torch.ops.mkldnn._reorder_linear_weight(w, PACK_HINT_ROWS))
            object.__setattr__(owner, _PACKED_ATTR, cache)   # plain attribute, not a module
        return cache[1]

    def __call__(self, x: torch.Tensor, w: torch.Tensor, bias=None) -> torch.Tensor:
        return self._fn(x, w, bias)
