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
# # 7. Prefix caching: shared system prompts and agent loops
#
# The model keeps no memory between calls. An agent that calls a tool sends, on every round,
# the tool definitions, the task, and everything said so far, plus the new tool result. So
# round 5 sends more than round 4. Without a cache, the engine computes all of it again each
# time. With **prefix caching**, the KV blocks of a prompt's beginning are kept and found by a
# hash of their tokens; a later prompt that starts the same way reuses them and computes only
# what is new. The same helps any set of requests that share a system prompt.

# %%
import inferlab as il
from inferlab.lab.chapters import smoke, ch07_prefix_caching as ch
from inferlab.lab.chapters._display import show

SMOKE = smoke()   # INFERLAB_SMOKE=1 shrinks the workload (CI, quick look)
print(ch.TITLE, "| smoke mode" if SMOKE else "| full run")

# %% [markdown]
# Three experiments on the engine:
# 1. agent loops (tool definitions, task, then one round per tool result), caching off and on;
# 2. requests sharing one long system prompt, one after another, caching off and on;
# 3. requests sharing that system prompt that **arrive together**, with the cache on: a block
#    is findable from the moment it is allocated to be filled in a step (as vLLM does), or, the
#    what-if, only after its step ran (`index_blocks_ahead=False`), when every request admitted
#    in the same step computes its own copy of the prompt.
#
# Token counts are exact, the model is SmolLM2-135M-Instruct; time is the **simulated H100
# clock** (8B model shape). Smoke mode runs a shorter loop. Try `ch._sizes(SMOKE)` to see the sizes, and pass your own engine
# options, e.g. `ch.measure(smoke=SMOKE, block_size=32)` (bigger blocks: coarser reuse).

# %%
data = ch.measure(smoke=SMOKE)
print(ch.summary(data))

# %%
for fig in ch.figures(data).values():
    show(fig)

# %% [markdown]
# First, the agent loop: every round re-sends the whole conversation (a bar's full height).
# Without the cache each round computes all of it; with it, only about the new tool result
# (prefill), the rest is served from the prefix cache. Then the shared system prompt:
# requests after the first find it already cached, and their time to first token drops.
# Last, requests that arrive together share it too, in the very step that computes it, but
# only because its blocks are indexed as they are allocated; indexed after the step, each
# request in that first step computes the whole prompt again.

# %% [markdown]
# ### The check
# This cell fails if the effect went the other way.

# %%
u, c = data["agent"]["uncached"], data["agent"]["cached"]
# every round after the first re-sends the previous one: it must cost less with the cache
for k in range(1, len(u["ttft"])):
    assert c["computed_tokens"][k] < u["computed_tokens"][k], k
    assert c["ttft"][k] < u["ttft"][k], k
su, sc = data["shared"]["uncached"], data["shared"]["cached"]
assert sum(sc["ttft"][1:]) < sum(su["ttft"][1:])
t = data["together"]
assert t["ahead"]["computed_tokens"] < t["after"]["computed_tokens"]
print("every cached round computes fewer tokens and starts sooner than the uncached one; "
      "requests arriving together share the prompt in the same step")

# %% [markdown]
# ## Claim vs measured here
#
# The verdict is computed from this run's numbers by the claim's judge in
# `inferlab.lab.claims`, the same one the report card (`inferlab claims`,
# `11_report_card`) uses: `holds`, `holds, smaller here`, `does not hold here` or
# `not measurable here`, with the reason in numbers.

# %%
from inferlab.lab import claims
claims.print_verdicts(7, data)
