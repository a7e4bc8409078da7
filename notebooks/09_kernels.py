# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 9. The decode attention kernel
#
# For every new token, attention reads the K and V of the whole context from the paged cache.
# The **reference** (torch) first gathers the scattered blocks into one tensor, then computes
# softmax attention: it moves the data twice. The **numba** kernel walks the block table and
# keeps a running softmax, reading each block once, in place.

# %%
import inferlab as il
from inferlab.lab.chapters import smoke, ch09_kernels as ch
from inferlab.lab.chapters._display import show

SMOKE = smoke()   # INFERLAB_SMOKE=1 shrinks the workload (CI, quick look)
print(ch.TITLE, "| smoke mode" if SMOKE else "| full run")

# %% [markdown]
# Both run now, on this machine, on the same shuffled caches at SmolLM2-135M's attention shape
# (9 query heads, 3 KV heads, head size 64, blocks of 16). The grey marks are *not* measured:
# they are the time an H200 would need at 80% of its memory bandwidth, to show the scale.
# The full table, and the method, are in BENCHMARKS.md (`inferlab bench kernels`).

# %%
data = ch.measure(smoke=SMOKE)
print(ch.summary(data))
print("GPU:", data["gpu"]["note"])

# %%
fig = ch.figure(data)
show(fig)

# %% [markdown]
# The CUDA kernels are tested in numba's CUDA simulator; GPU timings appear here only once
# BENCHMARKS.md records a GPU run (`kernels/gpu_check.sh`). Until then this chapter shows CPU
# measurements and a labelled bandwidth estimate, not GPU timings.

# %% [markdown]
# ## Memory-bound, or not?
#
# The claim behind paged attention kernels is that decode attention is limited by memory
# traffic: for every token and kv head it reads 512 bytes of K and V and does 768 FLOPs with
# them, 1.5 FLOPs per byte, at any batch or context (no sequence shares its K/V). Whether that
# makes it memory-bound depends on the machine's **ridge point**: its arithmetic rate divided
# by its memory bandwidth. A GPU's ridge is in the hundreds of FLOPs per byte, so there decode
# attention is memory-bound by a wide margin. This chapter measures this CPU's ridge now (a
# large matmul for the arithmetic, a parallel read of a large buffer for the memory), then
# asks the kernel: on K/V too large for the caches, does it read at the memory's speed? It
# also runs the case with the most bytes per FLOP decode attention gets: batch 1, a long
# context, one query head per kv head (0.5 FLOPs per byte, as in multi-head attention).
# Shapes whose K/V fits in the caches are left out of that question: they read from cache.

# %%
show(ch.bound_figure(data))

# %% [markdown]
# ### The whole decode step
#
# The article's claim is wider than attention: decoding "can be dominated by memory movement".
# A decode step reads every weight of the model once, and the K/V of every running sequence,
# to make one token per sequence: about two FLOPs per weight per sequence. At batch 1 that is
# a lot of bytes for little arithmetic; a large batch reads the same weights for many tokens
# and turns it around. Measured now on SmolLM2 in the real engine, batch 1 and a large batch
# interleaved: each step's bytes and FLOPs as shares of the roofs measured above. The nearer
# roof is the limit, and that is what the claim below is judged on.

# %%
from inferlab.lab.chapters import _ch09_decode_step as decode_step
print(decode_step.describe(data["decode_step"]).replace("; batch", ";\nbatch"))

# %% [markdown]
# ### The check
# This cell fails if the two kernels disagree (speed is judged, not asserted, at the end).

# %%
# Both kernels compute the same attention on every shape. Which is faster is a wall-clock
# question: it is judged below with its spread and a busy-machine warning, never asserted.
errors = [r["max_err"] for r in data["rows"]]
assert max(errors) < 1e-3, errors
print(f"numba and the reference agree on {len(errors)} shapes (max abs difference "
      f"{max(errors):.1e})")

# %% [markdown]
# ## Claim vs measured here
#
# The verdict is computed from this run's numbers by the claim's judge in
# `inferlab.lab.claims`, the same one the report card (`inferlab claims`,
# `11_report_card`) uses: `holds`, `holds, smaller here`, `does not hold here` or
# `not measurable here`, with the reason in numbers.

# %%
from inferlab.lab import claims
claims.print_verdicts(9, data)
