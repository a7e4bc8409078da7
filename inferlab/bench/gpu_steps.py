"""Engine step times of an 8B-shaped model on the GPU beside the simulated clock's predictions
(run by kernels/gpu_check.sh on a lent H200).

    python -m inferlab.bench.gpu_steps [--shape llama-3-8b] [--gpu H200]
    python -m inferlab.bench.gpu_steps --tiny --device cpu      # dry run: every step, tiny

Random weights in bf16 (``Engine("random:llama-3-8b")``: no 8B checkpoint travels to the GPU
machine). Steps, as the engine runs them: a 512-token prefill at batch 1 (each a fresh request
that stops after its first token), and decode steps (one new token per sequence) at batch 1 and
32 after 512-token prompts (all prefilled in one step, so every sequence of a decode step has
the same context). Each ``Engine.step()`` is timed alone (``torch.cuda.synchronize()``
before; the step itself ends by reading the sampled tokens back); the median of a few timed
steps after warm-ups is printed beside the ``inferlab.sim`` cost model's ``step_time`` for
the GPU profile, with the same shape, the same (new tokens, context) chunks and 2 bytes per
element, and the roofline term that bounds it. The same steps through transformers'
``LlamaForCausalLM`` forward on the same weights (SDPA, its ``DynamicCache``, greedy token)
stand beside them: what the engine's own overhead (scheduling, paged KV, kernel launches) adds.
"""
from __future__ import annotations

import argparse
import inspect
import statistics
import time

import torch

from inferlab.core.shapes import ModelShape
from inferlab.sim.costmodel import step_terms, step_time
from inferlab.sim.profiles import get_gpu

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


class Stepper:
    """transformers' forward as one engine-like step: new tokens in, cache extended, greedy
    token out."""

    def __init__(self, model, device: str):
        self.model, self.device = model, device
        params = inspect.signature(model.forward).parameters
        # transformers renamed past_key_values to cache (5.2x); the GPU machine may be older
        self.cache_arg = "cache" if "cache" in params else "past_key_values"

    def step(self, ids, cache=None):
        """(seconds, next token ids [B, 1], cache) of one forward over ``ids`` [B, T]."""
        kwargs = {self.cache_arg: cache} if cache is not None else {}
        _sync(self.device)
        t0 = time.perf_counter()
        out = self.model(input_ids=ids, use_cache=True, logits_to_keep=1, **kwargs)
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        _sync(self.device)
        return time.perf_counter() - t0, nxt, out[self.cache_arg]


def _timed_step(eng, device: str):
    _sync(device)
    t0 = time.perf_counter()
    outs = eng.step()
    return time.perf_counter() - t0, outs


def prefill_times(eng, device, prompts, warm, timed) -> list[float]:
    """Seconds of the engine's timed prefill steps (batch 1, each a fresh request)."""
    import inferlab as il
    one = il.SamplingParams(max_tokens=1, ignore_eos=True)
    times = []
    for _ in range(warm + timed):
        eng.add_request(prompts(1)[0], one)
        t, outs = _timed_step(eng, device)
        assert outs and outs[0].finished, "a prefill did not finish in one step"
        times.append(t)
    return times[warm:]


def decode_times(eng, device, prompts, batch, warm, timed):
    """(seconds of each timed decode step, context of the first and last) at ``batch``."""
    import inferlab as il
    params = il.SamplingParams(max_tokens=warm + timed + 2, ignore_eos=True)
    ids = [eng.add_request(p, params) for p in prompts(batch)]
    started = {o.request_id for o in eng.step() if o.token_ids}
    if len(started) < batch:   # the decode steps would then mix contexts (and prefills)
        raise RuntimeError(f"{len(started)} of {batch} prompts prefilled in one step; raise "
                           "max_num_batched_tokens to batch x prompt")
    ctx0 = prompts.length + 1                            # the first decoded token's context
    times = []
    for _ in range(warm + timed):
        t, outs = _timed_step(eng, device)
        assert len(outs) == batch and all(not o.finished for o in outs), "not a decode step"
        times.append(t)
    for rid in ids:
        eng.abort(rid)
    return times[warm:], ctx0 + warm, ctx0 + warm + timed - 1


def host_overhead(eng, device, prompts, n=2000):
    """(host microseconds per tiny torch op, and on a GPU (GPU operations, GPU busy ms, wall
    ms) of one profiled engine decode step at batch 1, else None): a step that launches k
    kernels cannot take less than k times the host's launch cost."""
    import inferlab as il
    from torch.profiler import ProfilerActivity, profile
    x = torch.zeros(1, device=device)
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(n):
        x.add_(1)
    _sync(device)
    per_op = (time.perf_counter() - t0) / n * 1e6
    if not device.startswith("cuda"):
        return per_op, None
    rid = eng.add_request(prompts(1)[0], il.SamplingParams(max_tokens=4, ignore_eos=True))
    eng.step()                                            # the prefill
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            t0 = time.perf_counter()
            eng.step()
            _sync(device)
            wall = time.perf_counter() - t0
        ops = [e for e in prof.events() if e.device_type.name == "CUDA"]
        # the GPU's busy time (overlaps merged) against the step's wall time
        spans = sorted((e.time_range.start, e.time_range.end) for e in ops)
        busy, end = 0.0, float("-inf")
        for a, b in spans:
            busy += max(0.0, b - max(a, end))
            end = max(end, b)
        kernels = (len(ops), busy / 1e3, wall * 1e3)
    except Exception as e:  # noqa: BLE001 - the timings above stand without this count
        print(f"  (no kernel count: {type(e).__name__}: {e})")
        kernels = None
    eng.abort(rid)
    return per_op, kernels


def hf_times(model, device, prompts, batches, warm, timed):
    """The same steps through transformers' forward: {"prefill": [s], batch: [s]}."""
    run, res = Stepper(model, device), {}
    ids = torch.tensor(prompts(1), device=device)
    res["prefill"] = [run.step(ids)[0] for _ in range(warm + timed)][warm:]
    for batch in batches:
        _, nxt, cache = run.step(torch.tensor(prompts(batch), device=device))
        times = []
        for _ in range(warm + timed):
            t, nxt, cache = run.step(nxt, cache)
            times.append(t)
        res[batch] = times[warm:]
        del cache
    return res


class Prompts:
    """Random token-id prompts of one length, from a seeded generator."""

    def __init__(self, length: int, vocab: int):
        self.length, self.vocab = length, vocab
        self.g = torch.Generator().manual_seed(1)

    def __call__(self, batch: int) -> list[list[int]]:
        return torch.randint(0, self.vocab, (batch, self.length), generator=self.g).tolist()


def measure(spec: str, device: str, dtype: str, prompt: int, batches, warm: int, timed: int,
            gpu_name: str) -> tuple[ModelShape, list[dict], tuple]:
    """The model's shape, rows of (step, engine s, transformers s, predicted s, bound), and
    the host's overhead (``host_overhead``)."""
    import inferlab as il
    gpu = get_gpu(gpu_name)
    max_len, block = prompt + warm + timed + 16, 16
    # KV blocks for the largest batch at full length (the default budget fits only a few)
    eng = il.Engine(spec, device=device, dtype=dtype, max_num_seqs=max(batches),
                    max_num_batched_tokens=max(batches) * prompt, enable_prefix_caching=False,
                    max_model_len=max_len, block_size=block,
                    num_blocks=max(batches) * -(-max_len // block) + 1, clock="wall")
    shape = ModelShape.from_hf_config(eng.loaded.config, name=spec)
    nbytes = DTYPE_BYTES[dtype]
    prompts = Prompts(prompt, shape.vocab_size)

    def row(name, chunks_per_step, engine, hf):
        predicted = [step_time(gpu, shape, c, nbytes) for c in chunks_per_step]
        terms = step_terms(gpu, shape, chunks_per_step[0], nbytes)
        return dict(step=name, engine=statistics.median(engine), hf=statistics.median(hf),
                    predicted=statistics.mean(predicted),
                    bound="compute" if terms["compute"] else "memory", n=len(engine))

    with torch.inference_mode():
        hf = hf_times(eng.loaded.hf_model, device, prompts, batches, warm, timed)
        rows = [row(f"prefill {prompt} tokens, batch 1", [[(prompt, prompt)]],
                    prefill_times(eng, device, prompts, warm, timed), hf["prefill"])]
        for batch in batches:
            times, c0, c1 = decode_times(eng, device, prompts, batch, warm, timed)
            chunks = [[(1, c)] * batch for c in range(c0, c1 + 1)]
            rows.append(row(f"decode batch {batch}, context {c0}-{c1}", chunks, times,
                            hf[batch]))
        overhead = host_overhead(eng, device, prompts)
    return shape, rows, overhead


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="llama-3-8b", help="a model shape of inferlab.core.shapes")
    p.add_argument("--gpu", default="H200", help="the GPU profile that prices the steps")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPE_BYTES))
    p.add_argument("--tiny", action="store_true", help="dry run: the tiny model, few steps")
    p.add_argument("--prompt", type=int, default=None, help="prompt tokens (512; dry run 16)")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    args = p.parse_args(argv)
    spec = "tiny" if args.tiny else f"random:{args.shape}"
    prompt = args.prompt or (16 if args.tiny else 512)
    warm, timed = (1, 2) if args.tiny else (3, 7)
    where = (torch.cuda.get_device_name() if args.device.startswith("cuda") else args.device)
    where += " (dry run: times meaningless)" if args.tiny else ""
    t0 = time.perf_counter()
    shape, rows, (per_op, kernels) = measure(spec, args.device, args.dtype, prompt,
                                             args.batches, warm, timed, args.gpu)
    print(f"## {spec}: hidden {shape.hidden_size}, {shape.num_layers} layers, "
          f"{shape.num_heads}/{shape.num_kv_heads} heads x {shape.head_dim}, intermediate "
          f"{shape.intermediate_size}, vocab {shape.vocab_size}; random weights, {args.dtype}, "
          f"on {where}; built and measured in {time.perf_counter() - t0:.0f} s")
    print(f"  engine: inferlab Engine.step() (scheduler, paged KV, its attention backend); "
          f"transformers: LlamaForCausalLM forward on the same weights (SDPA, DynamicCache)")
    print(f"  predicted: inferlab.sim step_time, profile {args.gpu}, the same chunks, "
          f"{DTYPE_BYTES[args.dtype]} bytes/element; each step timed alone (synchronize "
          f"before it), median of {timed} after {warm} warm-up")
    print(f"| step | engine ms | transformers ms | {args.gpu} profile ms | bound (profile) | "
          f"engine / predicted |")
    print("|---|---:|---:|---:|---|---:|")
    for r in rows:
        print(f"| {r['step']} | {r['engine'] * 1e3:.2f} | {r['hf'] * 1e3:.2f} | "
              f"{r['predicted'] * 1e3:.2f} | {r['bound']} | {r['engine'] / r['predicted']:.2f} |")
    print(f"  host: {per_op:.1f} us per tiny torch op (x.add_ on {args.device}, 2000 in a row)")
    if kernels:
        n, busy, wall = kernels
        print(f"  one engine decode step at batch 1 (profiled): {n} GPU operations (kernels, "
              f"copies), the GPU busy {busy:.1f} ms of the step's {wall:.1f} ms; at "
              f"{per_op:.1f} us a launch, {per_op * n / 1e3:.1f} ms of launches")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
