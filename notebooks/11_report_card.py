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
# judged on its chapter's recorded full run (docs/results/chapters, written once by
# `inferlab record`: the numbers the chapters' notebooks, the figures and README show), and
# each says what it **rests on**:
#
# * **measured**: the real model (SmolLM2) on this machine: token, block and step counts, or
#   the wall clock in interleaved repeats (A B A B) with a busy-machine check;
# * **projection**: the cost model pricing a GPU (what an H100 would do): shown with its
#   numbers, never judged;
# * **illustration**: it follows from how the lab built the example: shown, never judged.
#
# Only measured claims get a verdict, computed from the numbers, never typed:
#
# * **holds**: the effect is there, as large as published (or the claim names no size);
# * **holds, smaller here**: the effect is there but smaller than published, and the reason
#   says by how much and why;
# * **does not hold here**: no effect, or the reverse;
# * **not measurable here**: this machine cannot measure it (say, several GPUs).
#
# The same table comes out of `inferlab claims` (`--measure` measures every chapter again,
# `--smoke` the small workloads). In smoke mode this notebook is a quick look that measures
# the claims of four chapters, one of each kind among them, at smoke sizes and says so; a
# full run reads every chapter's record and measures nothing.

# %%
from inferlab.lab import claims, records, report
from inferlab.lab.chapters import smoke
from inferlab.lab.chapters._display import show

SMOKE = smoke()   # INFERLAB_SMOKE=1 shrinks every workload (CI, quick look)
ONLY = ("ch01", "ch02", "ch04", "ch10") if SMOKE else None    # smoke: four chapters' claims
print("smoke mode: measured now, small sizes" if SMOKE else "the recorded full runs", "|",
      len(claims.CLAIMS), "claims from",
      len({c.chapter for c in claims.CLAIMS}), "chapters",
      f"| measured here: the claims of {', '.join(ONLY)}" if ONLY else "")

# %%
results = claims.run_all(smoke=SMOKE, only=ONLY, progress=print, recorded=not SMOKE)

# %% [markdown]
# ## The table
#
# Claim, what it rests on, the headline number, the verdict, and beneath it the reason in
# numbers (with the clock the numbers come from). The last lines count each kind.

# %%
print(report.text_table(results))

# %% [markdown]
# ## One figure per claim
#
# First the tally, which is also the key: each standing's colour, as every claim's figure
# uses it. Then the numbers behind each verdict: measured values are bars in the verdict's
# colour (named in the legend and marked before the title), or in a policy's colour where
# static, continuous and chunked batching are compared; a published value is a black
# diamond, a published range a black bar with caps, never a bar beside the measurements;
# a dashed line is a reference (an ideal, a machine's ceiling); parts that add up to a whole
# are stacked, the whole in black. Ratios spanning decades are drawn on a log axis. Each
# chapter's notebook shows the full measurement.

# %%
fig = report.summary_figure(results)
show(fig, width=fig.layout.width, height=fig.layout.height)

# %%
for claim, data, verdict in results:
    print(f"{claim.id}: {claim.text}\n  source: {claim.source}")
    fig = report.figure(claim, verdict)
    show(fig, width=fig.layout.width, height=fig.layout.height)

# %% [markdown]
# ### The check
# This cell fails if a measured claim's verdict is not one of the four, if a projection or an
# illustration got a verdict, or if a reason states no number.

# %%
from inferlab.lab.verdicts import MEASURED, VERDICTS
assert len(results) == (len(claims.CLAIMS) if ONLY is None else
                        sum(len(claims.for_chapter(ch)) for ch in ONLY))
for claim, _, verdict in results:
    assert (verdict.verdict in VERDICTS) == (claim.kind == MEASURED), (claim.id, verdict.verdict)
    assert any(ch.isdigit() for ch in verdict.reason), (claim.id, verdict.reason)
print("rests on:", report.kind_counts(results))
print({v: n for v, n in report.counts(results).items()})

# %% [markdown]
# A full run also writes the result file that README's report card is rendered from
# (`inferlab results render`): the records' verdicts, with the command, date, CPU and load.

# %%
if not SMOKE:
    import pathlib
    root = pathlib.Path.cwd().parent if pathlib.Path.cwd().name == "notebooks" else pathlib.Path.cwd()
    if (root / "docs" / "results").is_dir():
        report.write_result_file(results, root / "docs" / "results" / "claims.json",
                                 "inferlab claims (from docs/results/chapters)", SMOKE,
                                 meta=records.meta_of_all("inferlab claims (the records)"))
        print("wrote docs/results/claims.json")
