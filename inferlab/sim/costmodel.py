"""A roofline cost model of one engine step on a named GPU, and the clocks built on it.

A step's duration is ``max(FLOPs / achievable FLOP/s, bytes / achievable bandwidth)``
plus a fixed per-step overhead. Bytes are the weights (read once per step, shared by the
whole batch) plus the KV cache read by attention and the KV written for the new tokens.
This is why decode is memory-bound (few tokens share one pass over the weights) and a
long prefill is compute-bound (thousands of tokens share it).

The tokens still come from the real model running on this machine; only the *time* is
priced as if the step ran on the named GPU, for the real model shape or a bigger one.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from inferlab.errors import InvalidInputError, check_type

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
_ALIASES = {"h100sxm": "H100", "h100sxm5": "H100", "h200sxm": "H200", "a10080gb": "A100",
            "a100sxm": "A100", "a100sxm80gb": "A100", "b200sxm": "B200"}


def _norm(name: str) -> str:
    return "".join(c for c in name.lower() if c.isalnum())


def get_gpu(name: str) -> GPUProfile:
    """The profile called ``name`` (case-insensitive; "H100", "h100-sxm", "A100 80GB" ...)."""
    check_type("gpu", name, str, f"a GPU name, one of {sorted(GPUS)}")
    key = _norm(name)
    for canon in GPUS:
        if _norm(canon) == key:
            return GPUS[canon]
    if key in _ALIASES:
        return GPUS[_ALIASES[key]]
    raise InvalidInputError(f"unknown GPU {name!r}; known: {sorted(GPUS)} (or clock='wall')")


@dataclass(slots=True, frozen=True)
class ModelShape:
    """The sizes of a Llama-family decoder that the cost model needs."""

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool = False
    attention_bias: bool = False    # Qwen2 has q/k/v biases

    @classmethod
    def from_hf_config(cls, cfg, name: str | None = None) -> "ModelShape":
        """From a transformers config (LlamaConfig, Qwen2Config, MistralConfig ...)."""
        heads = cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
        path = str(getattr(cfg, "name_or_path", "") or "").rstrip("/")
        return cls(name or path.rsplit("/", 1)[-1] or cfg.model_type,
                   cfg.num_hidden_layers, cfg.hidden_size, heads,
                   getattr(cfg, "num_key_value_heads", None) or heads, head_dim,
                   cfg.intermediate_size, cfg.vocab_size,
                   bool(getattr(cfg, "tie_word_embeddings", False)),
                   bool(getattr(cfg, "attention_bias", cfg.model_type == "qwen2")))

    @property
    def layer_params(self) -> int:
        h = self.hidden_size
        q, kv = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        attn = h * q + 2 * h * kv + q * h + ((q + 2 * kv) if self.attention_bias else 0)
        return attn + 3 * h * self.intermediate_size + 2 * h   # gate/up/down + two RMSNorms

    @property
    def num_params(self) -> int:
        embed = self.vocab_size * self.hidden_size
        return (self.num_layers * self.layer_params + self.hidden_size
                + embed * (1 if self.tie_word_embeddings else 2))


# Shapes from the models' published config.json files.
MODEL_SHAPES: dict[str, ModelShape] = {s.name: s for s in (
    ModelShape("smollm2-135m", 30, 576, 9, 3, 64, 1536, 49152, True),
    ModelShape("smollm2-360m", 32, 960, 15, 5, 64, 2560, 49152, True),
    ModelShape("smollm2-1.7b", 24, 2048, 32, 32, 64, 8192, 49152, True),
    ModelShape("llama-3.2-1b", 16, 2048, 32, 8, 64, 8192, 128256, True),
    ModelShape("llama-3.2-3b", 28, 3072, 24, 8, 128, 8192, 128256, True),
    ModelShape("llama-2-7b", 32, 4096, 32, 32, 128, 11008, 32000),
    ModelShape("llama-3-8b", 32, 4096, 32, 8, 128, 14336, 128256),
    ModelShape("llama-3-70b", 80, 8192, 64, 8, 128, 28672, 128256),
    ModelShape("mistral-7b", 32, 4096, 32, 8, 128, 14336, 32000),
    ModelShape("qwen2-7b", 28, 3584, 28, 4, 128, 18944, 152064, False, True),
)}
# Llama 3.1 changed the context length, not the shape.
_SHAPE_ALIASES = {"llama318b": "llama38b", "llama3170b": "llama370b",
                  "metallama38b": "llama38b", "metallama370b": "llama370b"}


def model_shape(name: str) -> ModelShape:
    """A known model shape by name (case-insensitive; "llama-3-8b", "Llama-3.1-8B" ...)."""
    check_type("sim_model", name, str, f"a model shape name, one of {sorted(MODEL_SHAPES)}")
    key = _norm(name).removesuffix("instruct")
    key = _SHAPE_ALIASES.get(key, key)
    for canon, shape in MODEL_SHAPES.items():
        if _norm(canon) == key:
            return shape
    raise InvalidInputError(f"unknown model shape {name!r}; known: {sorted(MODEL_SHAPES)}")


def kv_bytes_per_token(shape: ModelShape, dtype_bytes: int = 2) -> int:
    """K and V of one token across all layers."""
    return 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * dtype_bytes


def weight_bytes(shape: ModelShape, dtype_bytes: int = 2) -> int:
    return shape.num_params * dtype_bytes


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
    compute = step_flops(shape, chunks) / tp / (gpu.peak_flops(dtype_bytes) * FLOPS_EFFICIENCY)
    memory = (step_bytes(shape, chunks, dtype_bytes) / tp
              / (gpu.hbm_bandwidth * BANDWIDTH_EFFICIENCY))
    # Megatron-style TP: two all-reduces of the activations per layer (after attention and
    # after the MLP); they sit on the critical path, so they add rather than overlap.
    comm = 2 * shape.num_layers * allreduce_time(gpu, tokens * shape.hidden_size * dtype_bytes, tp)
    return max(compute, memory) + comm + STEP_OVERHEAD_S + LAYER_OVERHEAD_S * shape.num_layers


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


class WallClock:
    """Measured time. Idle gaps before a future arrival are skipped, not slept through."""

    name = "wall"

    def __init__(self):
        self._start = time.perf_counter()
        self._skipped = 0.0

    def now(self) -> float:
        return time.perf_counter() - self._start + self._skipped

    def advance_step(self, chunks, wall_elapsed: float) -> float:
        return wall_elapsed   # real time has already passed

    def skip_to(self, t: float) -> None:
        self._skipped += max(0.0, t - self.now())


class SimulatedClock:
    """Time that advances by the roofline price of each step on ``gpu`` for ``shape``."""

    def __init__(self, gpu: GPUProfile | str, shape: ModelShape, dtype_bytes: int = 2, tp: int = 1):
        self.gpu = get_gpu(gpu) if isinstance(gpu, str) else gpu
        self.shape, self.dtype_bytes, self.tp = shape, dtype_bytes, tp
        tp_note = f", tp={tp}" if tp > 1 else ""
        self.name = f"{self.gpu.name} (simulated, {shape.name} shape{tp_note})"
        self._now = 0.0

    def now(self) -> float:
        return self._now

    def advance_step(self, chunks, wall_elapsed: float = 0.0) -> float:
        dt = step_time(self.gpu, self.shape, chunks, self.dtype_bytes, self.tp)
        self._now += dt
        return dt

    def skip_to(self, t: float) -> None:
        self._now = max(self._now, t)


def make_clock(clock: str = "wall", *, hf_config=None, sim_model: str | None = None,
               model_name: str | None = None, dtype_bytes: int = 2, tp: int = 1):
    """The clock an engine config asks for: "wall", or a GPU pricing ``sim_model`` (a shape
    name) or else the real model's ``hf_config``. Simulated steps are priced in bf16 (how the
    GPU would serve it), whatever dtype the CPU run uses."""
    check_type("clock", clock, str, "'wall' or a GPU name such as 'H100'")
    if clock == "wall":
        return WallClock()
    gpu = get_gpu(clock)
    if sim_model is not None:
        shape = model_shape(sim_model)
    elif hf_config is not None:
        shape = ModelShape.from_hf_config(hf_config, model_name)
    else:
        raise InvalidInputError("a simulated clock needs sim_model (a shape name) or hf_config")
    return SimulatedClock(gpu, shape, dtype_bytes, tp)

