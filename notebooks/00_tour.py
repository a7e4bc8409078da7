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
# # inferlab: a tour in three minutes
#
# This notebook runs a real language model (SmolLM2-135M-Instruct, real weights, in this
# kernel) through inferlab's own serving engine, and shows what happens between pressing
# Enter and the first word. Run the cells top to bottom; each section points to the chapter
# that goes deeper. Everything you see is measured here, not animated.
#
# **On a slow machine** (Binder's CPU, say), set `REPLAY = True` below, or start Jupyter with
# `INFERLAB_REPLAY=1`: the tour then replays a run recorded with this notebook on another
# machine into the same views, with no model loaded, and says where and when it was recorded.

# %%
import inferlab as il
from inferlab.lab.chapters import smoke
from inferlab.lab.replay_tour import tour
from inferlab.widgets import TokenStream, SchedulerTimeline, KVBlockMap
from transformers.utils import logging as hf_logging
hf_logging.disable_progress_bar()   # no loading bars in the saved notebook
SMOKE = smoke()
REPLAY = None    # True: replay the recorded run (no model); None: as $INFERLAB_REPLAY says
# live: il.Engine(num_blocks=128) (the first start converts the weights once, then maps them)
# and the widgets' BatchingComparison and Lab; replaying: the same, fed by the recorded run
eng, BatchingComparison, Lab = tour(REPLAY, num_blocks=128)
eng

# %% [markdown]
# ## 1. What the model reads (chapter 1)
#
# Your message is wrapped in the chat template; a real app adds a system prompt, tools, memory
# and the conversation so far. The model reads every one of these tokens, on every turn.

# %%
msgs = [{"role": "system", "content": "You are a concise assistant."},
        {"role": "user", "content": "Name three rivers in Europe."}]
text = eng.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
ids = eng.tokenizer.encode(text, add_special_tokens=False)
print(text)
print(len(ids), "tokens:", " | ".join(eng.tokenizer.decode([i]) for i in ids))

# %% [markdown]
# ## 2. Streaming: tokens one at a time (chapter 3)
#
# The view below fills in live as tokens arrive. The gap before the first token is the
# prefill; after it, one token per step.

# %%
stream = TokenStream(eng)       # attach before the run: it follows the engine live
outs = eng.generate([msgs], il.SamplingParams(max_tokens=12 if SMOKE else 48), use_tqdm=False)
stream.detach()
m = outs[0].metrics
print(outs[0].text)
print(f"TTFT {m.ttft * 1e3:.0f} ms, then {m.tpot * 1e3:.0f} ms per token")
stream

# %% [markdown]
# ## 3. Many requests share each step (chapter 5)
#
# Several prompts run together; the timeline shows each request's queueing, prefill and decode,
# and how many tokens each step carried.

# %%
timeline = SchedulerTimeline(eng)
kv = KVBlockMap(eng)
prompts = ["Write a haiku about rain.", "What is 17 times 3?", "Translate 'good morning' to Spanish.",
           "List two uses of copper.", "Why is the sky blue?", "Define a prime number."]
outs = eng.generate(prompts, il.SamplingParams(max_tokens=8 if SMOKE else 32), use_tqdm=False)
timeline.detach(); kv.detach()
timeline

# %% [markdown]
# ## 4. The KV cache in blocks (chapter 4)
#
# Each square is a block of 16 token slots. Requests get blocks as they grow; finished
# requests' blocks stay cached for reuse until someone needs the room.

# %%
# show the step where the most blocks were in use (the scrubber moves through the run)
recs = kv.trace.records
kv.cursor = max(range(len(recs)), key=lambda k: recs[k].kv_blocks_used)
kv

# %% [markdown]
# ## 5. Static vs continuous batching (chapter 5)
#
# Real chat requests (bundled with the lab: questions, instructions, conversations, a tool
# call, a dozen languages), answered by the same SmolLM2 until it stops on its own, under both
# schedulers. The tokens, their number and where each answer stops are the real model's;
# the time axis is a simulated H100 pricing each step as if an 8B model ran on the GPU (so
# the picture does not move with this CPU's noise), and says so.

# %%
from inferlab.sim.chat_requests import chat_requests
work = chat_requests(eng.tokenizer, 8 if SMOKE else 16, max_tokens=32 if SMOKE else 96)
cmp = BatchingComparison.run(work, ("static", dict(scheduler="static")),
                             ("continuous", dict(scheduler="continuous")),
                             model=None, max_num_seqs=4, num_blocks=64 if SMOKE else 256,
                             clock="H100", sim_model="llama-3-8b")
cmp

# %% [markdown]
# ## 6. Your turn: the Lab
#
# Pick the scheduler, KV layout, block size, batch limits and a workload, then press **Run**.
# It runs SmolLM2 on real chat requests, in the background, so the notebook stays usable.
# Every run adds a row to the table under the controls (throughput, TTFT and inter-token
# latency p50/p99, peak KV use and waste, preemptions, recomputed tokens, and the knobs that
# differ); pick two runs and **Compare** puts them side by side. The chapters 01-15 each take
# claims about inference from the articles and test them on this engine (`11_report_card`
# judges them all; `12_on_vllm` watches vLLM itself); chapter 15 (`15_memory_and_price`)
# prices a prompt token against a generated one, counts how many long requests a KV budget
# runs at once, and shows where the memory goes.

# %%
lab = Lab(num_requests=6 if SMOKE else 12, max_tokens=32 if SMOKE else 64)
lab

# %% [markdown]
# ### A what-if: block size 16 → 64
#
# The same requests twice, changing one knob (and the number of blocks with it, so the KV
# memory stays the same). Bigger blocks mean fewer block-table entries and bigger kernel
# tiles, but every request's last block is on average half empty, and a prefix is shared only
# in whole blocks: watch peak KV waste and the prefix-cache hits.

# %%
lab.start().join()                             # run 1: block size 16
bigger = 32 if SMOKE else 64
lab.controls["block_size"].value = bigger
lab.controls["num_blocks"].value = 128 * 16 // bigger   # the same KV memory, in bigger blocks
lab.start().join()                             # run 2: the bigger blocks
lab.compare(1, 2)
lab.refresh_display()                          # the Lab's saved picture now shows run 2
lab.runs.to_csv()                              # or lab.runs.to_frame() with pandas
