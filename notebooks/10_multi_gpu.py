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
# # 10. Multi-GPU what-if: tensor parallelism (simulated)
#
# **Everything in this chapter is simulated** with the lab's roofline cost model (datasheet
# bandwidth and FLOP/s, the models' published shapes); nothing runs on several GPUs.
#
# With tensor parallelism each layer's weights and KV heads are split over `tp` GPUs. Each GPU
# holds less, so a model too big for one fits, and more KV cache fits beside it. But after the
# attention and after the MLP of every layer, the GPUs must add up their partial results (an
# all-reduce), which costs time on every step.

# %%
import inferlab as il
from inferlab.lab.chapters import smoke, ch10_multi_gpu as ch
from inferlab.lab.chapters._display import show

SMOKE = smoke()   # INFERLAB_SMOKE=1 shrinks the workload (CI, quick look)
print(ch.TITLE, "| smoke mode" if SMOKE else "| full run")

# %% [markdown]
# Knobs: `ch.measure(gpu="A100")`, `models=("llama-3-70b",)`, `batch=`, `context=`. GPU names and
# model shapes are in `inferlab.sim.gpus.GPUS` and `inferlab.core.shapes.MODEL_SHAPES`.

# %%
data = ch.measure(smoke=SMOKE)
print(ch.summary(data))

# %%
fig = ch.figure(data)
show(fig)

# %% [markdown]
# Left: per-GPU memory; at tp=1 the 70B model's weights alone exceed one H100. Middle: one
# decode step of the batch, split into the work (mostly reading weights and KV) and the
# all-reduces; the work shrinks with tp, the all-reduces do not. Right: how many tokens of KV
# cache fit on each GPU beside its share of the weights.

# %% [markdown]
# ### The check
# This cell fails if the effect went the other way.

# %%
for m, rows in data["models"].items():
    one, many = rows[0], rows[-1]
    assert many["weights_gb"] < one["weights_gb"]
    assert many["comm_ms"] > one["comm_ms"] == 0                 # simulated clock
    # communication keeps the speedup below the number of GPUs
    assert one["step_ms"] / many["step_ms"] < many["tp"], m      # simulated clock
print("weights per GPU shrink, all-reduce time appears, speedup stays below tp")

# %% [markdown]
# ## Claim vs measured here
#
# The verdict is computed from this run's numbers by the claim's judge in
# `inferlab.lab.claims`, the same one the report card (`inferlab claims`,
# `11_report_card`) uses: `holds`, `holds, smaller here`, `does not hold here` or
# `not measurable here`, with the reason in numbers.

# %%
from inferlab.lab import claims
claims.print_verdicts(10, data)
