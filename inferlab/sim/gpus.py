"""Datasheet profiles of named GPUs, and how much of their peak a serving engine reaches."""
from __future__ import annotations

from dataclasses import dataclass


# Large GEMMs reach ~60-70% of the datasheet dense peak in serving engines (model FLOPs
# utilisation reported for vLLM/TensorRT-LLM prefill); attention and small-batch kernels
# do worse, so we take the lower end.
FLOPS_EFFICIENCY = 0.6
# Streaming kernels (weight reads in decode GEMV, paged-attention KV reads) sustain about
# 80% of the HBM datasheet bandwidth.
BANDWIDTH_EFFICIENCY = 0.8
# Per step: scheduling, input preparation, sampling and the host/device sync (~0.25 ms in
# vLLM-class engines with CUDA graphs) ...
STEP_OVERHEAD_S = 250e-6
# ... plus launch latency of the 5-8 kernels each layer runs (~1.5 us each).
LAYER_OVERHEAD_S = 10e-6
# Fixed latency of one all-reduce (NCCL ring set-up and synchronisation) on top of bytes/bw.
ALLREDUCE_LATENCY_S = 8e-6

TB = 1e12
GB = 1e9


@dataclass(slots=True, frozen=True)
class GPUProfile:
    """Datasheet numbers of one accelerator (dense, no structured sparsity)."""

    name: str
    hbm_bandwidth: float        # bytes/s
    flops_bf16: float           # dense bf16/fp16 tensor-core FLOP/s
    flops_tf32: float           # dense tf32 tensor-core FLOP/s (what fp32 matmuls use)
    flops_fp32: float           # non-tensor fp32 FLOP/s
    memory_bytes: int
    interconnect_bandwidth: float   # bytes/s per direction between GPUs (NVLink, else PCIe)
    interconnect: str
    # How much of the peak a serving engine reaches, and its fixed costs. Datasheet GPUs take
    # the module's estimates; a measured profile (``this_cpu.py``) brings its own.
    flops_efficiency: float = FLOPS_EFFICIENCY
    bandwidth_efficiency: float = BANDWIDTH_EFFICIENCY
    step_overhead_s: float = STEP_OVERHEAD_S
    layer_overhead_s: float = LAYER_OVERHEAD_S
    note: str = "datasheet"

    def peak_flops(self, dtype_bytes: int) -> float:
        # fp32 weights run their matmuls as tf32 on tensor cores (torch's allow_tf32 path).
        return self.flops_bf16 if dtype_bytes <= 2 else self.flops_tf32


# Published datasheet figures (SXM parts where a form factor is not named).
GPUS: dict[str, GPUProfile] = {p.name: p for p in (
    GPUProfile("H100", 3.35 * TB, 989.4e12, 494.7e12, 66.9e12, 80 * GB, 450 * GB, "NVLink 4"),
    GPUProfile("H200", 4.8 * TB, 989.4e12, 494.7e12, 66.9e12, 141 * GB, 450 * GB, "NVLink 4"),
    GPUProfile("B200", 8.0 * TB, 2250e12, 1125e12, 75e12, 180 * GB, 900 * GB, "NVLink 5"),
    GPUProfile("A100", 2.039 * TB, 312e12, 156e12, 19.5e12, 80 * GB, 300 * GB, "NVLink 3"),
    GPUProfile("A10", 600 * GB, 125e12, 62.5e12, 31.2e12, 24 * GB, 32 * GB, "PCIe 4"),
    GPUProfile("L4", 300 * GB, 121e12, 60e12, 30.3e12, 24 * GB, 32 * GB, "PCIe 4"),
)}
# NVLink figures above are per direction (H100: 900 GB/s total bidirectional).
ALIASES = {"h100sxm": "H100", "h100sxm5": "H100", "h200sxm": "H200", "a10080gb": "A100",
            "a100sxm": "A100", "a100sxm80gb": "A100", "b200sxm": "B200"}
