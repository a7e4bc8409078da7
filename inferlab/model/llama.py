"""A Llama-family forward pass (Llama, SmolLM2, Qwen2, Mistral shapes) over a paged KV cache.

It reads the real weights of a loaded transformers model and runs every scheduled token
of every request through one packed forward: no padding, no per-request loop outside
attention. Attention itself lives in ``inferlab.kernels``. ``forward`` below, op by op in
torch, is the readable reference; the fast path (model/fused.py) runs the same pass with its
small ops fused into numba kernels, and the runner picks one of the two once.

Both offer named timing points: ``timer(part)`` is a context manager around each part
("linear", "lm head", "attention", "rotary + kv write", "norms + adds", "silu"); the default,
``NO_TIMER``, costs one call and a shared null context. ``inferlab bench profile`` sets a timer
through ``ModelRunner.timing``.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from inferlab import kernels

from ..core.shapes import ModelShape
from .linear import Linear
from .weights import ModelWeights


_NULL = contextlib.nullcontext()


def NO_TIMER(part: str):                 # noqa: N802  (a constant that is called)
    """The timing points when nobody profiles: nothing happens."""
    return _NULL


@dataclass(slots=True)
class AttentionMetadata:
    """Everything attention needs to find each token's context in the paged cache."""

    slot_mapping: torch.Tensor       # [num_tokens] int64   where each new token's K/V goes
    block_tables: torch.Tensor       # [num_seqs, max_blocks] int32
    seq_lens: torch.Tensor           # [num_seqs] int32     cached tokens incl. this step's
    query_start_loc: torch.Tensor    # [num_seqs + 1] int32 packed query offsets
    decode_only: bool                # every sequence has exactly one new token
    backend: str


class LlamaForward:
    def __init__(self, weights: ModelWeights, linear_backend: str = "torch"):
        cfg = weights.config
        self.weights = weights
        self.timer = NO_TIMER
        self.linear = lin = Linear(linear_backend)   # how the GEMMs run (model/linear.py)
        self.config = cfg
        self.shape = shape = ModelShape.from_hf_config(cfg)
        self.num_layers = shape.num_layers
        self.num_heads = shape.num_heads
        self.num_kv_heads = shape.num_kv_heads
        self.head_dim = shape.head_dim
        self.eps = cfg.rms_norm_eps
        self.scale = self.head_dim ** -0.5
        self.embed = weights.embed                                   # [vocab, hidden]
        self.norm = weights.norm
        for name, w in weights.named():             # the backend's packed copies, if any
            lin.prepare(w, name, weights.packed)
        self.lm_head = weights.lm_head
        self.layers = weights.layers
        self.inv_freq = weights.inv_freq                             # [head_dim / 2]
        self.rope_scaling = weights.rope_scaling
        self.dtype = self.embed.dtype
        self.device = self.embed.device
        _release_freed_memory()

    def rms_norm(self, x, w):
        if x.dtype == torch.float32:      # one fused op; the same formula as below
            return torch.nn.functional.rms_norm(x, w.shape, w, self.eps)
        var = x.float().pow(2).mean(-1, keepdim=True)
        return w * (x.float() * torch.rsqrt(var + self.eps)).to(x.dtype)

    def rotary(self, positions):
        freqs = positions.float()[:, None] * self.inv_freq[None, :]    # [T, D/2]
        emb = torch.cat([freqs, freqs], dim=-1)                       # [T, D]
        cos = (emb.cos() * self.rope_scaling).to(self.dtype)[:, None, :]  # [T, 1, D]
        sin = (emb.sin() * self.rope_scaling).to(self.dtype)[:, None, :]
        return cos, sin

    @staticmethod
    def apply_rotary(x, cos, sin):
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    @torch.inference_mode()
    def forward(self, input_ids, positions, meta: AttentionMetadata, k_caches, v_caches,
                logits_indices):
        """input_ids, positions: [T]; returns logits [len(logits_indices), vocab]."""
        T, t = input_ids.shape[0], self.timer
        H, KVH, D = self.num_heads, self.num_kv_heads, self.head_dim
        x = self.embed[input_ids]                                      # [T, hidden]
        cos, sin = self.rotary(positions)
        for li, w in enumerate(self.layers):
            with t("norms + adds"):
                h = self.rms_norm(x, w.input_norm)
            with t("linear"):
                qkv = self.linear(h, w.wqkv, w.bqkv)                  # [T, (H+2KVH)*D]
            kc, vc = k_caches[li], v_caches[li]                        # [blocks, bs, KVH, D]
            with t("rotary + kv write"):
                qk = self.apply_rotary(qkv[:, :(H + KVH) * D].view(T, H + KVH, D), cos, sin)
                q, k = qk[:, :H], qk[:, H:]                            # [T, H, D], [T, KVH, D]
                v = qkv[:, (H + KVH) * D:].reshape(T, KVH, D)
                kernels.write_kv(k, v, kc, vc, meta.slot_mapping, backend=meta.backend)
            with t("attention"):
                o = attention(q, kc, vc, meta, self.scale)            # [T, H, D]
            with t("linear"):
                y = self.linear(o.reshape(T, H * D), w.wo)
            with t("norms + adds"):
                x = x + y
                h = self.rms_norm(x, w.post_norm)
            with t("linear"):
                gate, up = self.linear(h, w.w_gate_up).chunk(2, dim=-1)
            with t("silu"):
                a = torch.nn.functional.silu(gate) * up
            with t("linear"):
                y = self.linear(a, w.w_down)
            with t("norms + adds"):
                x = x + y
        with t("norms + adds"):
            x = self.rms_norm(x[logits_indices], self.norm)            # [R, hidden]
        with t("lm head"):
            return self.linear(x, self.lm_head).float()               # [R, vocab]


def attention(q, k_cache, v_cache, meta: AttentionMetadata, scale: float):
    """Paged attention of ``q`` [T, H, D] over one layer's caches: the decode kernel when
    every sequence has one new token, else the packed (chunked) prefill kernel."""
    if meta.decode_only:
        return kernels.paged_attention_decode(q, k_cache, v_cache, meta.block_tables,
                                              meta.seq_lens, scale, backend=meta.backend)
    return kernels.paged_attention_prefill(q, k_cache, v_cache, meta.block_tables, meta.seq_lens,
                                           meta.query_start_loc, scale, backend=meta.backend)


def _release_freed_memory() -> None:
    """Hand memory freed while loading (GGUF dequantisation buffers, the unfused weights)
    back to the OS: glibc keeps it in its heap otherwise, and the process looks ~0.2 GB
    bigger than it is, which matters under Binder's 2 GB limit."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):     # not glibc (macOS, musl): nothing to do
        pass
