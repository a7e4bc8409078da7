"""The fast forward: ``LlamaForward``'s pass with its small ops fused into the numba kernels of
``inferlab.kernels``, over the same weights (no copies). The runner picks it (or the op-by-op
reference in llama.py) once, from the linear and attention backends (runner.ForwardPlan).

* One sequence decoding one token: the whole pass is one numba call (``kernels.decode_pass``).
* More rows: the GEMMs through the engine's ``Linear``, the glue between them fused:

      h = rms_norm(x)                                    (once, before the first layer)
      per layer:  qkv = linear(h)                        numba GEMM / oneDNN (linear backend)
                  q = rotary_write(qkv)                  rotary on q and k, K and V into the cache
                  o = attention(q)                       numba paged attention (SDPA for long chunks)
                  h = add_rms_norm(x, linear(o))         x += Wo o;  h = rms_norm(x)
                  a = silu_mul(linear(h))                silu(gate) * up, [gate | up] = Wgate_up h
                  h = add_rms_norm(x, linear(a))         x += Wdown a;  h = the next layer's norm
      logits = linear(h[rows that sample])               (the last norm is the model's final one)

A bfloat16 model runs the same (``HalfDecode``): the one-call decode reads its weights and
cache as bf16 bits, and ``rows`` sends the GEMMs through the linear backend in bf16 while the
rows between them stay float32.

A 2048-token prefill gains most (A B A B in one process: its step 2.38 -> 2.31 s; BENCHMARKS.md
"Speed, round 3"). Like the reference, it writes the whole step's K/V into the cache before
any attention of that layer reads it, so requests admitted together can share blocks that one
of them fills in this very step. tests/test_fused_forward.py checks it against the reference.
Named timing points (``timer(part)``) let ``inferlab bench profile`` time the parts.
"""
from __future__ import annotations

import numpy as np
import torch

from inferlab import kernels

from .linear import kernel_array as _array
from .llama import NO_TIMER, AttentionMetadata, LlamaForward, attention


def attention_for(meta: AttentionMetadata):
    """The attention of a step: SDPA over gathered K/V when one sequence brings at least
    ``kernels.SDPA_MIN_TOKENS`` new tokens, else the numba kernels."""
    if not meta.decode_only:                        # a decode step has one new token a sequence
        new_tokens = meta.query_start_loc[1:] - meta.query_start_loc[:-1]
        if int(new_tokens.max()) >= kernels.SDPA_MIN_TOKENS:
            return _sdpa
    return attention


def _sdpa(q, k_cache, v_cache, meta: AttentionMetadata, scale: float):
    return kernels.paged_attention_sdpa(q, k_cache, v_cache, meta.block_tables, meta.seq_lens,
                                        meta.query_start_loc, scale)


def pass_weights(m: LlamaForward) -> tuple:
    """The one-call decode's weights (``kernels.decode_pass``): the matrices as they are (a
    bfloat16 model's as their bits) or, for a bfloat16 model whose linear backend packed them
    (the numba GEMM's bf16 panels), those panels; the embedding as it is; the small vectors
    (norms, biases, rotary) as float32."""
    matrices = [w for lw in m.layers for w in (lw.wqkv, lw.wo, lw.w_gate_up, lw.w_down)]
    panels = (m.dtype == torch.bfloat16
              and all(isinstance(m.linear.packed(w), np.ndarray)
                      for w in matrices + [m.lm_head]))

    def matrix(t):
        return m.linear.packed(t) if panels else _array(t)

    def stack(tensors, as_array=matrix):   # a tuple of arrays: numba types it once (a typed
        return tuple(as_array(t) for t in tensors)      # List would not cache)

    def f32(t):
        return t.detach().float().contiguous().numpy()
    layers = m.layers
    no_bias = torch.zeros(0, dtype=torch.float32)
    return (_array(m.embed), stack((w.input_norm for w in layers), f32),
            stack(w.wqkv for w in layers),
            stack((w.bqkv if w.bqkv is not None else no_bias for w in layers), f32),
            stack(w.wo for w in layers), stack((w.post_norm for w in layers), f32),
            stack(w.w_gate_up for w in layers), stack(w.w_down for w in layers),
            f32(m.norm), matrix(m.lm_head), f32(m.inv_freq),
            m.rope_scaling, m.eps, m.scale, m.num_heads)


class FusedForward:
    """``forward(input_ids, positions, meta, k_caches, v_caches, logits_indices)`` as
    ``LlamaForward.forward``, same arguments, same result (to float32 rounding)."""

    def __init__(self, model: LlamaForward):
        self.model = model
        self.timer = NO_TIMER
        self._pass_weights = pass_weights(model)

    @torch.inference_mode()
    def __call__(self, input_ids, positions, meta: AttentionMetadata, k_caches, v_caches,
                 logits_indices):
        if input_ids.shape[0] == 1 and meta.decode_only and logits_indices.shape[0] == 1:
            return self.decode_one(int(input_ids[0]), int(positions[0]),
                                   meta.block_tables[0].numpy(), k_caches, v_caches)
        return self.rows(input_ids, positions, meta, k_caches, v_caches, logits_indices)

    def decode_one(self, token: int, pos: int, table, k_caches, v_caches) -> torch.Tensor:
        """Logits [1, vocab] of one sequence's next token, its whole pass in one call."""
        logits = torch.empty((1, self.model.lm_head.shape[0]), dtype=torch.float32)
        with self.timer("one-call decode"):
            kernels.decode_pass(token, pos, table, self._pass_weights, _array(k_caches),
                                _array(v_caches), logits[0].numpy())
        return logits

    def rows(self, input_ids, positions, meta, k_caches, v_caches, logits_indices):
        m, t = self.model, self.timer
        T = input_ids.shape[0]
        attend = attention_for(meta)
        H, D = m.num_heads, m.head_dim
        layers = m.layers
        _, in_norm, _, _, _, post_norm, _, _, final_norm = self._pass_weights[:9]

        linear = m.linear.float_out     # a bf16 model's GEMMs in bf16, the rows float32
        x = m.embed[input_ids].float()                                 # [T, hidden], ours
        freqs = positions.float()[:, None] * m.inv_freq[None, :].float()   # [T, D/2]
        cos = (freqs.cos() * m.rope_scaling).numpy()
        sin = (freqs.sin() * m.rope_scaling).numpy()
        slots = meta.slot_mapping.numpy()
        h = torch.empty_like(x)
        xn, hn = x.numpy(), h.numpy()
        with t("norms + adds"):
            kernels.rms_rows(xn, in_norm[0], m.eps, hn)
        for li, w in enumerate(layers):
            with t("linear"):
                qkv = linear(h, w.wqkv, w.bqkv)                         # [T, (H+2KVH)*D]
            q = torch.empty((T, H, D), dtype=x.dtype)
            kc, vc = k_caches[li], v_caches[li]                        # [blocks, bs, KVH, D]
            with t("rotary + kv write"):
                kernels.rotary_write(qkv.numpy(), cos, sin, _array(kc), _array(vc), slots,
                                     q.numpy())
            with t("attention"):
                o = attend(q, kc, vc, meta, m.scale)                   # [T, H, D]
            with t("linear"):
                y = linear(o.reshape(T, H * D), w.wo).numpy()
            with t("norms + adds"):
                kernels.add_rms_rows(xn, y, post_norm[li], m.eps, hn)
            with t("linear"):
                gate_up = linear(h, w.w_gate_up)                        # [T, 2 intermediate]
            act = torch.empty((T, gate_up.shape[1] // 2), dtype=x.dtype)
            with t("silu"):
                kernels.silu_mul(gate_up.numpy(), act.numpy())
            nxt = in_norm[li + 1] if li + 1 < len(layers) else final_norm
            with t("linear"):
                y = linear(act, w.w_down).numpy()
            with t("norms + adds"):
                kernels.add_rms_rows(xn, y, nxt, m.eps, hn)
        with t("lm head"):
            return linear(h[logits_indices], m.lm_head)                # [R, vocab]


def fused_runs(linear_backend: str, attention_backend: str, dtype, device) -> bool:
    """Whether the fast forward can run: a numba linear backend (its GEMV/GEMM), numba CPU
    attention, a float32 model on the CPU."""
    return (linear_backend.startswith("numba") and attention_backend == "numba-cpu"
            and dtype == torch.float32 and torch.device(device).type == "cpu")


class HalfDecode(FusedForward):
    """A bfloat16 model's fast forward: one sequence decoding one token runs as one numba
    call (``kernels.decode_pass`` reads the weights and the KV cache as their bf16 bits,
    widened to float32 as they stream in: half the bytes of fp32); more rows run ``rows``
    with the GEMMs in the linear backend's bf16 (inputs rounded to bf16, outputs widened)
    and the rows between them (norms, residual adds, rotary, SiLU, attention) in float32, K
    and V rounded to bf16 as stored."""


def half_decode_runs(attention_backend: str, dtype, device) -> bool:
    """Whether ``HalfDecode`` can run: a bfloat16 model on the CPU, numba CPU attention."""
    return (attention_backend == "numba-cpu" and dtype == torch.bfloat16
            and torch.device(device).type == "cpu")
