"""How this CPU runs half precision: which instructions oneDNN can use for bf16 and fp16 GEMMs.

The engine's half-precision GEMMs on oneDNN (model/linear.py) run the kernels oneDNN picks at
run time from what the CPU offers, best first:

* ``amx``          Intel AMX tiles (Sapphire Rapids and later): bf16 (and fp16 on AMX-FP16)
                   matrix multiply in hardware, fp32 accumulation;
* ``avx512-bf16``  AVX512-BF16 dot products (AMD Zen 4, Intel Cooper Lake and later): two bf16
                   products summed into fp32 per lane;
* ``avx512-fp16``  AVX512-FP16 (Intel Sapphire Rapids) for fp16;
* ``converted``    AVX512 without half-precision arithmetic: oneDNN widens the half values
                   to fp32 and multiplies there (correct, slower than fp32 itself);
* ``aten``         oneDNN cannot run the dtype at all (no AVX512): torch's own kernels do
                   (``linear_backend="torch"``; model/linear.py refuses the oneDNN ones).

``ONEDNN_MAX_CPU_ISA`` (oneDNN's own switch, read when it first runs) caps what it may use:
``AVX512_CORE`` forces the converted path and ``AVX2`` the aten one on any machine, which is
how the tests check each path (tests/test_cpu_features.py reads what oneDNN says it ran).

Beside oneDNN, the engine's own numba GEMM multiplies bf16 with AVX512-BF16 dot products where
the CPU has them (kernels/gemm_cpu.py; ``NUMBA_CPU_FEATURES`` without ``avx512bf16`` turns it
off, which is how the tests check the fallback); where both can run, the faster one measured
on this CPU does (model/linear_choice.py). Attention runs in the numba CPU kernels, which read
the half values, widen them to fp32 in registers and accumulate in fp32, the same on every CPU.
"""
from __future__ import annotations

import functools
import os

# oneDNN's ISA names (ONEDNN_MAX_CPU_ISA), lowest first; aliases share a rank
_ISA_RANK = {name: rank for rank, names in enumerate((
    ("SSE41",), ("AVX",), ("AVX2",), ("AVX2_VNNI",), ("AVX2_VNNI_2",), ("AVX512_CORE",),
    ("AVX512_CORE_VNNI",), ("AVX512_CORE_BF16",), ("AVX512_CORE_FP16", "AVX10_1_512"),
    ("AVX512_CORE_AMX", "AVX10_1_512_AMX"), ("AVX512_CORE_AMX_FP16", "AVX10_1_512_AMX_FP16"),
    ("AVX10_2_512",), ("AVX10_2_512_AMX_2",), ("ALL", "DEFAULT"))) for name in names}
_NEEDS = {"avx512-bf16": "AVX512_CORE_BF16", "avx512-fp16": "AVX512_CORE_FP16",
          "amx": "AVX512_CORE_AMX", "amx-fp16": "AVX512_CORE_AMX_FP16"}


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (/proc/cpuinfo; empty where there is none, e.g. macOS)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def cpu_name() -> str:
    """The CPU's model name as ``lscpu`` prints it (from /proc/cpuinfo)."""
    import platform
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _allowed(isa: str, cap: str | None) -> bool:
    """Whether oneDNN may use ``isa`` under ``ONEDNN_MAX_CPU_ISA=cap``."""
    if not cap:
        return True
    rank = _ISA_RANK.get(cap.upper())
    if rank is None:
        return True                      # a name oneDNN does not know: it ignores it too
    return _ISA_RANK[_NEEDS[isa]] <= rank


def onednn_runs(dtype: str) -> bool:
    """Whether oneDNN can run ``dtype`` GEMMs here at all (torch asks oneDNN, cap included)."""
    import torch
    check = {"bfloat16": torch.ops.mkldnn._is_mkldnn_bf16_supported,
             "float16": torch.ops.mkldnn._is_mkldnn_fp16_supported}[dtype]
    return torch.backends.mkldnn.is_available() and bool(check())


def half_path(dtype: str, flags: frozenset[str] | None = None, cap: str | None = None,
              onednn: bool | None = None) -> str:
    """How ``dtype`` ("bfloat16" / "float16") GEMMs run here: "amx", "avx512-bf16",
    "amx-fp16", "avx512-fp16", "converted" or "aten"; "float32" for float32. ``flags``,
    ``cap`` and ``onednn`` default to this machine's."""
    if dtype == "float32":
        return "float32"
    flags = cpu_flags() if flags is None else flags
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA") if cap is None else cap
    if dtype == "bfloat16":
        candidates = (("amx", "amx_bf16"), ("avx512-bf16", "avx512_bf16"))
    elif dtype == "float16":
        candidates = (("amx-fp16", "amx_fp16"), ("avx512-fp16", "avx512_fp16"))
    else:
        raise ValueError(f"not a half-precision dtype: {dtype!r}")
    if not (onednn_runs(dtype) if onednn is None else onednn):
        return "aten"
    for name, flag in candidates:
        if flag in flags and _allowed(name, cap):
            return name
    return "converted"
