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
# # 15. What a token costs, how many long contexts fit, where the memory goes
#
# Two facts from the earlier chapters have consequences a serving bill shows. Every step
# reads all of the model's weights once, however many tokens it computes (chapter 3). And
# every token of every live request keeps its keys and values in the KV cache (chapter 4).
# From the first: a prompt token, one of hundreds computed in a prefill step, costs much
# less than a generated token, which gets a decode step to itself (per request), and that is
# why API price lists charge several times more per output token. From the second: a model
# that *accepts* a long context cannot hold *many* long contexts at once, and the weights
# and the KV cache are most of what a serving process holds in memory.

# %%
import inferlab as il
from inferlab.lab.chapters import smoke, ch15_memory_and_price as ch
from inferlab.lab.chapters._display import show

SMOKE = smoke()   # INFERLAB_SMOKE=1 shrinks the workload (CI, quick look)
print(ch.TITLE, "| smoke mode" if SMOKE else "| full run")

# %% [markdown]
# Three measurements, all on the real SmolLM2-135M-Instruct:
#
# * **Cost per token**: one request, then a full batch, each with prompts of the same length
#   and a fixed number of generated tokens, interleaved and repeated (A B A B) on this
#   machine's wall clock. The engine's own step records split the time: steps that only
#   prefilled give the seconds per prompt token, steps that only decoded the seconds per
#   generated token. At an hourly cost for this machine (an assumption, `HOURLY_USD` in
#   `inferlab/lab/chapters/_ch15_price.py`) that is a price per million tokens.
# * **Requests at once**: the same requests, all waiting at the start, through the engine's
#   real scheduler and block allocator with a KV budget that has room for two long requests:
#   once with long prompts, once with short ones. Block and step counts are the same on every
#   run; the steps are also priced on the simulated H100 for a throughput (a projection).
# * **Where the memory goes**: one engine in a Python process of its own (nothing else of
#   this notebook counted), its resident memory idle and at its peak under a batch, split by
#   the engine's own tensor sizes; beside it the same split worked out for an 8B model on an
#   80 GB GPU (a projection: arithmetic from the published shape).
#
# Knobs: `ch.sizes(SMOKE)`, `ch.measure(..., fits=4)`, `resize=dict(batch=16)`.

# %%
data = ch.measure(smoke=SMOKE)
print(ch.summary(data))

# %%
for fig in ch.figures(data).values():
    show(fig)

# %% [markdown]
# First, what a token costs: a prompt token costs a small fraction of a generated token, as
# measured here (the dots, with the range of the repeats); with more requests in a decode
# step the generated token gets cheaper, since the weights read once serve every request of
# the step. Beside them, the output/input ratios of public API list prices (OpenAI and
# Anthropic, with the dates they were seen in `_ch15_price.PUBLISHED`); a provider's ratio
# also carries its margins and its batch sizes, so only the direction is compared. Then how
# many long contexts fit: the same KV budget runs every short request at once but only a few
# of the long ones; the others wait, and each decode step makes fewer tokens. Last, where the
# memory goes: the weights (here twice: the fp32 tensors and the copy packed for the CPU
# GEMM, hatched) and the KV cache, reserved in full when the engine starts, are most of the
# process; activations are a thin slice even under load. Below it, the same parts projected
# for a Llama-3 8B on an 80 GB GPU.

# %% [markdown]
# ## The published prices

# %%
from inferlab.lab.chapters import _ch15_price
from inferlab.lab.chapters._display import md_table
from IPython.display import Markdown
Markdown(md_table(["model", "input, $ per 1M", "output, $ per 1M", "output / input", "source"],
                  [[p["model"], f"{p['input']:.2f}", f"{p['output']:.2f}",
                    f"{p['output'] / p['input']:.0f}x", p["source"]] for p in _ch15_price.PUBLISHED]))

# %% [markdown]
# ## fp32 or bf16: the same model in half precision
#
# Nobody serves in fp32: vLLM's CPU build and every GPU deployment run bf16 or fp16. Half
# precision halves the bytes of every weight and every cached key and value, and decode reads
# all of them at every step, so a memory-bound engine could gain up to 2x. Whether it does
# depends on what the CPU does with bf16 (the engine's plan names the path its GEMMs take
# here). Both engines answer the same chat prompts, interleaved on this machine's wall clock;
# the bytes are each engine's own tensors; the answers are greedy, so where they part, a
# rounding made the difference (at that token, each side's choice is normally among the
# other's five likeliest).

# %%
prec = ch.precision(smoke=SMOKE)
print(ch.precision_summary(prec))

# %%
show(ch.precision_figure(prec), height=420)

# %% [markdown]
# Left: decode tokens per second, one request and a batch, with the range of the repeats.
# Middle: bf16 holds the weights and the KV cache in half the bytes (so twice the tokens fit
# in the same cache). Right: how many tokens each greedy answer keeps alike in fp32 and bf16
# before they part (hollow bars), or all of it (filled, "all").

# %% [markdown]
# ### The check
# This cell fails if the effect went the other way (counts only: the wall-clock costs above
# are printed with their spread, never asserted).

# %%
cap = data["capacity"]
assert cap["long"]["max_running"] < cap["long"]["requests"]      # the long ones queue
assert cap["short"]["max_running"] == cap["short"]["requests"]   # the short ones all fit
mem = data["memory"]["parts_load"]
assert mem["weights"] + mem["KV cache"] > sum(mem.values()) / 2
print("a budget for two long requests runs two; weights and KV cache are most of the memory")

# %% [markdown]
# ## Claim vs measured here
#
# The verdict is computed from this run's numbers by the claim's judge in
# `inferlab.lab.claims`, the same one the report card (`inferlab claims`,
# `11_report_card`) uses: `holds`, `holds, smaller here`, `does not hold here` or
# `not measurable here`, with the reason in numbers.

# %%
from inferlab.lab import claims
claims.print_verdicts(15, data)
