"""inferlab serve under faults: bad input gets OpenAI's error body and a 4xx while everyone
else is served; a client that leaves mid-answer, a failing step, a Stop, a few hundred
requests at once and more than the pending limit leave no KV blocks held. Real clients over
loopback (the ``openai`` package, raw ``httpx``); no duration is asserted.
"""
from __future__ import annotations

import asyncio
import json
import random

import httpx
import openai
import pytest
from waiting import wait_until

from serve_fixtures import *  # noqa: F401,F403 (fixtures and helpers)


# --- bad input -----------------------------------------------------------------------------
USER = [{"role": "user", "content": "x"}]
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
BAD = [   # (route, body: dict or raw bytes, status, param, code)
    ("completions", b"{bad json", 400, None, "invalid_json"),
    ("completions", b"[1, 2]", 400, None, "invalid_json"),
    ("completions", {"model": "gpt-4", "prompt": "x"}, 404, "model", "model_not_found"),
    ("completions", {"prompt": "x"}, 400, "model", "missing_parameter"),
    ("completions", {"model": M}, 400, "prompt", "missing_parameter"),
    ("completions", {"model": M, "prompt": 5}, 400, "prompt", "invalid_value"),
    ("completions", {"model": M, "prompt": "x", "max_tokens": "5"}, 400, "max_tokens", None),
    ("completions", {"model": M, "prompt": "x", "max_tokens": 0}, 400, "max_tokens", None),
    ("completions", {"model": M, "prompt": "x", "temperature": -0.5}, 400, "temperature", None),
    ("completions", {"model": M, "prompt": "x", "temperature": "hot"}, 400, "temperature",
     None),
    ("completions", {"model": M, "prompt": "x", "top_p": 0}, 400, "top_p", None),
    ("completions", {"model": M, "prompt": "x", "top_p": 1.5}, 400, "top_p", None),
    ("completions", {"model": M, "prompt": "x", "n": 0}, 400, "n", None),
    ("completions", {"model": M, "prompt": "x", "n": 1000}, 400, "n", None),
    ("completions", {"model": M, "prompt": "x", "seed": 2 ** 70}, 400, "seed", None),
    ("completions", {"model": M, "prompt": "x", "stop": [""]}, 400, None, "invalid_value"),
    ("completions", {"model": M, "prompt": ""}, 400, "prompt", None),
    ("completions", {"model": M, "prompt": "word " * 400}, 400, "prompt",
     "context_length_exceeded"),
    ("completions", {"model": M, "prompt": [1, 2, 10 ** 9]}, 400, "prompt", "invalid_value"),
    ("completions", {"model": M, "prompt": "x", "logprobs": 3}, 400, "logprobs",
     "unsupported_parameter"),
    ("completions", {"model": M, "prompt": "x", "stream_options": {"include_usage": True}},
     400, "stream_options", None),
    ("chat/completions", {"model": M, "messages": []}, 400, "messages", None),
    ("chat/completions", {"model": M, "messages": [{"role": "wizard", "content": "hi"}]}, 400,
     "messages.0.role", None),
    ("chat/completions", {"model": M, "messages": [{"role": "user", "content": 5}]}, 400,
     "messages.0.content", None),
    ("chat/completions", {"model": M, "messages": [{"role": "user", "content": "hi " * 400}]},
     400, "messages", "context_length_exceeded"),
    ("chat/completions", {"model": M, "messages": [{"role": "user", "content": "x"}],
                          "max_completion_tokens": -1}, 400, "max_completion_tokens", None),
    ("completions", {"model": M, "prompt": "x" * (1 << 20)}, 413, None, "request_too_large"),
    # tools (an agent framework's requests): wrong types, a forced call, a misplaced tool call
    ("chat/completions", {"model": M, "messages": USER, "tools": "weather"}, 400, "tools", None),
    ("chat/completions", {"model": M, "messages": USER, "tools": [{"type": "function"}]}, 400,
     "tools.0.function", "missing_parameter"),
    ("chat/completions", {"model": M, "messages": USER, "tools": [
        {"type": "function", "function": {"name": 5}}]}, 400, "tools.0.function.name", None),
    ("chat/completions", {"model": M, "messages": USER, "tools": [
        {"type": "retrieval", "function": {"name": "f"}}]}, 400, "tools.0.type", None),
    ("chat/completions", {"model": M, "messages": USER, "tools": [
        {"type": "function", "function": {"name": "f", "parameters": "{}"}}]}, 400,
     "tools.0.function.parameters", None),
    ("chat/completions", {"model": M, "messages": USER, "tool_choice": "sometimes"}, 400,
     "tool_choice", None),
    ("chat/completions", {"model": M, "messages": USER, "tools": [TOOL], "tool_choice": "required"},
     400, "tool_choice", "unsupported_parameter"),
    ("chat/completions", {"model": M, "messages": USER, "tools": [TOOL], "tool_choice": {
        "type": "function", "function": {"name": "f"}}}, 400, "tool_choice",
     "unsupported_parameter"),
    ("chat/completions", {"model": M, "messages": [{"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]}]},
     400, "messages.0.tool_calls.0.function.arguments", None),
    ("chat/completions", {"model": M, "messages": [{"role": "user", "content": "x",
                                                    "tool_calls": [{"id": "c", "function": {
                                                        "name": "f", "arguments": "{}"}}]}]},
     400, "messages.0.tool_calls", "invalid_value"),
    ("chat/completions", {"model": M, "messages": [{"role": "assistant"}]}, 400,
     "messages.0.content", "missing_parameter"),
    ("chat/completions", {"model": M, "messages": [{"role": "tool", "content": "x",
                                                    "tool_call_id": 7}]}, 400,
     "messages.0.tool_call_id", None),
]


@pytest.mark.parametrize("route, body, status, param, code", BAD,
                         ids=[f"{i}-{b[0]}-{b[2]}" for i, b in enumerate(BAD)])
def test_bad_input_gets_an_openai_error_and_the_server_goes_on(srv, eng, client, route, body,
                                                              status, param, code):
    assert eng.model_name == M
    kw = {"content": body} if isinstance(body, bytes) else {"json": body}
    r = httpx.post(f"{srv.url}/{route}", headers={"content-type": "application/json"}, **kw)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    assert err["type"] == "invalid_request_error"
    assert err["param"] == param and (code is None or err["code"] == code), err
    ok = client.completions.create(model=M, prompt=HELLO, max_tokens=3, **GREEDY)
    assert ok.choices[0].finish_reason == "length"
    assert_clean(srv, eng)


def test_the_openai_client_raises_on_errors(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.completions.create(model="gpt-4", prompt="x", max_tokens=2)
    assert e.value.status_code == 404 and e.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=M, messages=[{"role": "user", "content": "x"}],
                                       temperature=-1)
    assert e.value.body["param"] == "temperature"


def test_unknown_routes_and_methods_get_openai_errors(srv):
    r = httpx.get(srv.url + "/engines")
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    r = httpx.get(srv.url + "/completions")
    assert r.status_code == 405 and set(r.json()["error"]) == {"message", "type", "param",
                                                               "code"}


# --- clients that leave, steps that fail, load ------------------------------------------------
def test_client_gone_mid_stream_aborts_its_request(srv, eng, rec):
    before = len(rec.aborted)
    rec.pace = 0.005                   # ~5 ms a step: 1000 tokens would take seconds
    try:
        body = {"model": M, "prompt": HELLO, "max_tokens": 1000, "ignore_eos": True,
                "stream": True}
        with httpx.stream("POST", srv.url + "/completions", json=body) as r:
            assert r.status_code == 200
            got = []
            for x in r.iter_lines():
                if x.startswith("data: {"):
                    got.append(json.loads(x[6:]))
                    if len(got) == 3:
                        break
        assert all(c["choices"][0]["finish_reason"] is None for c in got)
        wait_until(lambda: len(rec.aborted) > before, 60, what="the abort of the stream")
    finally:
        rec.pace = 0.0
    assert_clean(srv, eng)


def test_client_gone_while_waiting_aborts_its_request(srv, eng, rec):
    before = len(rec.aborted)
    rec.pace = 0.005
    try:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(srv.url + "/completions", timeout=httpx.Timeout(30, read=0.5),
                       json={"model": M, "prompt": HELLO, "max_tokens": 1000,
                             "ignore_eos": True})
        wait_until(lambda: len(rec.aborted) > before, 60, what="the abort of the request")
    finally:
        rec.pace = 0.0
    assert_clean(srv, eng)


def test_a_failing_step_gives_500_and_the_server_goes_on(srv, eng, ref, client, monkeypatch):
    real = eng.runner.execute
    armed = {"n": 0}

    def failing(*a, **k):
        if armed["n"]:
            armed["n"] -= 1
            raise RuntimeError("simulated device fault")
        return real(*a, **k)

    monkeypatch.setattr(eng.runner, "execute", failing)
    armed["n"] = 1
    with pytest.raises(openai.InternalServerError) as e:
        client.completions.create(model=M, prompt=HELLO, max_tokens=4)
    assert e.value.body["code"] == "engine_error" and "device fault" in e.value.body["message"]
    armed["n"] = 1
    with pytest.raises(openai.APIError, match="device fault"):     # an error event mid-stream
        for _ in client.completions.create(model=M, prompt=HELLO, max_tokens=4, stream=True):
            pass
    assert srv.driver.num_step_errors == 2
    long_prompt = HELLO + " jumps over the lazy dog" * 6        # several full KV blocks
    armed["n"] = 1
    with pytest.raises(openai.InternalServerError):
        client.completions.create(model=M, prompt=long_prompt, max_tokens=4)
    for prompt in (HELLO, long_prompt):      # no half-written block is reused as a prefix
        r = client.completions.create(model=M, prompt=prompt, max_tokens=6, **GREEDY)
        assert r.choices[0].text == reference(ref, [prompt], 6)[0].text
    assert_clean(srv, eng)


def test_engine_request_stop_answers_the_streams_it_aborted(srv, eng, client, rec, ref):
    """A view's Stop button calls eng.request_stop() (thread-safe): the engine aborts all
    between two steps; the server tells those clients and goes on."""
    rec.pace = 0.005
    try:
        stream = client.completions.create(model=M, prompt=HELLO, max_tokens=1000,
                                           stream=True, **GREEDY)
        assert next(iter(stream)).choices[0].finish_reason is None
        eng.request_stop()
        with pytest.raises(openai.APIError, match="aborted"):
            for _ in stream:
                pass
    finally:
        rec.pace = 0.0
    r = client.completions.create(model=M, prompt=HELLO, max_tokens=6, **GREEDY)
    assert r.choices[0].text == reference(ref, [HELLO], 6)[0].text
    assert_clean(srv, eng)


def test_a_few_hundred_requests_all_answered_or_cleanly_refused(srv, eng, ref, rec):
    rng = random.Random(0)
    pool = [f"Load prompt {i} " + "abc " * i for i in range(8)]
    jobs = [(rng.randrange(8), rng.randint(1, 12), rng.choice(["completion", "chat"]),
             rng.random() < 0.5) for _ in range(300)]
    want = {(p, m): o.text for p in range(8) for m in range(1, 13) for o in
            reference(ref, [pool[p]], m)}
    want_chat = {(p, m): o.text for p in range(8) for m in range(1, 13) for o in
                 reference(ref, [[{"role": "user", "content": pool[p]}]], m)}
    aclient = openai.AsyncOpenAI(base_url=srv.url, api_key="none", max_retries=0,
                                 timeout=300)

    async def one(p, m, kind, stream):
        kw = dict(model=M, max_tokens=m, stream=stream, **GREEDY)
        try:
            if kind == "completion":
                r = await aclient.completions.create(prompt=pool[p], **kw)
                if not stream:
                    return r.choices[0].text, r.usage.completion_tokens
                return "".join([c.choices[0].text async for c in r if c.choices]), m
            r = await aclient.chat.completions.create(
                messages=[{"role": "user", "content": pool[p]}], **kw)
            if not stream:
                return r.choices[0].message.content, r.usage.completion_tokens
            return "".join([c.choices[0].delta.content or "" async for c in r
                            if c.choices]), m
        except openai.APIStatusError as e:
            return e.status_code, e.body["code"]

    async def load():
        try:
            return await asyncio.gather(*(one(*j) for j in jobs))
        finally:
            await aclient.close()

    rec.max_batch = 0
    got = asyncio.run(load())              # all 300 at once: the engine queues what it can't seat
    refused = [g for g in got if g == (503, "server_overloaded")]
    answered = [(j, g) for j, g in zip(jobs, got) if g not in refused]
    assert len(answered) + len(refused) == 300
    assert len(answered) == 300            # max_pending (1024) is not reached: none refused
    for (p, m, kind, _), (text, n) in answered:
        assert text == (want if kind == "completion" else want_chat)[p, m] and n == m
    assert rec.max_batch > 1
    assert_clean(srv, eng)


def test_more_than_max_pending_at_once_get_a_clean_503(srv, eng, rec):
    """4 requests fill the server while the engine is held (a hook waits); the other 20
    are refused with a 503 at once; released, the 4 finish."""
    aclient = openai.AsyncOpenAI(base_url=srv.url, api_key="none", max_retries=0)

    async def one():
        try:
            r = await aclient.completions.create(model=M, prompt=HELLO, max_tokens=4, **GREEDY)
            return r.choices[0].finish_reason
        except openai.APIStatusError as e:
            return e.status_code, e.body["code"]

    async def overload():
        tasks = [asyncio.ensure_future(one()) for _ in range(24)]
        twenty = asyncio.Event()
        for t in tasks:
            t.add_done_callback(lambda _: sum(t.done() for t in tasks) >= 20 and twenty.set())
        try:
            await asyncio.wait_for(twenty.wait(), 120)   # the 20 refusals, while 4 are held
            rec.release.set()
            return await asyncio.gather(*tasks)
        finally:
            await aclient.close()

    srv.driver.max_pending = 4
    rec.release.clear()
    rec.hold = True
    try:
        got = asyncio.run(overload())
    finally:
        rec.hold = False
        rec.release.set()
        srv.driver.max_pending = 1024
    assert sorted(map(str, got)) == sorted(["length"] * 4 + [str((503, "server_overloaded"))] * 20)
    assert_clean(srv, eng)


