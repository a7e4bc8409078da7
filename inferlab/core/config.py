"""EngineConfig: every engine knob in one dataclass, validated once, with clear errors."""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields

from ..errors import InvalidInputError, check_type

SCHEDULERS = ("continuous", "static")
KV_LAYOUTS = ("paged", "contiguous")
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
DTYPES = tuple(DTYPE_BYTES)
CONTIGUOUS_RESERVE = ("max_model_len", "request")
SCHEDULING_POLICIES = ("fcfs", "priority")


def default_dtype() -> str:
    """The dtype of an engine that names none: INFERLAB_DTYPE when set (``bfloat16`` halves
    the weights and the KV cache on a small Binder pod), else float32, the reference."""
    v = os.environ.get("INFERLAB_DTYPE", "").strip() or "float32"
    if v not in DTYPES:
        raise InvalidInputError(f"the environment variable INFERLAB_DTYPE={v!r} is not a dtype "
                                f"inferlab runs; use one of {DTYPES} or unset it")
    return v


@dataclass(slots=True)
class EngineConfig:
    model: str | None = None            # None = SmolLM2-135M-Instruct; "tiny" = random Llama; or a path
    scheduler: str = "continuous"
    kv_layout: str = "paged"
    block_size: int = 16
    num_blocks: int | None = None       # None = from kv_cache_memory
    kv_cache_memory: int | None = None  # bytes for K and V of all layers; None = adapt to the machine
    max_model_len: int | None = None    # None = min(model context, 2048)
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    index_blocks_ahead: bool = True     # vLLM: a block is findable once allocated to be filled in
                                        # a step (requests admitted together share it); False:
                                        # only after its step ran (the what-if of chapter 07)
    scheduling_policy: str = "fcfs"     # or "priority": lower add_request(priority=) runs first
    long_prefill_token_threshold: int | None = 0   # prompt tokens per request per step; 0 = off
    contiguous_reserve: str = "max_model_len"
    attention_backend: str = "auto"     # or one of inferlab.kernels.ALL_BACKENDS (checked by the runner)
    linear_backend: str = "auto"        # GEMMs: "torch" (reference), "onednn[-packed]", "numba[+...]" (model/linear.py)
    clock: str = "wall"                 # "wall" or a GPU profile name, e.g. "H100" (checked by sim)
    sim_model: str | None = None        # model shape the simulated clock prices (None = the real one)
    dtype: str = field(default_factory=default_dtype)   # INFERLAB_DTYPE, else "float32"
    device: str | None = None           # None = cuda if available else cpu
    seed: int = 0

    def __post_init__(self):
        def choice(name, allowed):
            v = getattr(self, name)
            check_type(name, v, str, f"one of {allowed}")
            if v not in allowed:
                raise InvalidInputError(f"{name} must be one of {allowed}, got {v!r}")

        choice("scheduler", SCHEDULERS)
        choice("kv_layout", KV_LAYOUTS)
        check_type("attention_backend", self.attention_backend, str,
                   "'auto' or a backend name from inferlab.kernels")
        check_type("linear_backend", self.linear_backend, str,
                   "'auto' or a backend name from inferlab.model.linear.LINEAR_BACKENDS")
        choice("dtype", DTYPES)
        choice("contiguous_reserve", CONTIGUOUS_RESERVE)
        check_type("clock", self.clock, str, "'wall' or a GPU name such as 'H100'")
        for name, lo in (("block_size", 1), ("max_num_seqs", 1), ("max_num_batched_tokens", 1)):
            v = check_type(name, getattr(self, name), int, f"an int >= {lo}")
            if v < lo:
                raise InvalidInputError(f"{name} must be >= {lo}, got {v}")
        if self.block_size > 1024:
            raise InvalidInputError(f"block_size must be <= 1024, got {self.block_size}")
        for name in ("num_blocks", "kv_cache_memory", "max_model_len"):
            v = getattr(self, name)
            if v is not None:
                check_type(name, v, int, "an int >= 1 or None")
                if v < 1:
                    raise InvalidInputError(f"{name} must be >= 1 (or None for automatic), got {v}")
        for name in ("enable_chunked_prefill", "enable_prefix_caching", "index_blocks_ahead"):
            check_type(name, getattr(self, name), bool, "a bool")
        choice("scheduling_policy", SCHEDULING_POLICIES)
        if self.scheduling_policy == "priority" and self.scheduler != "continuous":
            raise InvalidInputError("scheduling_policy='priority' needs scheduler='continuous' "
                                    "(static batching admits whole batches in arrival order)")
        if self.long_prefill_token_threshold is None:
            self.long_prefill_token_threshold = 0
        v = check_type("long_prefill_token_threshold", self.long_prefill_token_threshold, int,
                       "an int >= 0 (0 or None = off)")
        if v < 0:
            raise InvalidInputError(f"long_prefill_token_threshold must be >= 0 (0 = off), got {v}")
        if v and not self.enable_chunked_prefill:
            raise InvalidInputError(
                f"long_prefill_token_threshold={v} splits prompts into chunks, which needs "
                "enable_chunked_prefill=True (or set the threshold to 0)")
        if self.max_model_len is not None:
            self.check_model_len(self.max_model_len)
        check_type("seed", self.seed, int, "an int")
        if self.model is not None:
            check_type("model", self.model, str, "None, 'tiny', or a path to a model directory or .gguf")
        if self.device is not None:
            check_type("device", self.device, str, "None, 'cpu' or 'cuda'")
            if self.device.split(":")[0] not in ("cpu", "cuda"):
                raise InvalidInputError(f"device must be 'cpu' or 'cuda', got {self.device!r}")

    def check_model_len(self, max_model_len: int) -> None:
        """Without chunked prefill a whole prompt (or a preempted request's prompt + output)
        is computed in one step, so the token budget must hold the longest one: as vLLM,
        refuse ``max_num_batched_tokens < max_model_len`` rather than silently raise it."""
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < max_model_len:
            raise InvalidInputError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) is smaller than "
                f"max_model_len ({max_model_len}) with enable_chunked_prefill=False: a whole "
                "prompt must fit one step's token budget. Raise max_num_batched_tokens to at "
                f"least {max_model_len}, lower max_model_len, or enable chunked prefill")

    @classmethod
    def from_kwargs(cls, **kwargs) -> "EngineConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise InvalidInputError(f"unknown engine option(s) {unknown}; known: {sorted(known)}")
        return cls(**kwargs)
