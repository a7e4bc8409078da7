"""Step times of an 8B-shaped model on the GPU beside the simulated clock's predictions (run by
kernels/gpu_check.sh on a lent H200).

    python -m inferlab.bench.gpu_steps [--shape llama-3-8b] [--gpu H200]
    python -m inferlab.bench.gpu_steps --tiny --device cpu      # dry run: every step, tiny

Random weights in bf16 (no 8B checkpoint travels to the GPU machine). Steps, as an engine runs
them: one 512-token prefill at batch 1, and decode steps (one new token per sequence) at batch
1 and 32 after a 512-token prompt. Each step is timed alone, ``torch.cuda.synchronize()``
before and after; the median of a few timed steps after warm-ups is printed beside the
``inferlab.sim`` cost model's ``step_time`` for the GPU profile, with the same shape, the same
(new tokens, context) chunks and 2 bytes per element, and the roofline term that bounds it.

What runs is transformers' ``LlamaForCausalLM`` built from the shape (SDPA attention, its
``DynamicCache``, greedy next token), not the inferlab engine: the engine builds random-weight
models only of the shapes in ``inferlab.model.loader.RANDOM_MODELS`` (none 8B-sized), and any
other model from a checkpoint on disk. The printout says so.
"""
from __future__ import annotations

import argparse
import inspect
import statistics
import time

import torch

from inferlab.core.shapes import ModelShape, model_shape
from inferlab.sim.costmodel import step_terms, step_time
from inferlab.sim.profiles import get_gpu

# the dry run's stand-in: the same code path, seconds on a CPU
TINY = ModelShape("tiny (dry run)", 2, 64, 4, 2, 16, 128, 256)
DTYPE_BYTES = {torch.bfloat16: 2, torch.float16: 2, torch.float32: 4}


def build(shape: ModelShape, device: str, dtype, max_len: int):
    """A random-weight LlamaForCausalLM of ``shape``, made directly on ``device`` in ``dtype``
    (no full-precision copy: the default dtype is ``dtype`` while the layers are made)."""
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=shape.vocab_size, hidden_size=shape.hidden_size,
                      intermediate_size=shape.intermediate_size,
                      num_hidden_layers=shape.num_layers, num_attention_heads=shape.num_heads,
                      num_key_value_heads=shape.num_kv_heads, head_dim=shape.head_dim,
                      max_position_embeddings=max_len, rope_theta=500000.0,
                      tie_word_embeddings=shape.tie_word_embeddings,
                      attention_bias=shape.attention_bias)
    torch.manual_seed(0)
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(before)
    return model.eval()


class Stepper:
    """One engine-like step of the model: new tokens in, KV cache extended, greedy token out."""

    def __init__(self, model, device: str):
        self.model, self.device = model, device
        params = inspect.signature(model.forward).parameters
        # transformers renamed past_key_values to cache (5.2x); the GPU machine may be older
        self.cache_arg = "cache" if "cache" in params else "past_key_values"

    def sync(self) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()

    def step(self, ids, cache=None):
        """(seconds, next token ids [B, 1], cache) of one forward over ``ids`` [B, T]."""
        kwargs = {self.cache_arg: cache} if cache is not None else {}
        self.sync()
        t0 = time.perf_counter()
        out = self.model(input_ids=ids, use_cache=True, logits_to_keep=1, **kwargs)
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        self.sync()
        return time.perf_counter() - t0, nxt, out[self.cache_arg]


def measure(shape: ModelShape, device: str, dtype, prompt: int, batches, warm: int,
            timed: int, gpu_name: str) -> list[dict]:
    """Rows of (step, chunks, measured seconds, predicted seconds, bound)."""
    gpu = get_gpu(gpu_name)
    model = build(shape, device, dtype, prompt + warm + timed + 16)
    run = Stepper(model, device)
    nbytes = DTYPE_BYTES[dtype]
    g = torch.Generator(device="cpu").manual_seed(1)

    def prompt_ids(batch):
        return torch.randint(0, shape.vocab_size, (batch, prompt), generator=g).to(device)

    def row(name, chunks_per_step, times):
        predicted = [step_time(gpu, shape, c, nbytes) for c in chunks_per_step]
        terms = step_terms(gpu, shape, chunks_per_step[0], nbytes)
        return dict(step=name, measured=statistics.median(times),
                    predicted=statistics.mean(predicted),
                    bound="compute" if terms["compute"] else "memory", n=len(times))

    rows = []
    with torch.inference_mode():
        ids = prompt_ids(1)                              # prefill: a fresh cache each time
        times = [run.step(ids)[0] for _ in range(warm + timed)][warm:]
        rows.append(row(f"prefill {prompt} tokens, batch 1", [[(prompt, prompt)]], times))
        for batch in batches:
            _, nxt, cache = run.step(prompt_ids(batch))
            ctx, times, chunks = prompt, [], []
            for i in range(warm + timed):
                ctx += 1                                 # the new token's key is in the context
                t, nxt, cache = run.step(nxt, cache)
                if i >= warm:
                    times.append(t)
                    chunks.append([(1, ctx)] * batch)
            rows.append(row(f"decode batch {batch}, context {chunks[0][0][1]}-{ctx}", chunks,
                            times))
            del cache
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="llama-3-8b", help="a model shape of inferlab.core.shapes")
    p.add_argument("--gpu", default="H200", help="the GPU profile that prices the steps")
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true", help="dry run: a tiny shape, few steps")
    p.add_argument("--prompt", type=int, default=512)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    args = p.parse_args(argv)
    shape = TINY if args.tiny else model_shape(args.shape)
    prompt = 16 if args.tiny else args.prompt
    warm, timed = (1, 2) if args.tiny else (2, 5)
    dtype = torch.bfloat16
    where = (torch.cuda.get_device_name() if args.device.startswith("cuda") else args.device)
    where += " (dry run: times meaningless)" if args.tiny else ""
    print(f"## {shape.name}: hidden {shape.hidden_size}, {shape.num_layers} layers, "
          f"{shape.num_heads}/{shape.num_kv_heads} heads x {shape.head_dim}, intermediate "
          f"{shape.intermediate_size}, vocab {shape.vocab_size}; random weights, bf16, on "
          f"{where}")
    try:
        from inferlab.model.loader import RANDOM_MODELS
        names = ", ".join(sorted(RANDOM_MODELS))
    except Exception as exc:                     # noqa: BLE001 - only for the printout
        names = f"unknown here: {type(exc).__name__}: {exc}"
    print(f"  timed: transformers LlamaForCausalLM (SDPA, DynamicCache, greedy token), NOT the "
          f"inferlab engine: it cannot build this model (its random-weight models are "
          f"{names}; others load from a checkpoint on disk)")
    print(f"  predicted: inferlab.sim step_time, profile {args.gpu}, the same chunks, "
          f"{DTYPE_BYTES[dtype]} bytes/element; each step timed alone (synchronize around it), "
          f"median of {timed} after {warm} warm-up")
    rows = measure(shape, args.device, dtype, prompt, args.batches, warm, timed, args.gpu)
    print(f"| step | measured ms | {args.gpu} profile ms | bound (profile) | measured / "
          f"predicted |")
    print("|---|---:|---:|---|---:|")
    for r in rows:
        print(f"| {r['step']} | {r['measured'] * 1e3:.2f} | {r['predicted'] * 1e3:.2f} | "
              f"{r['bound']} | {r['measured'] / r['predicted']:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
