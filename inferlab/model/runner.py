"""ModelRunner: turns a SchedulerOutput into one packed forward and sampled tokens.

It owns the KV cache tensors and the model; it knows nothing about queues or policies. It is
the one place that decides how a step runs (``ForwardPlan``): which attention backend, which
linear backend, and whether the fast forward (model/fused.py) or the op-by-op reference
(model/llama.py) runs, decided once when the engine is built.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from inferlab import kernels

from ..core.events import SchedulerOutput
from ..core.shapes import cdiv
from ..errors import InvalidInputError
from . import cpu_features, linear, linear_choice, precompile
from .fused import FusedForward, HalfDecode, attention_for, fused_runs, half_decode_runs
from .llama import NO_TIMER, AttentionMetadata, LlamaForward, attention
from .resources import available_memory
from .sampler import make_generator, sample, top_logprobs


def check_backend(name: str, device: str, linear_backend: str = "auto") -> str:
    """The concrete attention backend for ``name`` on ``device``, or a clear error; also
    checks that ``linear_backend`` names one (whether it runs is known once weights load)."""
    if linear_backend != "auto" and linear_backend not in linear.LINEAR_BACKENDS:
        raise InvalidInputError(f"linear_backend must be 'auto' or one of "
                                f"{linear.LINEAR_BACKENDS}, got {linear_backend!r}")
    try:
        return kernels.resolve_backend(name, device)
    except ValueError as e:
        raise InvalidInputError(f"attention_backend: {e}") from None


def _linear_backend(name: str, weights, mapped: bool) -> str:
    """``mapped``: the weights are memory-mapped, not yet resident; they will be, so the
    memory they will take is not counted as free (else "auto" packs a copy that does not fit:
    a 2 GB Binder pod measured 1.87 GB)."""
    p = weights.embed
    free = available_memory() - (weights.linear_bytes if mapped else 0)
    try:
        return linear_choice.resolve(name, p.device.type, p.dtype, weights.linear_bytes, free)
    except ValueError as e:
        raise InvalidInputError(f"linear_backend: {e}") from None


def _precision(dtype: torch.dtype, device: torch.device, linear_backend: str) -> str:
    """"float32", or e.g. "bfloat16 (avx512-bf16)": a half dtype and the instructions its GEMMs
    run on this CPU (the numba bf16 GEMM's own, else those oneDNN picks)."""
    name = str(dtype).removeprefix("torch.")
    if name == "float32" or device.type != "cpu":
        return name
    if linear_backend == "numba":                     # kernels/gemm_cpu.py: vdpbf16ps
        return f"{name} (avx512-bf16)"
    return f"{name} ({cpu_features.half_path(name)})"


@dataclass(frozen=True, slots=True)
class ForwardPlan:
    """How every step of an engine runs."""

    attention_backend: str     # an inferlab.kernels backend ("numba-cpu", "reference", ...)
    linear_backend: str        # a model/linear.py backend ("numba", "onednn", "torch", ...)
    fused_available: bool      # the fast forward can run (fp32: numba linear + numba CPU
                               # attention; bf16: numba CPU attention, for one-call decode)
    fused: bool                # it runs; else the op-by-op reference
    precision: str = "float32"  # the model's dtype and, in half precision on the CPU, the
                                # instructions its GEMMs use (model/cpu_features.py)

    @property
    def path(self) -> str:
        return "fused" if self.fused else "reference"


def kv_zeros(shape, dtype, device) -> torch.Tensor:
    """A zeroed KV cache tensor. On the CPU it is an anonymous mapping of its own: its pages
    are the kernel's zero pages until a block is written, so an engine holds in memory the
    blocks it used, not its whole budget (``torch.zeros`` writes every byte: a chapter's
    512-block engines held 377 MB each from the start, a Binder pod's quarter), and it asks
    for no huge pages (numpy's large arrays do: one written block then made 2 MB resident,
    and blocks scattered over the cache made all of it resident). Page-aligned."""
    if torch.device(device).type != "cpu":
        return torch.zeros(shape, dtype=dtype, device=device)
    import math
    import mmap
    nbytes = torch.tensor([], dtype=dtype).element_size() * math.prod(shape)
    buf = mmap.mmap(-1, max(nbytes, 1))
    if hasattr(mmap, "MADV_NOHUGEPAGE"):
        buf.madvise(mmap.MADV_NOHUGEPAGE)
    raw = torch.frombuffer(buf, dtype=torch.uint8, count=nbytes)   # keeps ``buf`` alive
    return raw.view(dtype).view(shape)


class ModelRunner:
    def __init__(self, loaded, num_blocks: int, block_size: int, backend: str, seed: int,
                 linear_backend: str = "auto"):
        """``loaded``: a ``model.loader.LoadedModel`` (its weights; the cache for panels)."""
        self.linear_backend = _linear_backend(linear_backend, loaded.weights,
                                              loaded.origin == "engine file")
        if self.linear_backend == "numba":
            loaded.attach_cached_panels()
        self.model = LlamaForward(loaded.weights, self.linear_backend)
        if self.linear_backend == "numba":
            loaded.keep_panels()
        self.device = self.model.device
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.backend = check_backend(backend, self.device.type)
        m = self.model
        can_fuse = fused_runs(self.linear_backend, self.backend, m.dtype, self.device)
        self._fused = FusedForward(m) if can_fuse else None
        if half_decode_runs(self.backend, m.dtype, self.device):     # bf16: one-call decode
            self._fused, can_fuse = HalfDecode(m), True
        self.plan = ForwardPlan(self.backend, self.linear_backend, can_fuse, can_fuse,
                                _precision(m.dtype, self.device, self.linear_backend))
        self._forward = self._fused or m.forward
        self.timer = NO_TIMER
        shape = (m.num_layers, num_blocks, block_size, m.num_kv_heads, m.head_dim)
        # Zeroed, not empty: unused slots must never hold NaNs that a masked kernel could touch.
        self.k_cache = kv_zeros(shape, m.dtype, self.device)
        self.v_cache = kv_zeros(shape, m.dtype, self.device)
        self.seed = seed
        self._generators: dict[str, torch.Generator] = {}
        self._seed_counter = 0

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of K and V one token takes in the cache, all layers (the cache's dtype)."""
        k = self.k_cache
        return 2 * k.element_size() * k.shape[0] * k.shape[3] * k.shape[4]

    def use_path(self, path: str) -> None:
        """Run the "fused" forward or the op-by-op "reference" from now on (benchmarks A/B)."""
        if path not in ("fused", "reference"):
            raise InvalidInputError(f"path must be 'fused' or 'reference', got {path!r}")
        if path == "fused" and self._fused is None:
            raise InvalidInputError(
                f"the fused forward needs numba CPU attention and, on a float32 CPU model, a "
                f"numba linear backend (bfloat16: any); this engine has "
                f"{self.linear_backend} / {self.backend}, {self.model.dtype}")
        self.plan = ForwardPlan(self.backend, self.linear_backend, self._fused is not None,
                                path == "fused", self.plan.precision)
        self._forward = self._fused if path == "fused" else self.model.forward

    def attention_for(self, meta: AttentionMetadata):
        """The attention function a step with ``meta`` runs under this plan."""
        return attention_for(meta) if self.plan.fused else attention

    @contextlib.contextmanager
    def timing(self, timer):
        """Call ``timer(part)`` (a context manager) around each named part of every forward
        while the block runs, and "forward" around the whole pass: the profiling hook of
        ``inferlab bench profile``."""
        targets = [t for t in (self, self.model, self._fused) if t is not None]
        for t in targets:
            t.timer = timer
        try:
            yield
        finally:
            for t in targets:
                t.timer = NO_TIMER

    def warm_up(self) -> None:
        """Run the prefill and decode kernels once on scratch blocks, so that JIT compilation
        (numba: seconds on first use) is paid at engine creation, not inside the first
        request's measured time to first token. On a CPU that has not compiled the numba
        kernels yet, they are compiled first, on every core, with a note (model/precompile)."""
        if self.backend == "numba-cpu" or self.linear_backend.startswith("numba"):
            half = self.model.dtype == torch.bfloat16 and self.device.type == "cpu"
            precompile.ensure_compiled(self.model.num_layers,
                                       self.model.layers[0].bqkv is not None,
                                       dtype="bfloat16" if half else "float32",
                                       linear_backend=self.linear_backend if half else "numba")
        if self.num_blocks >= 1:
            self.prompt_logits([1, 2][: self.block_size * self.num_blocks])
            self.prompt_logits([1])

    def forget(self, request_id: str) -> None:
        self._generators.pop(request_id, None)

    def _generator(self, req):
        g = self._generators.get(req.request_id)
        if g is None:
            if req.params.seed is not None:
                seed = req.params.seed
            else:   # unseeded: still reproducible per engine seed and arrival order
                seed = self.seed * 1_000_003 + self._seed_counter
                self._seed_counter += 1
            g = self._generators[req.request_id] = make_generator(seed)
        return g

    def prepare(self, out: SchedulerOutput, requests):
        """Packed inputs: token ids, positions, slot mapping, block tables, query offsets."""
        ids, pos, slots, seq_lens, qsl, logits_idx = [], [], [], [], [0], []
        bs = self.block_size
        max_blocks = max(len(out.block_tables[c.request_id]) for c in out.chunks)
        tables = torch.zeros((len(out.chunks), max_blocks), dtype=torch.int32)
        for s, c in enumerate(out.chunks):
            req = requests[c.request_id]
            table = out.block_tables[c.request_id]
            tables[s, :len(table)] = torch.tensor(table, dtype=torch.int32)
            positions = range(c.start, c.start + c.num_tokens)
            ids.extend(req.token_at(p) for p in positions)   # no prompt+output copy per step
            pos.extend(positions)
            slots.extend(table[p // bs] * bs + p % bs for p in positions)
            seq_lens.append(c.start + c.num_tokens)
            qsl.append(qsl[-1] + c.num_tokens)
            if c.samples:
                logits_idx.append(qsl[-1] - 1)
        dev = self.device
        meta = AttentionMetadata(
            slot_mapping=torch.tensor(slots, dtype=torch.int64, device=dev),
            block_tables=tables.to(dev),
            seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=dev),
            query_start_loc=torch.tensor(qsl, dtype=torch.int32, device=dev),
            decode_only=qsl[-1] == len(out.chunks),
            backend=self.backend)
        return (torch.tensor(ids, dtype=torch.int64, device=dev),
                torch.tensor(pos, dtype=torch.int64, device=dev), meta,
                torch.tensor(logits_idx, dtype=torch.int64, device=dev))

    def execute(self, out: SchedulerOutput, requests) -> tuple[dict[str, int], dict[str, dict]]:
        """Run the step's forward; return the sampled token of each request that completed,
        and for those whose params ask for ``logprobs``, {token id: log-probability}."""
        ids, pos, meta, logits_idx = self.prepare(out, requests)
        with self.timer("forward"):
            logits = self._forward(ids, pos, meta, self.k_cache, self.v_cache, logits_idx)
        samplers = [requests[c.request_id] for c in out.chunks if c.samples]
        if not samplers:
            return {}, {}
        params = [r.params for r in samplers]
        gens = [None if p.greedy else self._generator(r) for r, p in zip(samplers, params)]
        tokens = sample(logits, params, gens, [r.banned_token_ids() for r in samplers])
        logprobs = {r.request_id: top_logprobs(logits[i], r.params.logprobs, tokens[i])
                    for i, r in enumerate(samplers) if r.params.logprobs is not None}
        return {r.request_id: t for r, t in zip(samplers, tokens)}, logprobs

    @torch.inference_mode()
    def prompt_logits(self, token_ids: list[int]) -> torch.Tensor:
        """All-position logits of one prompt, through a scratch block table (for parity tests).

        Uses blocks from the end of the cache that the caller guarantees are free.
        """
        n = len(token_ids)
        nblk = cdiv(n, self.block_size)
        table = list(range(self.num_blocks - nblk, self.num_blocks))
        bs = self.block_size
        meta = AttentionMetadata(
            slot_mapping=torch.tensor([table[p // bs] * bs + p % bs for p in range(n)],
                                      device=self.device),
            block_tables=torch.tensor([table], dtype=torch.int32, device=self.device),
            seq_lens=torch.tensor([n], dtype=torch.int32, device=self.device),
            query_start_loc=torch.tensor([0, n], dtype=torch.int32, device=self.device),
            decode_only=n == 1, backend=self.backend)
        ids = torch.tensor(token_ids, device=self.device)
        return self._forward(ids, torch.arange(n, device=self.device), meta,
                             self.k_cache, self.v_cache, torch.arange(n, device=self.device))
