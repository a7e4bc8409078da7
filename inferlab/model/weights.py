"""The model's weights as the engine runs them, and the file that holds them ready to run.

``ModelWeights`` is what a forward needs and nothing more: the embedding, per layer the norms
and the fused projections (q|k|v as one [(H + 2 KVH) D, hidden] matrix, gate|up as one), the
final norm and the LM head, the rotary frequencies, the config. ``from_hf`` builds it from a
transformers model (the fused matrices become the storage the model's own q/k/v and gate/up
weights view into, so the transformers model keeps working and costs nothing extra);
``hf_model`` goes the other way for the parity tests and ``export-hf``, on the same memory.

``save`` / ``load``: the engine's own weight file (safetensors, the config and the rotary
constants in its metadata), written into the weights cache beside the converted model. Read
back it is memory-mapped: no transformers model is built, nothing is copied or fused again,
which is most of what a cold ``Engine()`` used to spend (BENCHMARKS.md, "Cold start").
``save_panels`` / ``load_panels`` keep the numba GEMM's packed panels the same way.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import torch

FORMAT = "inferlab-engine-weights"
VERSION = 1


@dataclass(slots=True)
class LayerWeights:
    input_norm: torch.Tensor         # [hidden]
    wqkv: torch.Tensor               # [(H + 2*KVH) * D, hidden]  q, k, v projections fused
    bqkv: torch.Tensor | None        # [(H + 2*KVH) * D]          Qwen2 has biases here
    wo: torch.Tensor                 # [hidden, H * D]
    post_norm: torch.Tensor          # [hidden]
    w_gate_up: torch.Tensor          # [2 * intermediate, hidden] gate and up fused
    w_down: torch.Tensor             # [hidden, intermediate]


@dataclass(slots=True, eq=False)
class ModelWeights:
    config: object                   # the transformers config (shapes, eps, vocab, eos ...)
    embed: torch.Tensor              # [vocab, hidden]
    norm: torch.Tensor               # [hidden]
    lm_head: torch.Tensor            # [vocab, hidden] (the embedding itself when tied)
    layers: list[LayerWeights]
    inv_freq: torch.Tensor           # [head_dim / 2] float32, as the model's config defines it
    rope_scaling: float              # rotary attention scaling (1.0 without rope scaling)
    # prepared copies for a linear backend, by weight name ("layers.3.wqkv"): shared by every
    # engine on these weights (model/linear.py); numba panels may come from the cache
    packed: dict = field(default_factory=dict)

    def named(self):
        """(name, tensor) of every linear weight, in a fixed order."""
        yield "lm_head", self.lm_head
        for i, w in enumerate(self.layers):
            for n in ("wqkv", "wo", "w_gate_up", "w_down"):
                yield f"layers.{i}.{n}", getattr(w, n)

    @property
    def tied(self) -> bool:
        return self.lm_head.data_ptr() == self.embed.data_ptr()

    @property
    def linear_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for _, t in self.named())


def _fuse(linears) -> torch.Tensor:
    """One [sum(out), in] weight for several nn.Linear layers, which then *view* into it, so
    the fused copy costs no memory (~280 MB for SmolLM2 in fp32, what keeps a Binder pod
    under its limit) and the transformers model still works."""
    fused = getattr(linears[0], "_inferlab_fused", None)
    if fused is not None and fused.data_ptr() == linears[0].weight.data_ptr():
        return fused                  # already fused (a cached model shared by engines)
    with torch.no_grad():
        w = torch.cat([lin.weight.detach() for lin in linears])
        offset = 0
        for lin in linears:
            n = lin.weight.shape[0]
            lin.weight.data = w[offset:offset + n]
            offset += n
    linears[0]._inferlab_fused = w
    return w


def from_hf(hf_model) -> ModelWeights:
    m = hf_model.model
    layers = []
    for layer in m.layers:
        a, mlp = layer.self_attn, layer.mlp
        bias = [p.bias for p in (a.q_proj, a.k_proj, a.v_proj)]
        layers.append(LayerWeights(
            input_norm=layer.input_layernorm.weight.detach(),
            wqkv=_fuse([a.q_proj, a.k_proj, a.v_proj]),
            bqkv=torch.cat(bias).detach() if bias[0] is not None else None,
            wo=a.o_proj.weight.detach(),
            post_norm=layer.post_attention_layernorm.weight.detach(),
            w_gate_up=_fuse([mlp.gate_proj, mlp.up_proj]),
            w_down=mlp.down_proj.weight.detach()))
    rope = m.rotary_emb          # rotary exactly as the model's own config defines it
    return ModelWeights(hf_model.config, m.embed_tokens.weight.detach(), m.norm.weight.detach(),
                        hf_model.lm_head.weight.detach(), layers, rope.inv_freq.detach().float(),
                        float(getattr(rope, "attention_scaling", 1.0)))


def hf_model(w: ModelWeights):
    """A transformers model whose parameters are views of ``w``'s tensors (no copy)."""
    from transformers import AutoModelForCausalLM
    cfg = w.config
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    state = {"model.embed_tokens.weight": w.embed, "model.norm.weight": w.norm,
             "lm_head.weight": w.lm_head}
    for i, lw in enumerate(w.layers):
        p = f"model.layers.{i}."
        q, kv = cfg.num_attention_heads, cfg.num_key_value_heads
        d = lw.wqkv.shape[0] // (q + 2 * kv)
        for name, t in zip(("q", "k", "v"), lw.wqkv.split([q * d, kv * d, kv * d])):
            state[p + f"self_attn.{name}_proj.weight"] = t
        if lw.bqkv is not None:
            for name, t in zip(("q", "k", "v"), lw.bqkv.split([q * d, kv * d, kv * d])):
                state[p + f"self_attn.{name}_proj.bias"] = t
        state[p + "self_attn.o_proj.weight"] = lw.wo
        gate, up = lw.w_gate_up.chunk(2)
        state[p + "mlp.gate_proj.weight"], state[p + "mlp.up_proj.weight"] = gate, up
        state[p + "mlp.down_proj.weight"] = lw.w_down
        state[p + "input_layernorm.weight"] = lw.input_norm
        state[p + "post_attention_layernorm.weight"] = lw.post_norm
    model.load_state_dict(state, strict=True, assign=True)
    with torch.device("cpu"):                  # a buffer computed from the config, not stored
        model.model.rotary_emb = type(model.model.rotary_emb)(config=cfg)
    if w.tied:
        model.lm_head.weight = model.model.embed_tokens.weight
    return model.to(w.embed.device).eval()


# ---- the engine's weight file ----------------------------------------------------------------

def _tensors(w: ModelWeights) -> dict[str, torch.Tensor]:
    out = {"embed": w.embed, "norm": w.norm, "inv_freq": w.inv_freq}
    if not w.tied:
        out["lm_head"] = w.lm_head
    for i, lw in enumerate(w.layers):
        for n in LayerWeights.__slots__:
            t = getattr(lw, n)
            if t is not None:
                out[f"layers.{i}.{n}"] = t
    return {k: v.contiguous() for k, v in out.items()}


def save(w: ModelWeights, path: str) -> None:
    """Write ``w`` to ``path`` (safetensors; the caller makes it atomic)."""
    from safetensors.torch import save_file
    meta = {"format": FORMAT, "version": str(VERSION), "rope_scaling": repr(w.rope_scaling),
            "config": w.config.to_json_string(use_diff=False)}
    save_file(_tensors(w), path, metadata=meta)


def load(path: str) -> ModelWeights:
    """``ModelWeights`` memory-mapped from a file ``save`` wrote; ValueError if it is not one."""
    from safetensors import safe_open
    from safetensors.torch import load_file
    from transformers import AutoConfig
    with safe_open(path, framework="pt") as f:
        meta = f.metadata() or {}
    if meta.get("format") != FORMAT or meta.get("version") != str(VERSION):
        raise ValueError(f"{path} is not an inferlab engine weight file v{VERSION}")
    cfg_dict = json.loads(meta["config"])
    config = AutoConfig.for_model(cfg_dict.pop("model_type"), **cfg_dict)
    t = load_file(path)                               # memory-mapped, nothing read yet
    layers = [LayerWeights(**{n: t.get(f"layers.{i}.{n}") for n in LayerWeights.__slots__})
              for i in range(config.num_hidden_layers)]
    return ModelWeights(config, t["embed"], t["norm"], t.get("lm_head", t["embed"]), layers,
                        t["inv_freq"], float(meta["rope_scaling"]))


def save_panels(panels: dict, path: str) -> None:
    """The numba GEMM's packed panels by weight name (numpy float32)."""
    from safetensors.torch import save_file
    save_file({k: torch.from_numpy(v) for k, v in panels.items()}, path,
              metadata={"format": FORMAT + "-panels", "version": str(VERSION)})


def load_panels(path: str) -> dict:
    """Panels ``save_panels`` wrote, memory-mapped, as numpy arrays; {} if there is no file."""
    from safetensors.torch import load_file
    if not os.path.isfile(path):
        return {}
    return {k: v.numpy() for k, v in load_file(path).items()}
