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
# # 12. The same views on vLLM
#
# Everything so far ran on this lab's own small engine. The engine people deploy when one
# machine is not enough is **vLLM**, and this lab's mechanisms are modelled on it. Here the
# same small workload runs on both: our engine in this kernel, and a real vLLM server (its CPU
# build, from its own virtual environment; this kernel never imports vLLM). The lab's views
# watch vLLM through what vLLM itself publishes:
#
# * its **KV cache events** (blocks stored and evicted, named by a hash of their tokens) over
#   ZeroMQ;
# * a **report per engine step** (batch, queue, KV usage, prefix-cache lookups), sent by a
#   small stat-logger plugin that inferlab installs into vLLM's environment;
# * every **token's arrival** on vLLM's OpenAI-compatible streaming API.
#
# The connector turns them into the same step records our engine publishes, so the timeline,
# the token stream and a trace work unchanged.

# %%
import os
import tempfile

import inferlab as il
from inferlab.connect.front.machine import VllmServerError, vllm_python
from inferlab.lab.chapters import smoke
from inferlab.observe.trace import Trace
from inferlab.widgets import BatchingComparison, SchedulerTimeline, TokenStream
from inferlab.widgets.vllm_kv import VllmPrefixCache

SMOKE = smoke()   # INFERLAB_SMOKE=1 shrinks the workload (CI, quick look)
NEW_TOKENS = 12 if SMOKE else 32
try:
    print("vLLM's venv:", os.path.relpath(vllm_python()))
    HAVE_VLLM = True
except VllmServerError as e:
    print(e)       # the chapter needs `make vllm`; without it, only our engine runs below
    HAVE_VLLM = False
print("smoke mode" if SMOKE else "full run", "|", NEW_TOKENS, "new tokens per request")

# %% [markdown]
# ## The workload
#
# Four questions behind one shared instruction (a system prompt, in effect). The first goes
# alone; the other three go together once it has finished, so their shared beginning is
# already in the prefix cache. Both engines get the **same token ids**, greedy decoding in
# float32, `ignore_eos`, and blocks of 32 tokens.

# %%
SHARED = ("You are a careful assistant in a lab about serving language models. The lab shows "
          "how an inference engine keeps the keys and values of every prompt in a paged cache, "
          "how blocks of a shared beginning are found again by their hash, and how a scheduler "
          "batches many requests step by step. Answer in one short sentence. The user asks: ")
QUESTIONS = [
    "What is the capital of France, which river runs through it, and why did the city grow "
    "where it did?",
    "Why does the moon show phases, and how long does a full cycle take from one new moon to "
    "the next?",
    "How is green tea made differently from black tea, and which of the two usually holds "
    "more caffeine per cup?",
    "Why is the sky blue during the day but red and orange at sunset, in words a child would "
    "follow?",
]
eng = il.Engine(block_size=32, enable_prefix_caching=True)
prompts = [eng.tokenizer.encode(SHARED + q) for q in QUESTIONS]
params = il.SamplingParams(max_tokens=NEW_TOKENS, ignore_eos=True)
print([len(p) for p in prompts], "prompt tokens;", eng)

# %% [markdown]
# ## On our engine

# %%
eng.generate([prompts[0][:8]], il.SamplingParams(max_tokens=2), use_tqdm=False)  # warm-up
eng.reset_prefix_cache()
ours = Trace.record(eng)
outs = eng.generate(prompts[:1], params, use_tqdm=False)
outs += eng.generate(prompts[1:], params, use_tqdm=False)
ours.stop()
print(ours)

# %% [markdown]
# ## On vLLM
#
# `VllmServer` is what `inferlab vllm serve` runs: vLLM's OpenAI server from `.venv-vllm` on
# 127.0.0.1, fp32, eager, prefix caching on, blocks of 32, its KV events and inferlab's step
# reports on private `ipc://` sockets, both CPU cores bound. Starting it takes a while on two
# cores: vLLM loads the model, compiles and warms up before it answers.
# The views below are attached to the connector **before** the requests go out: in JupyterLab
# they update while vLLM works (at most 20 times a second).

# %%
if HAVE_VLLM:
    from inferlab.bench.vllm import model_dir_for_vllm
    from inferlab.connect import VllmServer
    scratch = tempfile.mkdtemp(prefix="inferlab-nb12-")
    srv = VllmServer(model_dir_for_vllm(eng.loaded, scratch), port=None, max_model_len=1024,
                     model_name="SmolLM2-135M-Instruct")
    srv.start()
    conn = srv.connector().connect(timeout=30)
    theirs = conn.record()
    live = [SchedulerTimeline(conn, title="vLLM, live"), VllmPrefixCache(conn)]
    print(srv, "|", conn)

# %%
if HAVE_VLLM:
    from IPython.display import display
    for v in live:
        display(v)
    results = conn.generate(prompts[:1], NEW_TOKENS, ignore_eos=True)
    results += conn.generate(prompts[1:], NEW_TOKENS, ignore_eos=True)
    conn.wait(settle=1.0)
    theirs.stop()
    for v in live:
        v.detach()
    print(theirs, "| warnings:", conn.warnings or "none")

# %% [markdown]
# ## Tokens compared
#
# Same weights, same token ids, greedy, float32: the tokens should be the same, one by one.

# %%
if HAVE_VLLM:
    for i, (o, r) in enumerate(zip(outs, results)):
        same = list(o.token_ids) == r.token_ids
        print(f"request {i}: {'identical' if same else 'DIFFERENT'} | ours: "
              f"{o.text[:60]!r} | vLLM: {r.text[:60]!r}")
    assert all(list(o.token_ids) == r.token_ids for o, r in zip(outs, results))

# %% [markdown]
# ## Timelines side by side
#
# One lane per request (queued, prefill, decode), both on this machine's wall clock. vLLM's
# steps come from its own reports; its tokens are timed as they arrive over HTTP, so its
# lanes include the trip through the API server. Our engine admits the three followers in one
# step; vLLM takes them as their HTTP requests arrive (here usually in one step as well).
#
# This is one small run of each, to look at, not a benchmark: the two engines share two CPU
# cores, and vLLM's times include HTTP. `inferlab bench vllm` measures their speed properly
# (each in its own process, alternated, median of three).

# %%
sides = [ours] + ([theirs] if HAVE_VLLM else [])
BatchingComparison(*sides, labels=["inferlab", "vLLM"][:len(sides)],
                   title="One small run each, to look at (not a benchmark: chapter 14 and "
                         "`inferlab bench vllm` measure the two)")

# %% [markdown]
# ## Prefix-cache hits compared
#
# The three followers start with the shared instruction, so both engines should find its full
# blocks cached and compute only the rest. Ours counts it in each request's metrics; vLLM says
# it in the API's usage (`prompt_tokens_details.cached_tokens`), and the connector puts it on
# the step records (the `num_cached` of each prefill).

# %%
rows = []
for i, o in enumerate(outs):
    row = {"request": i, "prompt tokens": len(o.prompt_token_ids),
           "cached (inferlab)": o.metrics.num_cached_tokens}
    if HAVE_VLLM:
        row["cached (vLLM)"] = results[i].cached_tokens
        rid = results[i].request_id
        row["cached (vLLM, records)"] = next(c.num_cached for rec in theirs.records
                                             for c in rec.batch
                                             if c.request_id == rid and c.kind == "prefill")
    rows.append(row)
for row in rows:
    print(row)
if HAVE_VLLM:
    assert all(r["cached (inferlab)"] == r["cached (vLLM)"] == r["cached (vLLM, records)"]
               for r in rows)
    assert all(r["cached (vLLM)"] > 0 for r in rows[1:])

# %% [markdown]
# ## vLLM's prefix cache, as vLLM tells it
#
# vLLM's events name **no request and no physical block**: a stored block is a hash of its
# tokens, hung under the block before it. So this view is not a block map like chapter 4's:
# it is the tree of cached block hashes. The shared instruction is the trunk; each question
# branches off it. Only full blocks appear (a request's last, partly filled block never does),
# and whether a cached block is in use or free for reuse is not said: vLLM's stats give that
# only as a count (the KV usage in the header). The view lists these limits under the tree,
# and shows any warning from the connector (a lost or malformed message, a dead server).

# %%
VllmPrefixCache(theirs) if HAVE_VLLM else print("(needs vLLM: make vllm)")

# %%
TokenStream(theirs, title="vLLM: tokens as they arrived") if HAVE_VLLM else None

# %%
if HAVE_VLLM:
    conn.close()
    srv.stop()
    print(srv)

# %% [markdown]
# ## Point the views at your own vLLM (GPUs, several ranks)
#
# The views need three things from a server: its API, its KV events, and (for step-exact
# timelines) inferlab's step reports.
#
# 1. Install inferlab into the server's Python environment without its dependencies:
#    `pip install --no-deps inferlab` (or `-e .` from a checkout). vLLM finds the plugin by
#    its entry point (`vllm.stat_logger_plugins`: `inferlab`); it stays idle unless
#    `INFERLAB_VLLM_STEPS_ENDPOINT` is set. The step reports read vLLM internals checked on
#    vLLM 0.32.0; another version still runs, and the connector says which it is.
# 2. Start vLLM with KV events and the reports on (the flags `inferlab vllm serve` passes):
#
#    ```bash
#    INFERLAB_VLLM_STEPS_ENDPOINT=tcp://*:5600 vllm serve MODEL --enable-prefix-caching \
#      --kv-events-config '{"enable_kv_cache_events": true, "publisher": "zmq",
#        "endpoint": "tcp://*:5557", "replay_endpoint": "tcp://*:5567", "topic": "kv"}' \
#      --enable-logging-iteration-details --disable-log-stats --enable-prompt-tokens-details
#    ```
#
#    With `--data-parallel-size N`, rank r publishes on port 5557 + r (and replays on
#    5567 + r); vLLM refuses `ipc://` endpoints for ranks above 0, so use `tcp://`.
# 3. Connect from the notebook (give the ranks in order):
#
#    ```python
#    from inferlab.connect import VllmConnector, rank_endpoints
#    conn = VllmConnector("http://gpu-host:8000",
#                         kv=rank_endpoints("tcp://gpu-host:5557", N),
#                         replay=rank_endpoints("tcp://gpu-host:5567", N),
#                         steps=["tcp://gpu-host:5600"]).connect()
#    SchedulerTimeline(conn); TokenStream(conn); VllmPrefixCache(conn)
#    ```
#
# These ports have no authentication: keep them on a private network or behind an SSH
# tunnel. Without the plugin the connector still works: it says so, and infers steps from
# token arrivals; the block size and cache size then come from vLLM's `/metrics`.
