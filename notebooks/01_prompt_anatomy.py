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
# The conversation is a support chat of 20 turns with fixed replies (so every run sends the
# same tokens). Each turn is sent to the engine twice: with **prefix caching** off (every
# token computed again) and on (the start of the prompt, already seen last turn, is reused).
# The token counts come from SmolLM2's real tokenizer and chat template; the 20-turn run
# prefills every turn on SmolLM2-135M-Instruct and prices each turn's TTFT on the simulated
# H100 clock, so the numbers are the same on every run. The first few turns also run on this
# machine's **wall clock** (SmolLM2 again), the two conversations in turn,
# repeated (uncached, cached, uncached, cached): TTFTs are medians with their range in
# brackets, with a warning if the machine was busy.
#
# Knobs: edit `ch.SYSTEM`, `ch.TOOLS`, `ch.MEMORY` or `ch.TURNS` and re-run; `ch.anatomy(tok, turn=5)`
# shows a later turn.

# %%
data = ch.measure(smoke=SMOKE)
print(ch.summary(data))

# %% [markdown]
# ## Every token, coloured by where it came from
#
# Hover a token to see its segment; the margin names each part of the prompt. `↵` marks a
# line break.

# %%
show(ch.tokens_figure(data["tokens"]))

# %%
fig = ch.figure(data)
show(fig)

# %% [markdown]
# Left: at turn 3 the message the user typed is a small slice of what the model reads; tool
# definitions alone are several times longer. Right: without a cache, each turn computes its
# whole prompt, and the prompt grows every turn, so the work of a conversation grows with the
# square of its length: over 20 turns the model computes about ten thousand prompt tokens to
# answer a few hundred typed ones. With the prefix cache, only the part not seen before (the
# last reply and the new message, plus the unfinished last block) is computed: a flat 30-60
# tokens a turn.
#
# ## The re-processing cost, turn by turn

# %%
rows_off, rows_on = data["runs"]["uncached · sim"], data["runs"]["cached · sim"]
total_off = total_on = 0
print(f"{'turn':>4} {'prompt':>7} {'computed, no cache':>19} {'computed, cached':>17} "
      f"{'cumulative, no cache':>21} {'cumulative, cached':>19}")
for off, on in zip(rows_off, rows_on):
    total_off += off["computed_tokens"]
    total_on += on["computed_tokens"]
    print(f"{off['turn']:4d} {off['prompt_tokens']:7d} {off['computed_tokens']:19d} "
          f"{on['computed_tokens']:17d} {total_off:21,d} {total_on:19,d}")

# %% [markdown]
# ## Later turns start later, on this machine
#
# The same conversation on this machine's wall clock with the real SmolLM2, at turns spread
# over the twenty (in smoke mode the first and the last): without a prefix cache each of those turns is
# sent on its own with the whole conversation so far in it; with the cache the conversation
# is replayed turn by turn from an empty cache, so each turn finds the earlier ones cached.
# The label on each point is the number of prompt tokens the turn computed; the bars are the
# range over the interleaved repeats.

# %%
show(ch.turns_figure(data))

# %% [markdown]
# Without the cache the wait before the first word grows with the conversation: twenty turns
# deep it is a pause of seconds on this CPU (an 8B model on a GPU is faster per token, but
# its prompts grow just the same). With the cache the first turn pays for the system prompt
# and tools once; every later turn computes only the last reply and the new question, and
# starts about as fast as the first.

# %% [markdown]
# ### The check
# This cell fails if the effect went the other way.

# %%
sim_off, sim_on = data["runs"]["uncached · sim"], data["runs"]["cached · sim"]
wall_off, wall_on = data["runs"]["uncached · wall"], data["runs"]["cached · wall"]
# without a cache every turn computes its whole prompt, which grows turn after turn
assert len(sim_off) == len(sim_on) == 20
assert all(r["computed_tokens"] == r["prompt_tokens"] for r in sim_off)
assert all(b["prompt_tokens"] > a["prompt_tokens"] for a, b in zip(sim_off, sim_off[1:]))
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
