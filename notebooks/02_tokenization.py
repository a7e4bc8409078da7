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
# # 2. Tokenization: the same message, different bills
#
# Models read tokens, not letters or words. A tokenizer is learned from training text, and
# SmolLM2's training text is mostly English: common English words are single tokens, while
# other scripts fall apart into many small pieces. The same message can cost several times as
# many tokens, and each token costs prefill time and KV cache memory.

# %%
import inferlab as il
from inferlab.lab.chapters import smoke, ch02_tokenization as ch
from inferlab.lab.chapters._display import show

SMOKE = smoke()   # INFERLAB_SMOKE=1 shrinks the workload (CI, quick look)
print(ch.TITLE, "| smoke mode" if SMOKE else "| full run")

# %% [markdown]
# One short message in several languages (translated by hand, meaning kept). We count its
# tokens with SmolLM2's real tokenizer, then prefill a document of several copies of it and
# read the time from the **simulated H100 clock** (8B model shape) and, in a full run, from this
# machine's wall clock with the real model. KV bytes are tokens x bytes per token.
#
# Knobs: add your own language to `ch.TEXTS`; `ch.pieces(tok, text)` shows the cut.

# %%
data = ch.measure(smoke=SMOKE)
print(ch.summary(data))

# %% [markdown]
# ## How the tokenizer cuts one message

# %%
tok = ch._kit.tokenizer()
for lang in ("English", "French", "Hindi", "Chinese"):
    print(f"{lang:8}", " | ".join(ch.pieces(tok, ch.TEXTS[lang])[:18]), "...")

# %%
fig = ch.figure(data)
show(fig)

# %% [markdown]
# The languages are sorted by tokens. The labels give the cost relative to English. Prefill
# time follows the token count once the document is long enough to keep the GPU busy (below a
# couple of hundred tokens, reading the weights dominates and every language costs the same).
# KV memory follows the tokens exactly.

# %% [markdown]
# ### The check
# This cell fails if the effect went the other way.

# %%
rows = {r["language"]: r for r in data["rows"]}
en = rows["English"]
for lang in ("Russian", "Hindi", "Thai"):
    assert rows[lang]["tokens"] > 2 * en["tokens"], lang
    assert rows[lang]["prefill_sim"] > en["prefill_sim"], lang
    assert rows[lang]["kv_bytes_8b"] > 2 * en["kv_bytes_8b"], lang
print("non-Latin scripts cost more than twice the tokens, more prefill time and KV memory")

# %% [markdown]
# ## Claim vs measured here
#
# The verdict is computed from this run's numbers by the claim's judge in
# `inferlab.lab.claims`, the same one the report card (`inferlab claims`,
# `11_report_card`) uses: `holds`, `holds, smaller here`, `does not hold here` or
# `not measurable here`, with the reason in numbers.

# %%
from inferlab.lab import claims
claims.print_verdicts(2, data)
