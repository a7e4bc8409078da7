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
# # 1. What the model actually reads
#
# You type one short question. The model reads much more: the application puts a **system
# prompt** in front (who the assistant is, its rules), the **tool definitions** it may call, some
# **memory** about you, and the **whole conversation so far**. Then the model's **chat template**
# wraps every message in markers, and the result is cut into tokens.
#
# The model also remembers nothing between calls. To answer your third message it must read
# your first two messages, and its own two replies, again. This chapter shows both, on
# SmolLM2's real tokenizer and chat template.

# %%
import inferlab as il
from inferlab.lab.chapters import smoke, ch01_prompt_anatomy as ch
from inferlab.lab.chapters._display import show

SMOKE = smoke()   # INFERLAB_SMOKE=1 shrinks the workload (CI, quick look)
print(ch.TITLE, "| smoke mode" if SMOKE else "| full run")

# %% [markdown]
# The conversation is a short support chat with fixed replies (so every run sends the same
# tokens). Each turn is sent to the engine twice: with **prefix caching** off (every token
# computed again) and on (the start of the prompt, already seen last turn, is reused). On the
# wall clock the two conversations run in turn, repeated (uncached, cached, uncached, cached):
# TTFTs are medians with their range in brackets, with a warning if the machine was busy.
#
# Knobs: edit `ch.SYSTEM`, `ch.TOOLS`, `ch.MEMORY` or `ch.TURNS` and re-run; `ch.anatomy(tok, turn=5)`
# shows a later turn.

# %%
data = ch.measure(smoke=SMOKE)
print(ch.summary(data))

# %% [markdown]
# ## Every token, coloured by where it came from
#
# Hover a token to see its segment. `↵` marks a line break.

# %%
from IPython.display import HTML
HTML(ch.html_tokens(data["tokens"]))

# %%
fig = ch.figure(data)
show(fig)   # fig.show() for the interactive version

# %% [markdown]
# Left: at turn 3 the message the user typed is a small slice of what the model reads; tool
# definitions alone are several times longer. Right: without a cache, each turn computes its
# whole prompt, and the prompt grows every turn. With the prefix cache, only the part not seen
# before (the last reply and the new message, plus the unfinished last block) is computed.

# %% [markdown]
# ### The check
# This cell fails if the effect went the other way.

# %%
sim_off, sim_on = data["runs"]["uncached · sim"], data["runs"]["cached · sim"]
wall_off, wall_on = data["runs"]["uncached · wall"], data["runs"]["cached · wall"]
# without a cache every turn computes its whole prompt, which grows turn after turn
assert all(r["computed_tokens"] == r["prompt_tokens"] for r in sim_off)
assert [r["prompt_tokens"] for r in sim_off] == sorted(r["prompt_tokens"] for r in sim_off)
# with the cache, turns after the first compute far fewer tokens, and start sooner
for off, on in zip(sim_off[1:], sim_on[1:]):
    assert on["computed_tokens"] < off["computed_tokens"] / 2
# the same counts on the wall-clock runs (their times are printed, never asserted: a busy
# machine moves them; see the spread and any warning in the summary above)
for off, on in zip(wall_off[1:], wall_on[1:]):
    assert on["computed_tokens"] < off["computed_tokens"] / 2
print("later turns: cached prompts compute less than half of what uncached ones compute")

# %% [markdown]
# ## Claim vs measured here
#
# The verdict is computed from this run's numbers by the claim's judge in
# `inferlab.lab.claims`, the same one the report card (`inferlab claims`,
# `11_report_card`) uses: `holds`, `holds, smaller here`, `does not hold here` or
# `not measurable here`, with the reason in numbers.

# %%
from inferlab.lab import claims
claims.print_verdicts(1, data)
