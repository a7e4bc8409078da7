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
# # 3. Prefill and decode
#
# Before the first word appears, the model reads the whole input in one pass: **prefill**. Then
# it writes the answer one token per pass: **decode**. The two behave very differently. Prefill
# is a lot of arithmetic, so it takes longer the longer the input. Decode does little
# arithmetic per pass, but each pass must read all the model's weights from memory, so its
# speed is set by memory bandwidth and hardly depends on how long the input was.

# %%
import inferlab as il
from inferlab.lab.chapters import smoke, ch03_prefill_decode as ch
from inferlab.lab.chapters._display import show

SMOKE = smoke()   # INFERLAB_SMOKE=1 shrinks the workload (CI, quick look)
print(ch.TITLE, "| smoke mode" if SMOKE else "| full run")

# %% [markdown]
# Each prompt length is run alone (no other request shares its steps). Two clocks: the
# **simulated H100** (an 8B model's arithmetic and memory traffic priced at the GPU's datasheet
# numbers) and this machine's **wall clock** (the real SmolLM2, in smoke mode too: smoke
# shrinks the sweep, not the model). The roofline is drawn from the same cost model.
# On the wall clock the lengths run interleaved and repeated (32, 128, 512, 32, 128, 512 ...):
# each number is the median, with its range in brackets, and a warning is printed when the
# machine was too busy to trust them (`inferlab.lab.protocol`).
#
# Knobs: `ch.LENGTHS`, `ch.SIM_LENGTHS`, `ch.roofline(gpu="L4", model="llama-3-70b")`.

# %%
data = ch.measure(smoke=SMOKE)
print(ch.summary(data))

# %% [markdown]
# ## The same sweep on this machine's wall clock

# %%
show(ch.figure(data, clock="wall"))

# %% [markdown]
# ## Why a short prefill costs what it does
#
# On this CPU even a prompt of a few tokens takes about as long as a decode step. To see why,
# time the single prefill step of prompts of 1, 2, 4 ... 256 tokens (in smoke mode 1, 4, 16,
# 64) and fit a line: **step time = fixed cost + cost per token**. The fixed cost is paid by
# every step whatever it computes: the step reads every weight of the model once (135M fp32
# weights, 538 MB) and launches each of the 30 layers' operations. The cost per token is the
# arithmetic, about 2 FLOPs per weight per token. The dotted line is the time to read the
# weights once at the memory bandwidth measured on this machine just now. Below the
# break-even length, the fixed part dominates: a short prefill costs about one decode step.
#
# The steps run twice, interleaved: with one torch thread, and with the engine's own thread
# count. On a 2-core machine shared with other work, a matrix-matrix multiply (a step of two
# or more tokens) split over two threads must wait for the slower thread, and another process
# often holds one of the CPUs; a one-token step (matrix-vector) suffers much less. If the
# two lines sit far apart, that wait is what the difference measures. (Wall clock: medians of
# interleaved repeats, ranges as error bars; Theil-Sen lines, so one step slowed by a
# neighbour does not tilt them.)

# %%
print(ch.fit_text(data["step_fit"]))
show(ch.fit_figure(data))

# %%
fig = ch.figure(data)
show(fig)

# %% [markdown]
# Left: on the simulated H100 the time to first token rises with the input, while the time
# per output token is a flat line. Right: the roofline. A step below the ridge is limited by
# memory bandwidth (its height is bandwidth x intensity), above it by arithmetic. Decode with
# one request sits far down the slope; batching many requests moves it up (chapter 5). Prefill
# of a long prompt sits on the flat top.

# %% [markdown]
# ### The check
# This cell fails if the effect went the other way.

# %%
# On the simulated clock (deterministic: priced by the cost model, the same every run). The
# wall-clock sweep is printed above with its spread, never asserted: a busy machine moves it.
rows = data["runs"]["sim"]
ttft, tpot = [r["ttft"] for r in rows], [r["tpot"] for r in rows]
assert ttft[-1] > 2 * ttft[0], ttft               # TTFT grows with the input
assert max(tpot) < 1.6 * min(tpot), tpot          # per-token decode time stays flat
print("TTFT grows with input length; the time per output token does not (simulated H100)")

# %% [markdown]
# ## Claim vs measured here
#
# The verdict is computed from this run's numbers by the claim's judge in
# `inferlab.lab.claims`, the same one the report card (`inferlab claims`,
# `11_report_card`) uses: `holds`, `holds, smaller here`, `does not hold here` or
# `not measurable here`, with the reason in numbers.
#
# Two more wall-clock runs in the same measurement judge two more things the articles say.
# **Each token extends the sequence** (`03-decode-context`): one request decodes after a short
# and after a long prompt, and each decode step reads the weights plus the keys and values of
# every token before it; the reason gives the step times beside the bytes read.
# **Some models respond faster than others** (`03-model-sizes`): the same prompt on SmolLM2-135M
# and on larger SmolLM2 shapes built with random weights (a forward pass takes as long whatever
# the weights say), interleaved; a shape whose weights do not fit in half the memory left is
# not run, and the reason says so.

# %%
from inferlab.lab import claims
claims.print_verdicts(3, data)
