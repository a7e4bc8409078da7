"""A roofline cost model of one engine step on a named GPU (the clocks in ``clock.py`` use it).

A step's duration is ``max(FLOPs / achievable FLOP/s, bytes / achievable bandwidth)``
plus a fixed per-step overhead. Bytes are the weights (read once per step, shared by the
whole batch) plus the KV cache read by attention and the KV written for the new tokens.
This is why decode is memory-bound (few tokens share one pass over the weights) and a
long prefill is compute-bound (thousands of tokens share it).

The tokens still come from the real model running on this machine; only the *time* is
priced as if the step ran on the named GPU, for the real model shape or a bigger one.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..core.shapes import ModelShape, kv_bytes_per_token, weight_bytes
from ..errors import InvalidInputError, check_type
from .gpus import ALLREDUCE_LATENCY_S, GPUProfile


def _check_chunks(chunks) -> list[tuple[int, int]]:
    out = []
    for i, chunk in enumerate(chunks):
        n, ctx = chunk
        if n < 0 or ctx < n:
            raise InvalidInputError(f"chunks[{i}] must be (new_tokens >= 0, context_len >= "
                                    f"new_tokens), got {chunk!r}")
        out.append((int(n), int(ctx)))
    return out


def step_flops(shape: ModelShape, chunks) -> float:
    """FLOPs of one step; ``chunks`` is [(new_tokens, context_len_after_step), ...]."""
    chunks = _check_chunks(chunks)
    tokens = sum(n for n, _ in chunks)
    seqs = sum(1 for n, _ in chunks if n)
    linear = 2.0 * shape.num_layers * shape.layer_params * tokens
    # Logits are computed only for each sequence's last position, not the whole chunk.
    lm_head = 2.0 * shape.vocab_size * shape.hidden_size * seqs
    # New token i of a chunk attends to (ctx - n + i + 1) keys: n*ctx - n(n-1)/2 pairs;
    # each pair costs 2*head_dim for QK^T and 2*head_dim for PV, per query head and layer.
    pairs = sum(n * ctx - n * (n - 1) / 2 for n, ctx in chunks)
    attn = 4.0 * shape.num_layers * shape.num_heads * shape.head_dim * pairs
    return linear + lm_head + attn


def step_bytes(shape: ModelShape, chunks, dtype_bytes: int = 2) -> float:
    """HBM bytes moved by one step: weights once, the KV read by attention, the KV written."""
    chunks = _check_chunks(chunks)
    if not chunks or not any(n for n, _ in chunks):
        return 0.0
    # The embedding table is gathered row by row; only the LM head reads a vocab x hidden
    # matrix (which, when tied, is the same table), so count vocab*hidden once.
    weights = (shape.num_layers * shape.layer_params + shape.hidden_size
               + shape.vocab_size * shape.hidden_size) * dtype_bytes
    kv = kv_bytes_per_token(shape, dtype_bytes)
    kv_read = sum(ctx for n, ctx in chunks if n) * kv
    kv_written = sum(n for n, _ in chunks) * kv
    return float(weights + kv_read + kv_written)


def allreduce_time(gpu: GPUProfile, nbytes: float, tp: int) -> float:
    """One ring all-reduce of ``nbytes`` across ``tp`` GPUs: 2(tp-1)/tp of the data crosses
    each link, plus a fixed latency."""
    if tp <= 1:
        return 0.0
    return ALLREDUCE_LATENCY_S + 2 * (tp - 1) / tp * nbytes / gpu.interconnect_bandwidth


def step_time(gpu: GPUProfile, shape: ModelShape, chunks, dtype_bytes: int = 2,
              tp: int = 1) -> float:
    """Seconds one engine step takes on ``gpu`` (tensor-parallel over ``tp`` of them)."""
    check_type("tp", tp, int, "an int >= 1")
    if tp < 1 or shape.num_kv_heads % tp and tp % shape.num_kv_heads:
        raise InvalidInputError(f"tp must be >= 1 and divide or be a multiple of num_kv_heads "
                                f"({shape.num_kv_heads}), got {tp}")
    chunks = _check_chunks(chunks)
    tokens = sum(n for n, _ in chunks)
    if tokens == 0:
        return 0.0
    t = step_terms(gpu, shape, chunks, dtype_bytes, tp)
    # the same sum, in the same order, as before the terms were split out
    return ((t["compute"] + t["memory"]) + t["comm"] + gpu.step_overhead_s
            + gpu.layer_overhead_s * shape.num_layers)


def step_terms(gpu: GPUProfile, shape: ModelShape, chunks, dtype_bytes: int = 2,
               tp: int = 1) -> dict[str, float]:
    """``step_time`` split into its terms (seconds): the roofline ("compute" or "memory",
    whichever is larger, the other 0), "comm" and "overhead". The bench that validates the
    clock reads them to say which term misses."""
    chunks = _check_chunks(chunks)
    if not sum(n for n, _ in chunks):
        return {"compute": 0.0, "memory": 0.0, "comm": 0.0, "overhead": 0.0}
    tokens = sum(n for n, _ in chunks)
    compute = step_flops(shape, chunks) / tp / (gpu.peak_flops(dtype_bytes)
                                                 * gpu.flops_efficiency)
    memory = (step_bytes(shape, chunks, dtype_bytes) / tp
              / (gpu.hbm_bandwidth * gpu.bandwidth_efficiency))
    # Megatron-style TP: two all-reduces of the activations per layer (after attention and
    # after the MLP); they sit on the critical path, so they add rather than overlap.
    comm = 2 * shape.num_layers * allreduce_time(gpu, tokens * shape.hidden_size * dtype_bytes, tp)
    overhead = gpu.step_overhead_s + gpu.layer_overhead_s * shape.num_layers
    bound = "compute" if compute >= memory else "memory"
    return {"compute": compute if bound == "compute" else 0.0,
            "memory": memory if bound == "memory" else 0.0, "comm": comm, "overhead": overhead}


@dataclass(slots=True, frozen=True)
class TensorParallelPlan:
    """What splitting a model over ``tp`` GPUs does to each device (for the multi-GPU chapter)."""

    tp: int
    weight_bytes_per_gpu: float
    kv_bytes_per_token_per_gpu: float
    kv_tokens_capacity: int         # tokens of KV that fit beside the weights on each GPU
    allreduce_per_layer_s: float    # one layer's two all-reduces for a single decode token


def tensor_parallel(gpu: GPUProfile, shape: ModelShape, tp: int, dtype_bytes: int = 2,
                    memory_fraction: float = 0.9) -> TensorParallelPlan:
    if tp < 1 or shape.num_kv_heads % tp and tp % shape.num_kv_heads:
        raise InvalidInputError(f"tp must be >= 1 and divide or be a multiple of num_kv_heads "
                                f"({shape.num_kv_heads}), got {tp}")
    w = weight_bytes(shape, dtype_bytes) / tp
    # KV heads split across GPUs; below one head per GPU each GPU keeps a replica.
    kv = kv_bytes_per_token(shape, dtype_bytes) / min(tp, shape.num_kv_heads)
    free = gpu.memory_bytes * memory_fraction - w
    return TensorParallelPlan(tp, w, kv, max(0, int(free // kv)),
                              2 * allreduce_time(gpu, shape.hidden_size * dtype_bytes, tp))
