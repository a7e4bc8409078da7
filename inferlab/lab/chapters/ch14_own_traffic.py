"""Chapter 14: your own traffic, from a real OpenAI client, through the lab's server.

The lab's engine serves the OpenAI API from a thread of the notebook's kernel
(``inferlab.serve.start``), so any OpenAI client can drive it while the views attached to the
engine watch. This module holds the clients the chapter runs, all through the official
``openai`` package over HTTP on 127.0.0.1:

* ``agent_loop``: a tool-using agent, round by round, as agent frameworks send it: the tool
  declared in ``tools``, the assistant's turn with its ``tool_calls``, the tool's result as a
  ``role: "tool"`` message. The API keeps no state, so every round sends the whole
  conversation again. SmolLM2-135M is far too small to call tools (the server parses no tool
  calls out of its text), so the call and the tool are played here: round k calls
  ``weather`` for the k-th city and answers with its forecast from a fixed table, whatever
  the model wrote (deterministic; the notebook says so).
* ``burst``: several users at once, each its own client in its own thread, released
  together, each streaming its answer (the lab's bundled chat requests); per user, the time
  to the first token and to the last as that client saw it.

The chapter's claim, that the same model feels different on different serving stacks, is
measured from outside by vLLM's own benchmark client against ``inferlab serve`` and vLLM's
server on the same weights (``_ch14_stacks``: ``measure_for_claims``, ``judge_stacks``).

Client-side times are this machine's wall clock, one run, and the clients share this process
(and its CPUs) with the server and the engine. The engine's own times and counts for the same
requests come from its step records (a ``Trace``: the records the views draw), so what HTTP
and streaming add is the difference between the two.
"""
from __future__ import annotations

import json
import threading
import time

from .. import measure_cache, protocol
from ..verdicts import AFTER, Claim
from . import _ch14_figures, _ch14_stacks, _ch14_sweep, _kit
from ._ch14_sweep import answer_text, judge_sweep  # noqa: F401 (the notebook prints them)
from ._ch14_sweep import figure as sweep_figure, measure as measure_sweep  # noqa: F401
from ._ch14_stacks import judge_stacks, stacks_lines  # noqa: F401 (the notebook prints them)
from ._ch14_text import agent_text, burst_text  # noqa: F401 (the notebook prints them)

TITLE = "Your own traffic: a real OpenAI client, an agent loop and a burst of users"
CLAIM = ("Tool calls turn one task into a loop of requests, each re-sending the whole "
         "conversation; a server batches many users' requests into the same engine steps.")
SYSTEM = ("You are a travel assistant. Call the weather tool for each city the user will "
          "visit. When you know every forecast, tell the user what to pack.")
WEATHER = {"type": "function", "function": {           # the tool, as OpenAI's API declares it
    "name": "weather", "description": "Next week's forecast for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
FORECASTS = (("Paris", "14 °C, light rain"), ("Rome", "24 °C, sunny"),
             ("Oslo", "-2 °C, snow"))
# the lab's bundled chat requests (inferlab.sim.chat_requests), several languages
BURST_IDS = ("q-capital", "i-haiku", "fr-question", "q-rainbow", "i-list", "zh-question",
             "de-instruction", "i-recipe", "es-question", "q-bread", "ja-question", "i-story")
LONG_QUESTION = "Tell me the whole history of the bicycle, in detail."


def sizes(smoke: bool) -> dict:
    if smoke:
        return dict(cities=2, agent_tokens=16, users=4, burst_tokens=12, stop_after=4)
    return dict(cities=3, agent_tokens=48, users=8, burst_tokens=48, stop_after=12)


def engine(model: str | None = None, **kw):
    """SmolLM2 (unless ``model``) with 128 KV blocks of 16 tokens, prefix caching on, warmed
    up (the first forward compiles kernels); ``kw``: other ``il.Engine`` options."""
    kw = {"num_blocks": 128, "max_num_seqs": 16, "enable_prefix_caching": True, **kw}
    eng = _kit.engine(model, **kw)
    _kit.warm_up(eng)
    return eng


def task(cities: int) -> str:
    names = [c for c, _ in FORECASTS[:cities]]
    return f"Next week I visit {', '.join(names[:-1])} and {names[-1]}. What should I pack?" \
        if cities > 1 else f"Next week I visit {names[0]}. What should I pack?"


def tool_call(k: int) -> dict:
    """The call the notebook makes for the model in round ``k`` (OpenAI's shape)."""
    return {"id": f"call_{k}", "type": "function", "function": {
        "name": "weather", "arguments": json.dumps({"city": FORECASTS[k][0]})}}


def tool_result(k: int) -> str:
    """What the notebook's tool answers in round ``k`` (fixed; it does not read the model)."""
    city, forecast = FORECASTS[k]
    return f"Forecast for {city} next week: {forecast}."


def stream_chat(client, model: str, messages: list, max_tokens: int, **kw) -> dict:
    """One streamed chat completion (greedy); the text and what the client measured:
    seconds from sending to the first and to the last piece of text, and usage."""
    t0 = time.perf_counter()
    stream = client.chat.completions.create(
        model=model, messages=messages, max_tokens=max_tokens, temperature=0.0, stream=True,
        stream_options={"include_usage": True}, **kw)
    parts, first, usage, finish = [], None, None, None
    for chunk in stream:
        now = time.perf_counter()
        usage = chunk.usage or usage
        for c in chunk.choices:
            if c.delta.content:
                parts.append(c.delta.content)
                first = first or now
            finish = c.finish_reason or finish
    end = time.perf_counter()
    return {"text": "".join(parts), "sent": t0, "ttft": (first or end) - t0, "e2e": end - t0,
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens, "finish": finish}


def engine_metrics(trace) -> dict:
    """Per engine request, from its step records: RequestMetrics (TTFT, cached tokens...)."""
    from inferlab.observe.metrics import request_metrics
    return request_metrics(list(trace.records), dict(trace.requests))


def agent_loop(client, model: str, trace, cities: int = 3, max_tokens: int = 48) -> dict:
    """``cities`` tool rounds and a last answer. Each round: send the whole conversation,
    append the reply and the tool's result, send again. Per round, the client's numbers and
    the engine's: prompt tokens, how many came from the prefix cache, TTFT on both sides."""
    messages = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": task(cities)}]
    rounds = []
    with protocol.BusyCheck() as busy:
        for k in range(cities + 1):
            before = set(trace.requests)
            r = stream_chat(client, model, messages, max_tokens, tools=[WEATHER])
            new = [rid for rid in list(trace.requests) if rid not in before]
            r.update(round=k + 1, messages=len(messages), request_id=new[0] if new else None)
            if k < cities:
                r["call"], r["tool"] = tool_call(k), tool_result(k)
                messages += [{"role": "assistant", "content": r["text"],
                              "tool_calls": [r["call"]]},
                             {"role": "tool", "tool_call_id": r["call"]["id"],
                              "content": r["tool"]}]
            else:
                messages.append({"role": "assistant", "content": r["text"]})
            rounds.append(r)
    em = engine_metrics(trace)
    for r in rounds:
        m = em.get(r["request_id"])
        r["cached"] = m.num_cached_tokens if m else 0
        r["computed"] = r["prompt_tokens"] - r["cached"]
        r["engine_ttft"] = m.ttft if m else None
    return {"rounds": rounds, "messages": messages, "warning": busy.warning}


def burst_requests(users: int) -> list[dict]:
    from inferlab.sim.chat_requests import bundled
    by_id = {r["id"]: r for r in bundled()}
    return [by_id[i] for i in BURST_IDS[:users]]


def burst(url: str, model: str, trace, users: int = 8, max_tokens: int = 48) -> dict:
    """``users`` clients (one ``openai.OpenAI`` each, in its own thread) released at once,
    each streaming one answer. Per user: the client's TTFT and time to the last token, and
    the engine's TTFT for the same request; for the whole burst: wall time, tokens, how many
    engine steps ran and how many requests the fullest step carried."""
    import openai
    reqs = burst_requests(users)
    clients = [openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=300)
               for _ in reqs]
    gate = threading.Barrier(len(reqs) + 1)
    got: list[dict] = [{} for _ in reqs]

    def user(i: int) -> None:
        gate.wait()
        try:
            got[i] = stream_chat(clients[i], model, reqs[i]["messages"], max_tokens)
        except Exception as e:  # noqa: BLE001 - reported per user, the others go on
            got[i] = {"error": f"{type(e).__name__}: {e}"}

    threads = [threading.Thread(target=user, args=(i,), daemon=True) for i in range(len(reqs))]
    for t in threads:
        t.start()
    steps_before, known = len(trace.records), set(trace.requests)
    with protocol.BusyCheck() as busy:
        gate.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
    for c in clients:
        c.close()
    em = engine_metrics(trace)
    prompts = {k: v.get("prompt_text", "") for k, v in dict(trace.requests).items()
               if k not in known and k in em}          # this burst's engine requests
    for r, g in zip(reqs, got):
        g.update(id=r["id"], question=r["messages"][-1]["content"])
        rid = next((k for k, text in prompts.items() if g["question"] in text), None)
        g["engine_ttft"] = em[rid].ttft if rid else None
        g["offset"] = g["sent"] - t0 if "sent" in g else None
    recs = list(trace.records)[steps_before:]
    tokens = sum(g.get("completion_tokens", 0) for g in got)
    return {"users": got, "wall": wall, "tokens": tokens, "steps": len(recs),
            "max_batch": max((len(r.batch) for r in recs), default=0),
            "peak_blocks": max((r.kv_blocks_used for r in recs), default=0),
            "warning": busy.warning, "max_tokens": max_tokens}


def read_text(chunks, n: int) -> str:
    """The next ``n`` pieces of text from a chat stream's chunk iterator."""
    parts = []
    for chunk in chunks:
        parts += [c.delta.content for c in chunk.choices if c.delta.content]
        if len(parts) >= n:
            break
    return "".join(parts)


def read_rest(chunks) -> tuple[str, str | None]:
    """The rest of a chat stream's text, and the error it ended with (None if it finished)."""
    import openai
    parts = []
    try:
        for chunk in chunks:
            parts += [c.delta.content for c in chunk.choices if c.delta.content]
    except openai.APIError as e:
        return "".join(parts), f"{type(e).__name__}: {e}"
    return "".join(parts), None


def idle_state(eng) -> dict:
    """The engine after the server stopped (its thread has ended: the kernel may call it)."""
    st = eng.stats()
    return {"running": st.num_running, "waiting": st.num_waiting,
            "blocks_used": st.kv_blocks_used, "blocks_total": st.kv_blocks_total,
            "unfinished": eng.has_unfinished_requests(), "steps": st.num_steps,
            "prefix_hits": st.prefix_cache_hits, "prefix_queries": st.prefix_cache_queries}


@measure_cache.shared
def measure(smoke: bool = False, deterministic: bool = False, model: str | None = None) -> dict:
    """The chapter end to end without the views (``inferlab figures``): serve, run the agent
    loop and (unless ``deterministic``: its timings depend on the machine) the burst, stop."""
    import openai

    import inferlab.serve
    from inferlab.observe.trace import Trace
    s = sizes(smoke)
    eng = engine(model)
    trace = Trace.record(eng)
    srv = inferlab.serve.start(eng, port=0)
    try:
        client = openai.OpenAI(base_url=srv.url, api_key="none", max_retries=0, timeout=300)
        agent = agent_loop(client, srv.model_name, trace, s["cities"], s["agent_tokens"])
        crowd = None if deterministic else burst(srv.url, srv.model_name, trace, s["users"],
                                                 s["burst_tokens"])
        client.close()
    finally:
        srv.stop()
        trace.stop()
    return {"model": eng.model_name, "sizes": s, "agent": agent, "burst": crowd,
            "idle": idle_state(eng)}


# --- what the notebook prints ----------------------------------------------------------------
def figures(data: dict) -> dict:
    """The chapter's figures, one point each (``_ch14_figures``): the agent's rounds (the main
    one) and, when the run has it (not a deterministic one), the burst of users."""
    out = {"": figure(data)}
    if data.get("burst"):
        out["burst"] = _ch14_figures.burst_figure(data)
    return out


def figure(data: dict):
    """The main figure: the agent's rounds (prompt tokens from the cache and computed, answer
    tokens); its title says when the burst was left out (a deterministic run)."""
    return _ch14_figures.agent_figure(data)


# --- the chapter's claim: how it is measured and judged ---------------------------------------
# what measure_for_claims measures, a call of its own: `make notebooks-records` puts the
# record's claims measurement there (records.seed_cache, as ``claims_as_recorded`` says it),
# so the notebook shows the recorded stacks run instead of measuring (and recording) another
CLAIMS_MEASURE = _ch14_stacks.measure


def claims_as_recorded(rec: dict) -> dict:
    """The record's stacks run, saying it was recorded (when, where, by which command)."""
    claims = rec["claims"]
    if "result" not in claims:
        return claims
    meta = {k: rec.get(k) for k in ("command", "date", "cpu", "cores", "load")}
    return {"source": "recorded", "recorded": meta, "result": claims["result"],
            "path": f"docs/results/chapters/{rec['chapter']}.json.gz",
            "sweep": claims.get("sweep")}


def measure_for_claims(smoke: bool, sweep: dict | None = None) -> dict:
    """The measurement the claims below are judged on (``claims.run_all``, the notebook): a
    full run serves the same weights from ``inferlab serve`` and ``vllm serve`` and measures
    both now with ``vllm bench serve`` (A B A B; a few minutes, vLLM's start included); a
    smoke run (CI, Binder: no vLLM to start) judges the run recorded in
    docs/results/stacks.json by the last full run (before one: serve-xeon.json), and its
    reason says so: "recorded on <CPU>, <date>". Under ``"sweep"``: the chat traffic's sweep
    (``_ch14_sweep``, on this machine's wall clock): ``sweep`` if the notebook measured it
    already, else the recorded run's (a record read back), else measured now; a smoke run
    (``inferlab claims --smoke``, the default test tier) measures none: like the stacks, the
    claim is then judged on chapter 14's record and says where it was recorded."""
    data = _ch14_stacks.measure(smoke)
    sweep = sweep or data.get("sweep")
    if sweep is None and smoke and data.get("source") == "recorded":
        m = data.get("recorded") or {}
        sweep = {"unmeasurable": f"a smoke run measures no sweep; chapter 14's record (recorded "
                                 f"on {m.get('cpu')}, {str(m.get('date'))[:10]}) holds none"}
    return {**data, "sweep": sweep or _ch14_sweep.measure(smoke)}


CLAIMS = (
    Claim("14-stacks", "The same model feels different on different serving stacks: the same "
          "weights give the same tokens, but how soon the first word comes, how fast the rest "
          "streams and how many tokens a second the machine serves depend on the stack "
          "serving it.",
          f"{AFTER} (a capable model can be poorly served, or feel very responsive on "
          "well-optimised infrastructure: what serves a model matters to the experience as "
          "much as the model); measured with vLLM's own client, `vllm bench serve`",
          "ch14_own_traffic", measure_for_claims, judge_stacks),
    Claim("14-sweep", "Processing several users' requests together uses the hardware "
          "better: on the bundled chat traffic, letting the engine run 8 requests at once "
          "instead of 1 (max_num_seqs) serves more output tokens per second in total, by "
          "more than the run-to-run spread.",
          f"{AFTER} (batching: systems process multiple requests together to improve "
          "hardware utilization); measured by the lab's sweep (inferlab.lab.sweep)",
          "ch14_own_traffic", measure_for_claims, judge_sweep),
)
