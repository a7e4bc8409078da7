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
# # 8. Safety classifiers and streaming
#
# Many services check the user's message before answering, and the answer before showing it.
# Each check is another model call. Here both checks are **real calls to SmolLM2**, prompted to
# answer "yes" or "no" to "is this harmful?", in the same engine as the answer:
#
# * the **input check** runs before the answer starts, so its full time is added to the time
#   to first token;
# * the **output check** decides when text may be shown. *Streamed*: shown as generated (no
#   output check). *Chunked*: checked every few tokens, the check running in the same batch as
#   the rest of the answer. *Buffered*: nothing shown until the whole answer is checked.
#
# A 135M model is a poor judge of harm; what we measure is the *cost* of the stages.

# %%
import inferlab as il
from inferlab.lab.chapters import smoke, ch08_safety_streaming as ch
from inferlab.lab.chapters._display import show

SMOKE = smoke()   # INFERLAB_SMOKE=1 shrinks the workload (CI, quick look)
print(ch.TITLE, "| smoke mode" if SMOKE else "| full run")

# %% [markdown]
# Times are this machine's **wall clock** (shared CPU: expect noise between runs). The two
# output-check policies run in turn, repeated (chunked, buffered, chunked, buffered): the
# summary gives medians and ranges, and a warning if the machine was too busy to trust them.
# Knobs: `ch.measure(smoke=SMOKE, user="...")` for another message; `ch._sizes(SMOKE)` shows the
# answer length and how often the chunked policy checks.

# %%
data = ch.measure(smoke=SMOKE)
print(ch.summary(data))
for v in data["verdicts"]:
    print(f"  flagged={v['flagged']!s:5}  {v['seconds'] * 1e3:6.0f} ms  {v['text']}")

# %%
fig = ch.figure(data)
show(fig)   # fig.show() for the interactive version

# %% [markdown]
# Each line counts the answer tokens a reader can see over time. The shaded band is the input
# check: nothing can start before it ends. Buffered output appears all at once at the end;
# chunked output arrives in steps, one per check.
#
# On a CPU, each check is a prefill of the whole answer so far, which costs far more than a
# decode step, and it shares the batch with the answer, which waits for it. So here chunked
# checking may not beat buffering at all; on a GPU, where a short prefill costs about as much
# as a decode step, each check is cheap. Compare the claim below with what you measured.

# %% [markdown]
# ### The check
# This cell fails if a policy shows text it should hold back, or holds back what it should
# show (counts of events, not times: a busy machine cannot make it fail).

# %%
# Counts of events in one run, not durations: how many answer tokens became visible before
# the answer was complete, and in how many pieces the text was released.
runs = data["runs"]
done = runs["buffered"]["made"][-1]            # the moment the last answer token was made
early = {p: sum(t < done for t in runs[p]["visible"]) for p in ("streamed", "buffered")}
pieces = {p: len(set(runs[p]["visible"])) for p in ("chunked", "buffered")}
assert early["streamed"] == len(runs["streamed"]["visible"]) - 1, early
assert early["buffered"] == 0, early           # nothing shown before the whole answer
assert pieces["buffered"] == 1 and pieces["chunked"] > 1, pieces
print(f"tokens visible before the answer was complete: {early}; released in {pieces} pieces")

# %% [markdown]
# ## Claim vs measured here
#
# The verdict is computed from this run's numbers by the claim's judge in
# `inferlab.lab.claims`, the same one the report card (`inferlab claims`,
# `11_report_card`) uses: `holds`, `holds, smaller here`, `does not hold here` or
# `not measurable here`, with the reason in numbers.

# %%
from inferlab.lab import claims
claims.print_verdicts(8, data)
