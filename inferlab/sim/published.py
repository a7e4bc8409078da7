"""The GPU profiles checked against the world: published measurements, and how far the cost
model misses them.

``POINTS`` holds published GPU measurements (GPU, model, batch, lengths -> a TTFT, an ITL or a
throughput), each with its source: document, URL (pinned to a commit where the source lives in
a repository) and the table or line the number is in. Only numbers a source states are recorded;
where a number had to be converted (a fit evaluated at a length, a token count the source
implies), ``note`` says how. ``validate()`` prices every point with the same cost model the
simulated clock uses (``costmodel.step_time``, on the datasheet profile in ``gpus.py``), and
``error_summary()`` is the median and worst |error| per GPU: the number every GPU projection
quotes beside itself (``lab/chapters/_kit.py``). Deterministic and quick: nothing is measured
here, and nothing in the cost model is fitted to these points.

How a point is priced (``chunks`` as the clock sees them: [(new_tokens, context_after)]):

- ``ttft``: one prefill step of the whole input for each of ``batch`` requests,
  ``step_time([(input_len, input_len)] * batch)`` (the step overhead included, as the clock
  adds it);
- ``itl``: one decode step at ``batch`` and ``context``, ``step_time([(1, context)] * batch)``;
- ``itl_slope``: how much the batch-1 ITL grows per token of context, between ``context`` and
  ``context_hi``;
- ``output_throughput`` / ``total_throughput``: a run of ``batch`` requests started together
  (one prefill step, then ``output_len - 1`` decode steps, the context growing by one each
  step): ``batch * output_len`` (or ``batch * (input_len + output_len)``) tokens over the summed
  step times, as the benchmarks that published them count it.

The error is (predicted - published) / published of the published quantity: for a throughput
an over-estimate of the rate is an under-estimate of the time.

``python -m inferlab.sim.published`` prints the table (BENCHMARKS.md quotes it).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from functools import lru_cache

from ..core.shapes import model_shape
from ..errors import InvalidInputError
from .costmodel import step_terms, step_time
from .gpus import GPUS, GPUProfile

# metric -> the unit ``value`` is stored in (SI) and how the table prints it
METRICS = {
    "ttft": ("s", 1e3, "ms"),
    "itl": ("s", 1e3, "ms"),
    "itl_slope": ("s per context token", 1e6, "ms per 1k ctx tokens"),
    "output_throughput": ("output tokens/s", 1.0, "out tok/s"),
    "total_throughput": ("(input + output) tokens/s", 1.0, "tok/s"),
}


@dataclass(frozen=True, slots=True)
class Published:
    """One published measurement and where it was published."""

    gpu: str                # a profile name in gpus.GPUS
    model: str              # a shape name in core/shapes.py
    dtype_bytes: int        # weights and KV cache (2 = bf16/fp16)
    tp: int                 # tensor-parallel GPUs
    batch: int              # requests at once (concurrency 1 = batch 1)
    input_len: int
    output_len: int
    metric: str             # a key of METRICS
    value: float            # as published, in the unit METRICS gives (SI)
    engine: str
    source: str             # document title
    url: str
    where: str              # the table, row or line the number is in
    context: int = 0        # itl: KV tokens the step reads; itl_slope: low end of the range
    context_hi: int = 0     # itl_slope: high end of the range
    note: str = ""          # conditions, and any conversion from what the source prints


_TORCHAO_H100 = ("torchao, torchao/quantization/README.md (2024-10-07)",
                 "https://github.com/pytorch/ao/blob/92dd5f557d32ce616a138dfe0bdc195355271514/"
                 "torchao/quantization/README.md")
_TORCHAO_VLLM = ("torchao, torchao/quantization/README.md, 'Performance benchmarks' (2026-01-05)",
                 "https://github.com/pytorch/ao/blob/aa2528724b07c33ce6497463b73ad2ec93909264/"
                 "torchao/quantization/README.md")
_VLLM_FP8 = ("vLLM Blog, 'The State of FP8 KV-Cache and Attention Quantization in vLLM' "
             "(2026-04-22; https://blog.vllm.ai/2026/04/22/fp8-kvcache.html)",
             "https://github.com/vllm-project/vllm-project.github.io/blob/"
             "5ffe2dd543a30f34309d71d8374803612223e9fb/_posts/2026-04-22-fp8-kvcache.md")
_GPT_FAST = ("gpt-fast README, 'Tensor Parallelism' table",
             "https://github.com/pytorch-labs/gpt-fast/blob/"
             "32971d3129541c5bfb4f715abc33d1c5f408d204/README.md")
_TRTLLM = ("TensorRT-LLM, docs/source/performance.md (v0.5/v0.6 data)",
           "https://github.com/NVIDIA/TensorRT-LLM/blob/138f96d45f90b9667426f7c47297d8c06bafac73/"
           "docs/source/performance.md")
_LMDEPLOY = ("LMDeploy, 'Benchmark on A100 (FP16)', docs/en/benchmark/a100_fp16.md",
             "https://github.com/InternLM/lmdeploy/blob/3e391df4673326f79363eebe030876861a9b7090/"
             "docs/en/benchmark/a100_fp16.md")
_GEN = ("generate.py's defaults: the prompt 'Hello, my name is' (5 tokens + BOS) and 200 new "
        "tokens; its tok/s = 200 / the whole generate() call (prefill + 199 decode steps), "
        "which is how it is priced here")

POINTS: tuple[Published, ...] = (
    # --- H100 (the sources say "H100" without the form factor; the profile is SXM) ---------
    Published("H100", "llama-3-8b", 2, 1, 1, 6, 200, "output_throughput", 126.90,
              "torchao generate.py (torch.compile, CUDA graphs)", *_TORCHAO_H100,
              "table after 'single NVIDIA-H100 GPU': Llama-3.1-8B, Base (bfloat16), "
              "Tokens/Second 126.90",
              note=f"batch 1 ('latency-optimized', batchsize=1); {_GEN}"),
    Published("H100", "llama-3-8b", 2, 1, 1, 256, 128, "itl", 6.44e-3 + 4.37e-8 * 256,
              "vLLM v0.19.1 (FlashAttention-3)", *_VLLM_FP8,
              "'Single Request Benchmarking', Llama-3.1-8B BF16: fitted ITL intercept 6.44 ms, "
              "slope 4.37e-05 ms/token",
              context=320,
              note="the post fits ITL = slope x input_len + intercept over inputs 256..125k "
                   "(vllm bench serve, concurrency 1, 128 output tokens); value = the fit at "
                   "input 256 (6.44 + 4.37e-05 x 256 = 6.451 ms); priced at the mid-decode "
                   "context 256 + 64"),
    Published("H100", "llama-3-8b", 2, 1, 1, 256, 128, "itl_slope", 4.37e-8,
              "vLLM v0.19.1 (FlashAttention-3)", *_VLLM_FP8,
              "'Single Request Benchmarking', Llama-3.1-8B BF16: fitted ITL slope "
              "4.37e-05 ms/token",
              context=256, context_hi=125_000,
              note="the slope of the published linear fit (ms per input token -> s per token); "
                   "predicted as the change of the batch-1 decode step from 256 to 125k tokens "
                   "of context, per token"),
    Published("H100", "llama-3-8b", 2, 1, 8, 20_000, 2_000, "itl", 15.18e-3,
              "vLLM v0.19.1 (FlashAttention-3)", *_VLLM_FP8,
              "Table 4 (throughput under load), BF16 row: Median ITL 15.18 ms",
              context=21_000,
              note="150 requests at concurrency 8, ~20k input and ~2k output tokens (+-15%); "
                   "priced as a decode step of 8 requests at the mid-decode context 20k + 1k; "
                   "steps that also carry a newcomer's prefill chunk are not modelled (the "
                   "median is a decode-only step)"),
    Published("H100", "llama-3-8b", 2, 1, 128, 32, 2048, "total_throughput", 6612.0,
              "vLLM 0.13.0 (vllm bench throughput)", *_TORCHAO_VLLM,
              "'NVIDIA H100' table, bfloat16/bfloat16 row: decode toks/s 6612",
              note="decode run: --num_prompts 128 --input_len 32 --output_len 2048; the figure "
                   "is vLLM's 'total tokens/s' (input + output; benchmarks/quantization/"
                   "parse_log.py); the 128 requests fit one batch and run together; the README "
                   "writes 'Llama-3-8.1B', the script's default model is Llama-3.1-8B"),
    Published("H100", "llama-3-8b", 2, 1, 32, 4096, 32, "total_throughput", 30946.5,
              "vLLM 0.13.0 (vllm bench throughput)", *_TORCHAO_VLLM,
              "'NVIDIA H100' table, bfloat16/bfloat16 row: prefill toks/s 30946.5",
              note="prefill run: --num_prompts 32 --input_len 4096 --output_len 32; 'total "
                   "tokens/s'; vLLM splits the 131k prompt tokens into chunked-prefill steps, "
                   "priced here as one prefill step (the same FLOPs; the overheads of the extra "
                   "steps are not counted)"),
    # --- A100 80GB SXM -----------------------------------------------------------------------
    *(Published("A100", "llama-3-8b", 2, tp, 1, 6, 200, "output_throughput", tps,
                "gpt-fast (torch.compile, CUDA graphs)", *_GPT_FAST,
                f"Llama-3.1-8B, {tp} GPU(s): {tps} Tokens/Second",
                note=f"8x A100-80GB power-limited to 330 W, batch 1; {_GEN}")
      for tp, tps in ((1, 93.83), (2, 149.10), (4, 217.21), (8, 276.01))),
    *(Published("A100", "llama-3-70b", 2, tp, 1, 6, 200, "output_throughput", tps,
                "gpt-fast (torch.compile, CUDA graphs)", *_GPT_FAST,
                f"Llama-3.1-70B, {tp} GPUs: {tps} Tokens/Second",
                note=f"8x A100-80GB power-limited to 330 W, batch 1; {_GEN}")
      for tp, tps in ((2, 16.03), (4, 37.45), (8, 58.78))),
    Published("A100", "llama-2-7b", 2, 1, 1, 128, 1, "ttft", 16e-3,
              "TensorRT-LLM v0.5", *_TRTLLM,
              "'Low Latency', A100 GPUs (FP16): LLaMA 7B, batch 1, TP 1, input 128: 1st Token "
              "Latency 16 ms",
              note="the methodology names the model Llama2-7b; FP16"),
    Published("A100", "llama-2-7b", 2, 1, 1, 2048, 1, "ttft", 133e-3,
              "TensorRT-LLM v0.5", *_TRTLLM,
              "'Low Latency', A100 GPUs (FP16): LLaMA 7B, batch 1, TP 1, input 2048: 1st Token "
              "Latency 133 ms",
              note="the methodology names the model Llama2-7b; FP16"),
    Published("A100", "llama-2-7b", 2, 1, 384, 128, 128, "output_throughput", 5586.0,
              "TensorRT-LLM v0.6.1 (gptSessionBenchmark)", *_TRTLLM,
              "'Peak Throughput', A100 GPUs (FP16): LLaMA 7B, batch 384, TP 1, 128/128: "
              "5,586 out tok/s",
              note="a static batch of 384 (context phase, then generation), FP16"),
    Published("A100", "llama-2-7b", 2, 1, 1, 2048, 128, "ttft", 0.139,
              "LMDeploy v0.1.0a1 (TurboMind)", *_LMDEPLOY,
              "'Static Inference Benchmark', llama2-7b: batch 1, tp 1, prompt 2048, output 128: "
              "FTL(ave) 0.139 s",
              note="A100-80G, FP16, CUDA 11.8; FTL = first token latency"),
    Published("A100", "llama-2-7b", 2, 1, 64, 1, 128, "output_throughput", 4154.81,
              "LMDeploy v0.1.0a1 (TurboMind)", *_LMDEPLOY,
              "'Static Inference Benchmark', llama2-7b: batch 64, tp 1, prompt 1, output 128: "
              "throughput 4154.81 out tok/s",
              note="A100-80G, FP16; 64 concurrent sessions, priced as a batch of 64 started "
                   "together"),
)


def _check(p: Published) -> None:
    if p.gpu not in GPUS:
        raise InvalidInputError(f"published point on unknown GPU {p.gpu!r}; known: {sorted(GPUS)}")
    model_shape(p.model)
    if p.metric not in METRICS:
        raise InvalidInputError(f"unknown metric {p.metric!r}; known: {sorted(METRICS)}")


def _decode_steps_time(gpu: GPUProfile, p: Published, first: int, last: int) -> float:
    """Sum of the decode steps with context ``first..last`` (batch ``p.batch``), each priced by
    ``step_time``. A decode step's price is affine in its context on either side of the point
    where it turns from memory- to compute-bound (FLOPs and bytes both grow linearly with it),
    so a run of steps on one side sums exactly to count x (first + last) / 2; the run is split
    where the bound changes. Exact, and a few dozen step prices instead of thousands."""
    if last < first:
        return 0.0
    shape = model_shape(p.model)

    def price(ctx: int) -> float:
        return step_time(gpu, shape, [(1, ctx)] * p.batch, p.dtype_bytes, p.tp)

    def bound(ctx: int) -> bool:
        return step_terms(gpu, shape, [(1, ctx)] * p.batch, p.dtype_bytes, p.tp)["compute"] > 0

    total, todo = 0.0, [(first, last)]
    while todo:
        a, b = todo.pop()
        if b - a < 2 or bound(a) == bound(b):
            total += (b - a + 1) * (price(a) + price(b)) / 2
        else:
            mid = (a + b) // 2
            todo += [(a, mid), (mid + 1, b)]
    return total


def _run_time(gpu: GPUProfile, p: Published) -> tuple[float, float]:
    """(seconds, decode seconds) of ``p.batch`` requests started together: one prefill step,
    then ``output_len - 1`` decode steps (the first output token comes from the prefill)."""
    shape = model_shape(p.model)
    prefill = step_time(gpu, shape, [(p.input_len, p.input_len)] * p.batch, p.dtype_bytes, p.tp)
    decode = _decode_steps_time(gpu, p, p.input_len + 1, p.input_len + p.output_len - 1)
    return prefill + decode, decode


@lru_cache(maxsize=None)
def predict(p: Published, gpu: GPUProfile) -> tuple[float, float]:
    """(the cost model's value of ``p.metric`` on ``gpu``, the decode share of its time)."""
    _check(p)
    shape = model_shape(p.model)
    if p.metric == "ttft":
        return step_time(gpu, shape, [(p.input_len, p.input_len)] * p.batch,
                         p.dtype_bytes, p.tp), 0.0
    if p.metric == "itl":
        return step_time(gpu, shape, [(1, p.context)] * p.batch, p.dtype_bytes, p.tp), 1.0
    if p.metric == "itl_slope":
        lo, hi = (step_time(gpu, shape, [(1, c)] * p.batch, p.dtype_bytes, p.tp)
                  for c in (p.context, p.context_hi))
        return (hi - lo) / (p.context_hi - p.context), 1.0
    seconds, decode = _run_time(gpu, p)
    per_request = p.output_len if p.metric == "output_throughput" else p.input_len + p.output_len
    return p.batch * per_request / seconds, decode / seconds


def _profile_and_points(profile) -> list[tuple[Published, GPUProfile]]:
    if profile is None:
        return [(p, GPUS[p.gpu]) for p in POINTS]
    if isinstance(profile, GPUProfile):
        return [(p, profile) for p in POINTS if p.gpu == profile.name]
    from .profiles import get_gpu
    from .this_cpu import is_this_cpu
    if is_this_cpu(profile):        # checked against its own steps, not published ones
        return []
    gpu = get_gpu(profile)
    return [(p, gpu) for p in POINTS if p.gpu == gpu.name]


def validate(profile_name: str | GPUProfile | None = None) -> list[dict]:
    """Predicted vs published for every point (``None``), the points of one GPU (a name), or
    the points of ``profile.name`` priced on a given profile (a what-if: a profile made with
    ``dataclasses.replace``)."""
    rows = []
    for p, gpu in _profile_and_points(profile_name):
        predicted, decode_share = predict(p, gpu)
        error = (predicted - p.value) / p.value
        rows.append({"gpu": p.gpu, "model": p.model, "tp": p.tp, "batch": p.batch,
                     "input_len": p.input_len, "output_len": p.output_len,
                     "context": p.context, "metric": p.metric, "unit": METRICS[p.metric][0],
                     "published": p.value, "predicted": predicted, "error": error,
                     "abs_error": abs(error), "decode_share": decode_share,
                     "engine": p.engine, "source": p.source, "url": p.url, "where": p.where,
                     "note": p.note, "point": p})
    return rows


def error_summary(gpu: str | GPUProfile | None = None, metrics=None) -> dict:
    """{"median", "worst", "n"}: the median and largest |relative error| over the points of
    ``gpu`` (a name, a profile, or ``None`` for all), optionally only ``metrics``; the median
    and worst are ``None`` where there is no point."""
    errs = [r["abs_error"] for r in validate(gpu) if metrics is None or r["metric"] in metrics]
    if not errs:
        return {"median": None, "worst": None, "n": 0}
    return {"median": statistics.median(errs), "worst": max(errs), "n": len(errs)}


def label_note(gpu: str = "H100") -> str:
    """The clause a projection on ``gpu`` quotes: how far the cost model is from published
    measurements on that GPU."""
    s = error_summary(gpu)
    if not s["n"]:
        return f"no published {gpu} measurement checks the cost model"
    return (f"the cost model is within {s['median']:.0%} median (worst {s['worst']:.0%}) of "
            f"{s['n']} published {gpu} measurements")


def _fmt(metric: str, value: float) -> str:
    _, scale, unit = METRICS[metric]
    v = value * scale
    digits = max(0, 3 - math.floor(math.log10(abs(v)))) if v else 0    # 4 significant digits
    return f"{v:,.{digits}f} {unit}"


def table(rows: list[dict] | None = None) -> str:
    """The points as a markdown table, then the summary per GPU."""
    rows = validate() if rows is None else rows
    out = ["| GPU | model | TP | batch | input | output | context | metric | published "
           "| predicted | error | engine | source |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        ctx = r["context"] or "-"
        if r["metric"] == "itl_slope":
            ctx = f"{r['point'].context}-{r['point'].context_hi}"
        out.append(f"| {r['gpu']} | {r['model']} | {r['tp']} | {r['batch']} | {r['input_len']} "
                   f"| {r['output_len']} | {ctx} | {r['metric']} "
                   f"| {_fmt(r['metric'], r['published'])} "
                   f"| {_fmt(r['metric'], r['predicted'])} | {r['error']:+.0%} | {r['engine']} "
                   f"| [{r['source']}]({r['url']}): {r['where']} |")
    out.append("")
    for gpu in sorted({r["gpu"] for r in rows}):
        s = error_summary(gpu)
        out.append(f"- {gpu}: median |error| {s['median']:.0%}, worst {s['worst']:.0%}, "
                   f"{s['n']} points")
    s = error_summary()
    out.append(f"- all: median |error| {s['median']:.0%}, worst {s['worst']:.0%}, "
               f"{s['n']} points")
    return "\n".join(out)


if __name__ == "__main__":  # pragma: no cover - a printing entry point
    print(table())
