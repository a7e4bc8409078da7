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
# The three policies are **three separate runs** of the same message, each with its own input
# check, answer and output checks, all computed by SmolLM2 in one engine (prefix caching off,
# so every run starts cold and pays the same). The classifier is SmolLM2-135M told to answer
# "yes" or "no"; on a small labelled set below it shows how good a judge a model this size is
# (not good: the claims here are about what a check *costs*, which is the same for a good
# classifier of the same size). Their times come from two clocks:
#
# * the **simulated H100 clock**: the tokens are computed here for real, each step is priced
#   as an 8B model on an H100 (deterministic: the same numbers on every run);
# * this machine's **wall clock**, the three runs in turn, repeated (streamed, chunked,
#   buffered, streamed ...): medians and ranges, with a warning if the machine was busy. The
#   claims are judged on this clock; the H100 figures are a projection beside them.
#
# Knobs: `ch.measure(smoke=SMOKE, user="...")` for another message; `ch._sizes(SMOKE)` shows the
# answer length and how often the chunked policy checks.

# %%
data = ch.measure(smoke=SMOKE)
print(ch.summary(data))
print(f"\nThe classifier on a labelled set: it {ch.flag_counts(data['verdicts'])} "
      f"(times on the {data['verdicts_clock']})")
for v in data["verdicts"]:
    print(f"  {'harmful ' if v['harmful'] else 'harmless'}  flagged={v['flagged']!s:5}  "
          f"{v['seconds'] * 1e3:6.1f} ms  {v['text']}")

# %%
fig = ch.figure(data)
show(fig)

# %% [markdown]
# Each line counts the answer tokens a reader can see over time (simulated H100). The shaded
# band is the input check: nothing can start before it ends. Streamed text appears token by
# token; chunked text in steps, one per check; buffered text all at once at the end. On a GPU
# a check of a short answer is a small prefill, about as cheap as one decode step, and it
# shares the batch with the answer still being written, so chunked checking costs little.
#
# The wall-clock line of the summary tells another story on this CPU: there each check is a
# prefill of the whole answer so far, which costs many decode steps (chapter 3: a step's cost
# grows with its tokens), and the answer waits for it in the same batch. Chunked checking can
# then show the first word later than it would on a GPU, and in a long answer its many checks
# can add up to more than buffering's single one.

# %% [markdown]
# ### The check
# This cell fails if a policy shows text it should hold back, or holds back what it should
# show (counts of events), or if the claim's own comparison fails on the simulated clock
# (priced by the cost model, the same on every run; the wall clock is judged, never asserted).

# %%
runs, fv = data["runs"], data["first_visible"]
assert set(runs) == {"streamed", "chunked", "buffered"}       # three runs of their own
for p, r in runs.items():
    assert len(r["visible"]) == len(r["made"]) == data["sizes"]["max_tokens"], p
    assert all(v >= m for v, m in zip(r["visible"], r["made"])), p   # never shown unmade
early = {p: sum(v < r["made"][-1] for v in r["visible"]) for p, r in runs.items()}
pieces = {p: len(set(r["visible"])) for p, r in runs.items()}
assert runs["streamed"]["num_checks"] == 0 and runs["buffered"]["num_checks"] == 1
assert early["streamed"] == len(runs["streamed"]["visible"]) - 1, early
assert early["buffered"] == 0, early                           # nothing before the whole answer
assert pieces["buffered"] == 1 and pieces["chunked"] > 1, pieces
assert fv["streamed"] < fv["chunked"] < fv["buffered"], fv  # simulated clock
print(f"tokens visible before the answer was complete: {early}; released in {pieces} pieces; "
      f"first visible word streamed < chunked < buffered on the simulated clock")

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
