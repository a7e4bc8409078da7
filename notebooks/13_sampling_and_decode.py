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
# # 13. From logits to words, and what each word costs
#
# Ask the same question twice and a chatbot may answer differently. The reason is in the last
# step of every forward pass: the model gives a **probability to every token** of its
# vocabulary, and a **sampler** draws the next token from that distribution. Temperature
# sharpens or flattens it, top-p cuts off the unlikely tail, and a seed makes the draw
# repeatable. Then each token drawn costs one more **decode step**, the **KV cache** keeps
# those steps cheap at a price in memory, and the user sees the first word only after the
# **network** has carried the request in and the token out.

# %%
import inferlab as il
from inferlab.lab.chapters import smoke, ch13_sampling_decode as ch
from inferlab.lab.chapters._display import show

SMOKE = smoke()   # INFERLAB_SMOKE=1 shrinks the workload (CI, quick look)
print(ch.TITLE, "| smoke mode" if SMOKE else "| full run")

# %% [markdown]
# What runs:
#
# * **sampling**, on the real SmolLM2: its scores (logits) for the token after a short chat
#   prompt, turned into probabilities at three temperatures by the engine's own sampler
#   filter; then the engine draws that one token many times with different seeds, and
#   writes short answers with several seeds, one seed twice, and greedy twice;
# * **nearly identical prompts**, on the real SmolLM2: pairs of prompts that differ by a word
#   or a space, each answered greedily and with seeds, to see whether and where the answers
#   part;
# * **answer length, the KV cache and the network**, on SmolLM2 with each step priced on the
#   simulated H100 clock (an 8B model's shape):
#   counts and prices that are the same on every run;
# * answer length also on this machine's **wall clock** (SmolLM2 again),
#   lengths interleaved and repeated, medians and ranges, with a warning if the machine was
#   busy.
#
# Knobs: `ch.PROMPT`, `ch.TEMPERATURES`, `ch.TOP_P`, `ch.sizes(SMOKE)`; your own pairs of
# prompts: `ch.measure(smoke=SMOKE, near_pairs=[("what changes", "original", "variant")])`.

# %%
data = ch.measure(smoke=SMOKE)
print(ch.summary(data))

# %% [markdown]
# ## One prompt, several answers
#
# The same prompt, written out with different seeds (temperature 0.8, top-p 0.95), the first
# seed a second time, and greedy decoding (always the most likely token) twice. All of them
# ran in one batch: a seeded request draws the same tokens whatever shares its batch.

# %%
from IPython.display import Markdown
Markdown(ch.answers_table(data))

# %% [markdown]
# ## Nearly identical prompts, different answers
#
# Two prompts that differ by a word or a space (`ch.NEAR_PAIRS`: a synonym, a double space, a
# trailing space, "colour" and "color", ...) are two different token sequences, so the model
# computes two different next-token distributions. Each pair is answered greedily and with
# the same seeds for both prompts; the table shows the greedy answers and after how many
# common output tokens they part (token counts: the same on every run).

# %%
Markdown(ch.near_table(data))

# %%
show(ch.near_figure(data))

# %% [markdown]
# Left: greedy decoding takes the most likely token, so the answers stay the same for as long
# as the small change leaves the top token on top; once one token differs, every later step
# reads a different sequence and the answers go their own ways (a grey bar: the same for the
# whole answer). Right: with sampling the same seed draws the same random numbers for both
# prompts, yet a slightly shifted distribution is enough to pick another token, so far more
# of the sampled answers differ.

# %%
for key, fig in ch.figures(data).items():
    if key != "near":                       # shown above
        show(fig)

# %% [markdown]
# First: the model's likeliest first tokens. At temperature 0.5 the top token takes most of
# the probability and top-p 0.9 keeps only a handful of tokens; at 1.5 the distribution is
# flat enough that top-p must keep thousands; the diamonds are how often the engine's seeded
# draws picked each token at temperature 1.0. Then: an answer of *n* tokens takes *n* engine
# steps (the first comes out of the prefill step), so the time to the whole answer grows in
# step with its length. Then: to write the answer without a KV cache, every step must push
# the whole sequence so far through the model again; with the cache, each token goes through
# once, at the memory per token beside it. Last: the time to first token as the user sees
# it, when the request and the first token each cross a network; dotted lines open a new
# connection first (TCP and TLS handshakes, two more round trips). The round trips are
# simulated delays added to the TTFT the engine measured, not a measured network.
#
# ## What the KV cache costs
#
# The cache holds, for every token, a key and a value vector in every layer:
# 2 x layers x kv heads x head size numbers. In bf16 (2 bytes each):

# %%
for r in data["kv"]["memory"]:
    fits = f"{r['tokens_on_80gb']:>9,} tokens fit beside the weights on an 80 GB GPU" \
        if r["tokens_on_80gb"] else "the weights alone exceed one 80 GB GPU"
    print(f"{r['model']:14} {r['kv_bytes_per_token'] / 1024:6.0f} KiB per token, "
          f"{r['per_4k_mb']:6.0f} MiB per 4,096-token conversation; weights "
          f"{r['weights_gb']:6.1f} GB; {fits}")

# %% [markdown]
# ### The check
# This cell fails if a count goes the wrong way: seeded sampling must differ between seeds
# and repeat for the same seed, some nearly identical prompts must get different answers,
# each answer token must cost one engine step, and the cache must save recomputation
# without changing the answer (counts; no wall-clock time is asserted).

# %%
a, dec, kv = data["answers"], data["decode"], data["kv"]["saving"]
assert a["distinct"] >= 2 and a["repeatable"] and a["greedy_same"], a
nuc = data["distribution"]["nucleus"]
assert nuc[0.5] <= nuc[1.0] <= nuc[1.5], nuc           # hotter: a wider nucleus
near = data["near"]["rows"]
assert any(f is not None for r in near for f in (r["greedy_first"], *r["sampled_first"])), \
    near                                               # some near prompts part
assert all(r["steps"] == r["max_tokens"] for r in dec), dec
assert kv["with"]["tokens"] == kv["formula_with"] and kv["without"]["tokens"] == kv["formula_without"]
assert kv["same_tokens"] == kv["answer"], kv
print(f"{a['distinct']} different answers from {a['seeds']} seeds; one step per token; "
      f"{kv['without']['tokens'] / kv['with']['tokens']:.1f}x the tokens without the KV cache, "
      "same answer")

# %% [markdown]
# ## Claim vs measured here
#
# The verdict is computed from this run's numbers by the claim's judge in
# `inferlab.lab.claims`, the same one the report card (`inferlab claims`,
# `11_report_card`) uses: `holds`, `holds, smaller here`, `does not hold here` or
# `not measurable here`, with the reason in numbers.

# %%
from inferlab.lab import claims
claims.print_verdicts(13, data)
