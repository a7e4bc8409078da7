"""Notebook specs for chapters 06-10: ``CHAPTERS`` is a list of dicts
{"name": "06_chunked_prefill", "module": "ch06_chunked_prefill", "cells": [("md"|"code", src)]}.

Every chapter follows one shape: what the claim is, the knobs, the measurement, the figure,
a cell that asserts the direction of the effect, and "claim vs measured here" at the end.
"""

from _chapters_a import SETUP  # noqa: E402 - one setup cell for every chapter

CLAIM_VS_MEASURED = """\
print("Claim:   ", ch.CLAIM)
print()
print("Measured:", ch.summary(data))"""


def chapter(name, module, intro, knobs, measure, check, after_figure=None, extra=()):
    cells = [("md", intro), ("code", SETUP.format(module=module)), ("md", knobs),
             ("code", measure), ("code", "fig = ch.figure(data)\nshow(fig)   # fig.show() for "
                                 "the interactive version")]
    if after_figure:
        cells.append(("md", after_figure))
    cells += list(extra)
    cells += [("md", "### The check\nThis cell fails if the effect went the other way."),
              ("code", check),
              ("md", "## Claim vs measured here"), ("code", CLAIM_VS_MEASURED)]
    return {"name": name, "module": module, "cells": cells}


CH06 = chapter(
    "06_chunked_prefill", "ch06_chunked_prefill",
    """# 6. Chunked prefill and in-flight batching

A few answers are streaming out, one token per step. Then a long prompt arrives. Without
chunking, the engine computes the whole prompt in one step, and every streaming answer waits
for that step: the reader sees the text stall. With **chunked prefill**, the long prompt gets
only a slice of each step's token budget; the streams keep their pace and the prompt is done a
little later.

We look at the **inter-token latency** (ITL) of the streaming answers: the typical gap (p50)
barely moves, the tail (p99) is where the stall shows.""",
    """The engine runs the real model loop; time comes from the **simulated H100 clock** pricing an
8B-parameter model, so the picture does not depend on how busy this CPU is. In smoke mode
the model is the tiny random one (the scheduler does not care what the weights say).

Knobs to try: `ch.measure(smoke=SMOKE, chunk=128)` (smaller slices: smoother streams, slower
long prompts), or `clock="wall"` to time this machine instead.""",
    "data = ch.measure(smoke=SMOKE)\nprint(ch.summary(data))",
    """u, c = data["runs"]["unchunked"], data["runs"]["chunked"]
assert c["p99"] < u["p99"], "chunked prefill should shorten the p99 inter-token latency"
print(f"p99 ITL: chunked {c['p99'] * 1e3:.1f} ms < unchunked {u['p99'] * 1e3:.1f} ms")""",
    """Each dot is one gap between two tokens of a streaming answer. The dotted lines mark when a
long prompt arrives: without chunking, a tall dot follows each one. The price of chunking is
paid by the long prompt itself, whose first token comes a bit later (see the summary).""")

CH07 = chapter(
    "07_prefix_caching", "ch07_prefix_caching",
    """# 7. Prefix caching: shared system prompts and agent loops

The model keeps no memory between calls. An agent that calls a tool sends, on every round,
the tool definitions, the task, and everything said so far, plus the new tool result. So
round 5 sends more than round 4. Without a cache, the engine computes all of it again each
time. With **prefix caching**, the KV blocks of a prompt's beginning are kept and found by a
hash of their tokens; a later prompt that starts the same way reuses them and computes only
what is new. The same helps any set of requests that share a system prompt.""",
    """Two experiments on the engine, each with caching off and on:
1. agent loops (tool definitions, task, then one round per tool result);
2. requests sharing one long system prompt, one after another.

Token counts are exact; time is the **simulated H100 clock** (8B model shape). Smoke mode uses
the tiny random model. Try `ch._sizes(SMOKE)` to see the sizes, and pass your own engine
options, e.g. `ch.measure(smoke=SMOKE, block_size=32)` (bigger blocks: coarser reuse).""",
    "data = ch.measure(smoke=SMOKE)\nprint(ch.summary(data))",
    """u, c = data["agent"]["uncached"], data["agent"]["cached"]
# every round after the first re-sends the previous one: it must cost less with the cache
for k in range(1, len(u["ttft"])):
    assert c["computed_tokens"][k] < u["computed_tokens"][k], k
    assert c["ttft"][k] < u["ttft"][k], k
su, sc = data["shared"]["uncached"], data["shared"]["cached"]
assert sum(sc["ttft"][1:]) < sum(su["ttft"][1:])
print("every cached round computes fewer tokens and starts sooner than the uncached one")""",
    """Left: without the cache, the tokens computed per round grow with the conversation (they
follow the dotted line: the whole prompt). With it, each round computes only about its new
tool result. Right: requests after the first find the shared system prompt already cached.""")

CH08 = chapter(
    "08_safety_streaming", "ch08_safety_streaming",
    """# 8. Safety classifiers and streaming

Many services check the user's message before answering, and the answer before showing it.
Each check is another model call. Here both checks are **real calls to SmolLM2**, prompted to
answer "yes" or "no" to "is this harmful?", in the same engine as the answer:

* the **input check** runs before the answer starts, so its full time is added to the time
  to first token;
* the **output check** decides when text may be shown. *Streamed*: shown as generated (no
  output check). *Chunked*: checked every few tokens, the check running in the same batch as
  the rest of the answer. *Buffered*: nothing shown until the whole answer is checked.

A 135M model is a poor judge of harm; what we measure is the *cost* of the stages.""",
    """Times are this machine's **wall clock** (shared CPU: expect noise between runs).
Knobs: `ch.measure(smoke=SMOKE, user="...")` for another message; `ch._sizes(SMOKE)` shows the
answer length and how often the chunked policy checks.""",
    """data = ch.measure(smoke=SMOKE)
print(ch.summary(data))
for v in data["verdicts"]:
    print(f"  flagged={v['flagged']!s:5}  {v['seconds'] * 1e3:6.0f} ms  {v['text']}")""",
    """fv = data["first_visible"]
assert data["input_check_s"] > 0
assert fv["buffered"] > fv["streamed"], "buffering for a check should delay the first word"
print(f"first visible token: streamed {fv['streamed'] * 1e3:.0f} ms, "
      f"buffered {fv['buffered'] * 1e3:.0f} ms")""",
    """Each line counts the answer tokens a reader can see over time. The shaded band is the input
check: nothing can start before it ends. Buffered output appears all at once at the end;
chunked output arrives in steps, one per check.

On a CPU, each check is a prefill of the whole answer so far, which costs far more than a
decode step, and it shares the batch with the answer, which waits for it. So here chunked
checking may not beat buffering at all; on a GPU, where a short prefill costs about as much
as a decode step, each check is cheap. Compare the claim below with what you measured.""")

CH09 = chapter(
    "09_kernels", "ch09_kernels",
    """# 9. The decode attention kernel

For every new token, attention reads the K and V of the whole context from the paged cache.
The **reference** (torch) first gathers the scattered blocks into one tensor, then computes
softmax attention: it moves the data twice. The **numba** kernel walks the block table and
keeps a running softmax, reading each block once, in place.""",
    """Both run now, on this machine, on the same shuffled caches at SmolLM2-135M's attention shape
(9 query heads, 3 KV heads, head size 64, blocks of 16). The grey marks are *not* measured:
they are the time an H200 would need at 80% of its memory bandwidth, to show the scale.
The full table, and the method, are in BENCHMARKS.md (`python -m inferlab.kernels.bench`).""",
    """data = ch.measure(smoke=SMOKE)
print(ch.summary(data))
print("GPU:", data["gpu"]["note"])""",
    """import statistics
speedups = [r["speedup"] for r in data["rows"]]
assert statistics.median(speedups) > 1.0, "numba should beat the gather-then-attend reference"
print("median speedup of numba over the reference:", f"{statistics.median(speedups):.1f}x")""",
    """No GPU numbers have been recorded yet: the CUDA kernels are tested in numba's CUDA simulator
only, and `kernels/gpu_check.sh` is ready for the first GPU run. Until then this chapter
shows CPU measurements and a labelled bandwidth estimate, not GPU timings.""")

CH10 = chapter(
    "10_multi_gpu", "ch10_multi_gpu",
    """# 10. Multi-GPU what-if: tensor parallelism (simulated)

**Everything in this chapter is simulated** with the lab's roofline cost model (datasheet
bandwidth and FLOP/s, the models' published shapes); nothing runs on several GPUs.

With tensor parallelism each layer's weights and KV heads are split over `tp` GPUs. Each GPU
holds less, so a model too big for one fits, and more KV cache fits beside it. But after the
attention and after the MLP of every layer, the GPUs must add up their partial results (an
all-reduce), which costs time on every step.""",
    """Knobs: `ch.measure(gpu="A100")`, `models=("llama-3-70b",)`, `batch=`, `context=`. GPU names and
model shapes are in `il.costmodel.GPUS` and `il.costmodel.MODEL_SHAPES`.""",
    "data = ch.measure(smoke=SMOKE)\nprint(ch.summary(data))",
    """for m, rows in data["models"].items():
    one, many = rows[0], rows[-1]
    assert many["weights_gb"] < one["weights_gb"]
    assert many["comm_ms"] > one["comm_ms"] == 0
    # communication keeps the speedup below the number of GPUs
    assert one["step_ms"] / many["step_ms"] < many["tp"], m
print("weights per GPU shrink, all-reduce time appears, speedup stays below tp")""",
    """Left: per-GPU memory; at tp=1 the 70B model's weights alone exceed one H100. Middle: one
decode step of the batch, split into the work (mostly reading weights and KV) and the
all-reduces; the work shrinks with tp, the all-reduces do not. Right: how many tokens of KV
cache fit on each GPU beside its share of the weights.""")

CHAPTERS = [CH06, CH07, CH08, CH09, CH10]
