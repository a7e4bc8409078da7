"""Paged-attention kernels: a torch reference, numba CPU kernels, numba CUDA kernels.

Every entry point takes a ``backend=`` argument ("reference", "numba-cpu", "numba-cuda";
None = the best available for where the tensors live).
"""
from __future__ import annotations

from . import reference

BACKENDS = ("reference",)


def available_backends() -> tuple[str, ...]:
    return BACKENDS


def resolve_backend(name: str | None, device: str = "cpu") -> str:
    if name in (None, "auto"):
        return "reference"
    if name not in ("reference", "numba-cpu", "numba-cuda"):
        raise ValueError(f"attention backend must be one of 'auto', 'reference', 'numba-cpu', "
                         f"'numba-cuda'; got {name!r}")
    if name not in BACKENDS:
        raise ValueError(f"attention backend {name!r} is not available here")
    return name


def write_kv(k, v, k_cache, v_cache, slot_mapping, backend=None):
    return reference.write_kv(k, v, k_cache, v_cache, slot_mapping)


def paged_attention_decode(q, k_cache, v_cache, block_tables, seq_lens, scale, backend=None):
    return reference.paged_attention_decode(q, k_cache, v_cache, block_tables, seq_lens, scale)


def paged_attention_prefill(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale,
                            backend=None):
    return reference.paged_attention_prefill(q, k_cache, v_cache, block_tables, seq_lens,
                                             query_start_loc, scale)
