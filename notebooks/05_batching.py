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
# # 5. Naive batching vs continuous batching
#
# A GPU is most efficient when many requests share each pass over the weights. **Naive
# (static) batching** starts a group together and lets nobody in until the whole group has
# finished, so the batch slowly empties while the longest answer finishes, and the queue waits.
# **Continuous batching** rebuilds the batch at every step: when one answer ends, a waiting
# request takes its seat at the next step.

# %%
import inferlab as il
from inferlab.lab.chapters import smoke, ch05_batching as ch
from inferlab.lab.chapters._display import show

SMOKE = smoke()   # INFERLAB_SMOKE=1 shrinks the workload (CI, quick look)
print(ch.TITLE, "| smoke mode" if SMOKE else "| full run")

# %% [markdown]
# The same real chat requests (the lab's bundled set: questions, instructions, conversations,
# tool calls, a dozen languages) run under `scheduler="static"` and `scheduler="continuous"`
# with the same batch limit, all on SmolLM2-135M-Instruct: first on this machine's **wall
# clock**, then with each step priced on the **simulated H100 clock** (8B model shape; the
# tokens, and where each answer stops, are still SmolLM2's). On the wall
# clock the two schedulers run in turn, repeated (static, continuous, static, continuous):
# the summary gives the median, the range in brackets, and a warning if the machine was busy.
#
# Knobs: `ch.engine_options`, `ch.workload`; or open the Lab in the tour and switch the
# scheduler.

# %%
data = ch.measure(smoke=SMOKE)
print(ch.summary(data))

# %% [markdown]
# ## How long the answers ran
#
# Nobody chose these lengths: each answer ends where SmolLM2 wrote its end-of-sequence token,
# or at the cap. Static batching waits for the longest answer of each group; the wider this
# spread, the more it pays.

# %%
print(ch.lengths_text(data))
show(ch.lengths_figure(data))

# %% [markdown]
# Averages hide what a typical user sees. The **median** is the wait of the request in the
# middle; the **p90** is the wait that 1 in 10 requests exceeds. Each scheduler keeps one
# colour everywhere in the lab (widget, figures): static in orange, continuous in purple.

# %%
from IPython.display import Markdown
Markdown(ch.latency_table(data))

# %% [markdown]
# ## Side by side, on this machine's wall clock
#
# The wall-clock ratio on a shared 2-core CPU is noisy: every step costs about the same here
# whatever the batch holds, so the fewer steps of continuous batching is what shows.

# %%
from inferlab.widgets import BatchingComparison
# each policy keeps its colour by name (palette.POLICY), as in the chapter figure
w = data["traces"]["wall"]
BatchingComparison(*[w[s] for s in ch.WIDGET_ORDER], labels=list(ch.WIDGET_ORDER),
                   title="Static vs continuous (wall clock, SmolLM2)")

# %%
fig = ch.figure(data)
show(fig)

# %% [markdown]
# Left: requests in the batch over time. Static batching drops towards one request before the
# next group may start; continuous batching stays full until the queue runs dry. Middle: the
# throughput, with the ratio. Right: median and p90 of the time to first token and of the time
# to the whole answer: continuous batching lowers both, the p90 most, because a request
# no longer waits for a whole group ahead of it to finish. The published figures (Anyscale,
# 2023: 8x from continuous batching alone, 23x with vLLM's paged KV memory as well) came from
# large batches of long, highly varied answers on a GPU; this small run shows the mechanism,
# not those numbers.

# %% [markdown]
# ### The check
# This cell fails if the effect went the other way.

# %%
sim = data["runs"]["sim"]
assert sim["ratio"] > 1.1, sim["ratio"]           # continuous beats static on the GPU clock
assert sim["continuous"]["e2e_median"] < sim["static"]["e2e_median"]  # simulated clock
assert sim["continuous"]["e2e_p90"] < sim["static"]["e2e_p90"]  # simulated clock
# on this CPU both schedulers pay the same per step; continuous needs fewer steps
steps = {s: len(tr.records) for s, tr in data["traces"]["wall"].items()}
assert steps["continuous"] < steps["static"], steps
print(f"continuous / static throughput: {sim['ratio']:.2f}x (simulated H100), "
      f"{data['runs']['wall']['ratio']:.2f}x (wall, this CPU); steps {steps}")

# %% [markdown]
# ## Claim vs measured here
#
# The verdict is computed from this run's numbers by the claim's judge in
# `inferlab.lab.claims`, the same one the report card (`inferlab claims`,
# `11_report_card`) uses: `holds`, `holds, smaller here`, `does not hold here` or
# `not measurable here`, with the reason in numbers.

# %%
from inferlab.lab import claims
claims.print_verdicts(5, data)
