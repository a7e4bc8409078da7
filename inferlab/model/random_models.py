"""Random-weight Llama models built from a config: the tiny test models, and any shape of
``inferlab.core.shapes`` as ``"random:<shape>"`` (``Engine("random:llama-3-8b", device="cuda",
dtype="bfloat16")``: an 8B-shaped engine on a GPU without an 8B checkpoint on disk).

Nothing is downloaded: the weights are drawn from a seeded generator. A shaped model is made
directly on its device in its dtype (no full-precision copy on the host: 8B parameters in
float32 would be 32 GB of host memory before the cast).
"""
from __future__ import annotations

# Shapes of the named random-weight models (names usable as Engine(model=...)).
RANDOM_MODELS = {
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=16),
    # the smallest shape the numba-CUDA kernels take (head_dim 32): engine runs in the simulator
    "tiny-d32": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=2, num_key_value_heads=1, head_dim=32),
    "tiny-smollm2": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, head_dim=64),
}
SHAPED_PREFIX = "random:"
# SmolLM2's vocabulary and special tokens: the named models borrow its tokenizer when here
SMOLLM2_SPECIAL = dict(vocab_size=49152, rope_theta=100000.0, bos_token_id=1, eos_token_id=2,
                       pad_token_id=2, tie_word_embeddings=True)


def is_random(spec) -> bool:
    return spec in RANDOM_MODELS or (isinstance(spec, str) and spec.startswith(SHAPED_PREFIX))


def config_for(spec: str, vocab_size: int | None = None):
    """The LlamaConfig of a random model ``spec`` (a name of RANDOM_MODELS or "random:<shape>")."""
    from transformers import LlamaConfig
    if spec in RANDOM_MODELS:
        special = dict(SMOLLM2_SPECIAL, vocab_size=vocab_size or SMOLLM2_SPECIAL["vocab_size"])
        return LlamaConfig(max_position_embeddings=8192, rms_norm_eps=1e-5, **special,
                           **RANDOM_MODELS[spec])
    from ..core.shapes import model_shape
    s = model_shape(spec[len(SHAPED_PREFIX):])
    return LlamaConfig(vocab_size=s.vocab_size, hidden_size=s.hidden_size,
                       intermediate_size=s.intermediate_size, num_hidden_layers=s.num_layers,
                       num_attention_heads=s.num_heads, num_key_value_heads=s.num_kv_heads,
                       head_dim=s.head_dim, max_position_embeddings=8192, rope_theta=500000.0,
                       rms_norm_eps=1e-5, tie_word_embeddings=s.tie_word_embeddings,
                       attention_bias=s.attention_bias, bos_token_id=1, eos_token_id=2)


def build(spec: str, dtype, device: str, seed: int, vocab_size: int | None = None):
    """A random-weight LlamaForCausalLM for ``spec``, in eval mode, on ``device`` in ``dtype``.
    The named (small) models are made on the host in float32 and cast, as they always were
    (their weights stay the same for a seed); shaped ones directly on the device in dtype."""
    import torch
    from transformers import LlamaForCausalLM
    cfg = config_for(spec, vocab_size)
    # torch.manual_seed seeds every CUDA device too: fork theirs as well, so that building a
    # model leaves the caller's random state (CPU and GPU) as it was
    gpus = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=gpus):
        torch.manual_seed(seed)
        if spec in RANDOM_MODELS:
            return LlamaForCausalLM(cfg).to(dtype).to(device).eval()
        before = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            with torch.device(device):
                return LlamaForCausalLM(cfg).eval()
        finally:
            torch.set_default_dtype(before)
