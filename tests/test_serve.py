"""inferlab serve: the engine behind the OpenAI API, driven by real clients over loopback.

The official ``openai`` package (sync, async, streaming) and raw ``httpx`` talk to a server
started in this process on a free port. Greedy answers must equal ``Engine.generate`` of the
same prompt; many clients at once must share engine steps (continuous batching); bad input
gets OpenAI's error body and a 4xx while everyone else is served; a client that leaves
mid-answer, a failing step and ``stop()`` leave no KV blocks held. Nothing here asserts a
duration: waits go through tests/waiting.py and every check is a count or a value.
"""
from __future__ import annotations

import asyncio
import json
import random
import signal
import subprocess
import sys
import threading
import time

import httpx
import openai
import pytest
from waiting import wait_until

import inferlab as il
import inferlab.serve

TINY = dict(num_blocks=1024, block_size=4, max_model_len=256, max_num_seqs=32)
GREEDY = dict(temperature=0.0, extra_body={"ignore_eos": True})
HELLO = "The quick brown fox"


class Recorder:
    """Subscribed before the server starts: how many requests a step ran at most, and which
    were aborted. Hooks run in the server's engine thread, so ``pace`` (a sleep per step)
    slows the engine for the disconnect tests and ``hold`` stops it until ``release``."""

    def __init__(self):
        self.max_batch = 0
        self.aborted: list[str] = []
        self.pace = 0.0
        self.hold = False                  # while set, each step waits for ``release``
        self.release = threading.Event()

    def __call__(self, rec):
        self.max_batch = max(self.max_batch, len(rec.batch))
        self.aborted += [e.request_id for e in rec.request_events if e.kind == "aborted"]
        if self.pace:
            time.sleep(self.pace)
        if self.hold:
            self.release.wait(120)


@pytest.fixture(scope="module")
def eng():
    return il.Engine("tiny", **TINY)


@pytest.fixture(scope="module")
def ref():
    """The same model and settings, never served: the reference answers."""
    return il.Engine("tiny", **TINY)


@pytest.fixture(scope="module")
def rec(eng):
    r = Recorder()
    eng.subscribe(r)
    return r


@pytest.fixture(scope="module")
def srv(eng, rec):
    s = inferlab.serve.start(eng, port=0)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.url, api_key="none", max_retries=0)


def reference(ref, prompts, max_tokens, **kw):
    return ref.generate(prompts, il.SamplingParams(max_tokens=max_tokens, ignore_eos=True, **kw),
                        use_tqdm=False)


def idle(srv, eng):
    """Wait until the server holds no request, then return the engine's stats."""
    wait_until(lambda: srv.driver.num_open == 0 and not eng.has_unfinished_requests(), 60,
               what="the server to finish its requests")
    return eng.stats()


def assert_clean(srv, eng):
    st = idle(srv, eng)
    assert (st.kv_blocks_used, st.num_running, st.num_waiting) == (0, 0, 0), st
    assert all(r == 0 for r in eng.kv.pool.ref_cnt)


# --- the API, one client at a time ----------------------------------------------------------
def test_models_and_health(srv, eng, client):
    assert [m.id for m in client.models.list()] == [eng.model_name]
    assert client.models.retrieve(eng.model_name).id == eng.model_name
    assert httpx.get(srv.url.removesuffix("/v1") + "/health").json() == {"status": "ok"}
    assert srv.url.startswith("http://127.0.0.1:") and srv.port > 0


def test_completion_equals_generate(client, eng, ref):
    want = reference(ref, [HELLO], 12)[0]
    r = client.completions.create(model=eng.model_name, prompt=HELLO, max_tokens=12, **GREEDY)
    assert r.choices[0].text == want.text and r.choices[0].finish_reason == "length"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (
        len(want.prompt_token_ids), 12, len(want.prompt_token_ids) + 12)
    r2 = client.completions.create(model=eng.model_name, prompt=want.prompt_token_ids,
                                   max_tokens=12, **GREEDY)       # token ids as the prompt
    assert r2.choices[0].text == want.text


def test_stop_string_finishes_with_stop(client, eng, ref):
    full = reference(ref, [HELLO], 12)[0].text
    stop = full[len(full) // 2:len(full) // 2 + 3]
    want = reference(ref, [HELLO], 12, stop=[stop])[0]
    assert want.finish_reason == "stop"
    r = client.completions.create(model=eng.model_name, prompt=HELLO, max_tokens=12, stop=stop,
                                  **GREEDY)
    assert (r.choices[0].text, r.choices[0].finish_reason) == (want.text, "stop")
    assert r.usage.completion_tokens == len(want.token_ids)


def test_chat_and_its_stream_equal_generate(client, eng, ref):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}]
    want = reference(ref, [msgs], 10)[0]
    r = client.chat.completions.create(model=eng.model_name, messages=msgs, max_tokens=10,
                                       **GREEDY)
    assert r.choices[0].message.role == "assistant"
    assert (r.choices[0].message.content, r.choices[0].finish_reason) == (want.text, "length")
    assert r.usage.prompt_tokens == len(want.prompt_token_ids)
    chunks = list(client.chat.completions.create(
        model=eng.model_name, messages=msgs, max_completion_tokens=10, stream=True,
        stream_options={"include_usage": True}, **GREEDY))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == want.text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 10
    assert chunks[-1].usage.prompt_tokens == len(want.prompt_token_ids)


def test_n_choices_and_a_batch_of_prompts(client, eng, ref):
    r = client.completions.create(model=eng.model_name, prompt=HELLO, max_tokens=8, n=3,
                                  temperature=1.0, seed=7)
    again = client.completions.create(model=eng.model_name, prompt=HELLO, max_tokens=8, n=3,
                                      temperature=1.0, seed=7)
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert [c.text for c in r.choices] == [c.text for c in again.choices]   # seeded
    assert len({c.text for c in r.choices}) > 1                            # seed + index
    want = reference(ref, ["One", "Two three"], 5)
    r = client.completions.create(model=eng.model_name, prompt=["One", "Two three"],
                                  max_tokens=5, n=2, **GREEDY)
    assert [c.text for c in r.choices] == [want[0].text] * 2 + [want[1].text] * 2
    assert r.usage.prompt_tokens == sum(len(w.prompt_token_ids) for w in want)  # once each
    assert r.usage.completion_tokens == 4 * 5


def test_sixteen_concurrent_streams_each_get_their_own_text(srv, eng, ref, rec):
    prompts = [f"Request number {i}: " + "word " * (i % 5) for i in range(16)]
    want = reference(ref, prompts, 24)
    aclient = openai.AsyncOpenAI(base_url=srv.url, api_key="none", max_retries=0)

    async def one(prompt):
        stream = await aclient.completions.create(model=eng.model_name, prompt=prompt,
                                                  max_tokens=24, stream=True, **GREEDY)
        parts, reasons = [], []
        async for chunk in stream:
            parts += [c.text for c in chunk.choices]
            reasons += [c.finish_reason for c in chunk.choices if c.finish_reason]
        return "".join(parts), reasons

    async def burst():
        try:
            return await asyncio.gather(*(one(p) for p in prompts))
        finally:
            await aclient.close()

    rec.max_batch = 0
    got = asyncio.run(burst())
    assert [g[0] for g in got] == [w.text for w in want]
    assert all(g[1] == ["length"] for g in got)
    assert rec.max_batch > 1          # the clients shared engine steps
    assert_clean(srv, eng)


def test_a_view_attached_to_the_served_engine_keeps_updating(srv, eng, client):
    from inferlab.widgets import TokenStream
    view = TokenStream(eng)                     # subscribes to the engine's steps
    try:
        r = client.completions.create(model=M, prompt="Watch this", max_tokens=7, **GREEDY)
        wait_until(lambda: any(view.text(q["id"]) == r.choices[0].text
                               for q in view.requests), 60, what="the view to show the answer")
    finally:
        view.detach()
    assert view.errors == [] and view.num_steps > 0


# --- bad input -----------------------------------------------------------------------------
M = "tiny (random weights, seed 0)"
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
        try:
            for _ in range(12000):          # the 20 refusals come back while 4 are held
                if sum(t.done() for t in tasks) >= 20:
                    break
                await asyncio.sleep(0.01)
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


# --- safe defaults, lifecycle ------------------------------------------------------------------
def test_api_key_is_required_when_given():
    other = il.Engine("tiny", **TINY)
    with inferlab.serve.start(other, port=0, api_key="s3cret") as s:
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "s3cret"}):
            r = httpx.get(s.url + "/models", headers=headers)
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=s.url, api_key="nope", max_retries=0).models.list()
        good = openai.OpenAI(base_url=s.url, api_key="s3cret", max_retries=0)
        assert good.completions.create(model=other.model_name, prompt=HELLO,
                                       max_tokens=2).usage.completion_tokens == 2
        assert httpx.get(s.url.removesuffix("/v1") + "/health").status_code == 200


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.5", "example.org"])
def test_serving_beyond_loopback_needs_an_api_key(eng, host, monkeypatch):
    import inferlab.serve.server as server_mod

    def no_bind(*a):
        raise AssertionError("a socket was opened")

    monkeypatch.setattr(server_mod, "_bind", no_bind)
    with pytest.raises(il.InvalidInputError, match="without an API key"):
        inferlab.serve.start(eng, host=host, port=0)


def test_cli_refuses_a_public_host_without_a_key_before_loading(monkeypatch, capsys):
    from inferlab import cli
    monkeypatch.delenv("INFERLAB_API_KEY", raising=False)
    monkeypatch.setattr("inferlab.engine.Engine.__init__",
                        lambda *a, **k: pytest.fail("the model was loaded"))
    assert cli.main(["serve", "--host", "0.0.0.0", "--model", "tiny"]) == 2
    assert "without an API key" in capsys.readouterr().err


def test_cli_serves_until_interrupted():
    proc = subprocess.Popen([sys.executable, "-m", "inferlab.cli", "serve", "--model", "tiny",
                             "--port", "0", "--max-num-seqs", "4", "--log-level", "warning"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()       # "inferlab serves 'tiny ...' at http://...:PORT/v1"
        assert " at http://127.0.0.1:" in line, line + proc.stderr.read()[-2000:]
        url = line.split(" at ")[1].split()[0]

        def healthy():
            try:
                return httpx.get(url.removesuffix("/v1") + "/health").status_code == 200
            except httpx.TransportError:
                return False

        wait_until(healthy, 120, what="the CLI server's /health")
        c = openai.OpenAI(base_url=url, api_key="none", max_retries=0)
        r = c.completions.create(model=M, prompt=HELLO, max_tokens=3, **GREEDY)
        assert r.usage.completion_tokens == 3
        proc.send_signal(signal.SIGINT)
        assert proc.wait(120) in (0, 130)
        assert "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_one_server_per_engine(eng, srv):
    with pytest.raises(il.InvalidInputError, match="already being served"):
        inferlab.serve.start(eng, port=0)


def test_stop_aborts_what_runs_and_leaves_the_engine_usable(ref):
    eng = il.Engine("tiny", **TINY)
    rec = Recorder()
    eng.subscribe(rec)
    rec.pace = 0.005
    srv = inferlab.serve.start(eng, port=0)
    url = srv.url
    c = openai.OpenAI(base_url=url, api_key="none", max_retries=0)
    stream = c.completions.create(model=M, prompt=HELLO, max_tokens=1000, stream=True, **GREEDY)
    first = next(iter(stream))
    assert first.choices[0].finish_reason is None
    srv.stop()
    with pytest.raises(openai.APIError, match="stopped"):
        for _ in stream:
            pass
    assert rec.aborted and not srv.running
    st = eng.stats()
    assert (st.kv_blocks_used, st.num_running, st.num_waiting) == (0, 0, 0)
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/models")
    rec.pace = 0.0
    assert eng.generate([HELLO], il.SamplingParams(max_tokens=8, ignore_eos=True),
                        use_tqdm=False)[0].text == reference(ref, [HELLO], 8)[0].text
    again = inferlab.serve.start(eng, port=0)     # and it can be served again
    try:
        r = openai.OpenAI(base_url=again.url, api_key="none", max_retries=0).completions.create(
            model=M, prompt=HELLO, max_tokens=8, **GREEDY)
        assert r.choices[0].text == reference(ref, [HELLO], 8)[0].text
    finally:
        again.stop()


def test_importing_inferlab_does_not_import_the_server_stack():
    code = ("import sys, inferlab, inferlab.serve\n"
            "print(sorted(m for m in ('fastapi', 'uvicorn', 'starlette', 'pydantic') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr[-2000:]


# --- the real model ------------------------------------------------------------------------
@pytest.mark.slow
def test_smollm2_greedy_through_the_api_equals_generate():
    eng = il.Engine(None)
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = "The three primary colours are"
    sp = il.SamplingParams(max_tokens=24)
    want_chat, want_text = eng.generate([msgs, prompt], sp, use_tqdm=False)
    with inferlab.serve.start(eng, port=0) as s:
        c = openai.OpenAI(base_url=s.url, api_key="none", max_retries=0)
        chat = c.chat.completions.create(model=eng.model_name, messages=msgs, max_tokens=24,
                                         temperature=0)
        text = c.completions.create(model=eng.model_name, prompt=prompt, max_tokens=24,
                                    temperature=0)
    assert chat.choices[0].message.content == want_chat.text
    assert chat.choices[0].finish_reason == want_chat.finish_reason
    assert chat.usage.completion_tokens == len(want_chat.token_ids)
    assert text.choices[0].text == want_text.text
    assert text.usage.prompt_tokens == len(want_text.prompt_token_ids)
    assert eng.stats().kv_blocks_used == 0
