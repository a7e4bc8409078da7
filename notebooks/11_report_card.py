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
# # 11. Report card: every claim, measured and judged
#
# Each chapter tests a claim from the articles this lab grew from. Here every claim is
# measured again, with its chapter's own measurement (deterministic wherever the claim
# allows: token counts, slot counts and the simulated H100 clock; the kernel race of chapter 9
# can only be timed on this machine's wall clock, in interleaved repeats with a busy-machine
# check), and judged. The verdict is computed from the numbers, never typed:
#
# * **holds**: the effect is there, as large as published (or the claim names no size);
# * **holds, smaller here**: the effect is there but smaller than published, and the reason
#   says by how much and why;
# * **does not hold here**: no effect, or the reverse;
# * **not measurable here**: this machine cannot measure it (say, several GPUs).
#
# The same table comes out of `inferlab claims` (`--smoke` for the small workloads).

# %%
from inferlab.lab import claims, report
from inferlab.lab.chapters import smoke
from inferlab.lab.chapters._display import show

SMOKE = smoke()   # INFERLAB_SMOKE=1 shrinks every workload (CI, quick look)
print("smoke mode" if SMOKE else "full run", "|", len(claims.CLAIMS), "claims from",
      len({c.chapter for c in claims.CLAIMS}), "chapters")

# %%
results = claims.run_all(smoke=SMOKE, progress=print)

# %% [markdown]
# ## The table
#
# Claim, the headline number measured here, the verdict, and beneath it the reason in numbers
# (with the clock the numbers come from).

# %%
print(report.text_table(results))

# %% [markdown]
# ## One figure per claim
#
# The numbers behind each verdict; the bar colour is the verdict (green: holds, orange: holds,
# smaller here, vermillion: does not hold here, grey: not measurable here). Each chapter's
# notebook shows the full measurement.

# %%
for claim, data, verdict in results:
    print(f"{claim.id}: {claim.text}\n  source: {claim.source}")
    fig = report.figure(claim, verdict)
    show(fig, width=fig.layout.width, height=fig.layout.height)

# %% [markdown]
# ### The check
# This cell fails if a verdict is not one of the four, or if a reason states no number.

# %%
from inferlab.lab.verdicts import VERDICTS
assert len(results) == len(claims.CLAIMS)
for claim, _, verdict in results:
    assert verdict.verdict in VERDICTS, (claim.id, verdict.verdict)
    assert any(ch.isdigit() for ch in verdict.reason), (claim.id, verdict.reason)
print({v: n for v, n in report.counts(results).items()})
