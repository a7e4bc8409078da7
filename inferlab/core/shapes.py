"""Model shape arithmetic, defined once: sizes of a Llama-family decoder, its parameter count,
KV bytes per token, and ceil-division (tokens to blocks).

Pure Python: the model runner, the engine, the cost model and the chapters all read these.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidInputError, check_type


def cdiv(a: int, b: int) -> int:
    """Ceil-division: how many blocks of ``b`` hold ``a`` tokens."""
    return -(-a // b)


def norm_name(name: str) -> str:
    """Lower-case letters and digits only: how names are compared ("H100 SXM" = "h100sxm")."""
    return "".join(c for c in name.lower() if c.isalnum())


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
    key = norm_name(name).removesuffix("instruct")
    key = _SHAPE_ALIASES.get(key, key)
    for canon, shape in MODEL_SHAPES.items():
        if norm_name(canon) == key:
            return shape
    raise InvalidInputError(f"unknown model shape {name!r}; known: {sorted(MODEL_SHAPES)}")


def kv_bytes_per_token(shape: ModelShape, dtype_bytes: int = 2) -> int:
    """K and V of one token across all layers."""
    return 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * dtype_bytes


def weight_bytes(shape: ModelShape, dtype_bytes: int = 2) -> int:
    return shape.num_params * dtype_bytes
