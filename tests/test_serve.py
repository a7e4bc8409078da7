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
import signal
import subprocess
import sys

import httpx
import openai
import pytest
from waiting import wait_until

import inferlab as il
import inferlab.serve
from serve_fixtures import *  # noqa: F401,F403 (fixtures and helpers)


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


# --- tools: an agent framework's requests ---------------------------------------------------
WEATHER = {"type": "function", "function": {
    "name": "weather", "description": "Next week's forecast for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
AGENT = [{"role": "system", "content": "You plan trips."},
         {"role": "user", "content": "What should I pack for Paris?"},
         {"role": "assistant", "content": None, "tool_calls": [
             {"id": "call_0", "type": "function",
              "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}]},
         {"role": "tool", "tool_call_id": "call_0", "content": "14 C, light rain"}]


def test_tools_go_into_the_prompt_and_no_tool_call_comes_back(srv, client, eng, ref):
    """The tiny model's template (SmolLM2's) ignores ``tools=``: they come as a system message
    listing them, and the answer is the engine's greedy answer to that prompt; the response
    has no tool_calls (nothing parses them out of the text) and finishes as usual."""
    from inferlab.core.prompts import render_messages, template_reads
    msgs = [{"role": "user", "content": "What should I pack for Paris?"}]
    assert not template_reads(ref.tokenizer, "tools")
    text = render_messages(msgs, ref.tokenizer, [WEATHER])
    assert text.startswith("<|im_start|>system\nYou can call these functions.")
    assert '"name": "weather"' in text and text.endswith("<|im_start|>assistant\n")
    want = reference(ref, [text], 10)[0]
    plain = reference(ref, [msgs], 10)[0]
    for choice in ("auto", "none", None):
        kw = {} if choice is None else {"tool_choice": choice}
        r = client.chat.completions.create(model=eng.model_name, messages=msgs, tools=[WEATHER],
                                           max_tokens=10, parallel_tool_calls=False, **kw,
                                           **GREEDY)
        m = r.choices[0]
        assert (m.message.content, m.finish_reason, m.message.tool_calls) == (
            want.text, "length", None)
        assert r.usage.prompt_tokens == len(want.prompt_token_ids) > len(plain.prompt_token_ids)
    chunks = list(client.chat.completions.create(
        model=eng.model_name, messages=msgs, tools=[WEATHER], tool_choice="auto",
        max_tokens=10, stream=True, **GREEDY))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == want.text
    assert not any(c.choices[0].delta.tool_calls for c in chunks if c.choices)
    assert_clean(srv, eng)


def test_an_agent_loop_sends_its_tool_calls_and_results_back(client, eng, ref):
    """An assistant turn with tool_calls (no content) and the tool's result (role "tool"), as
    an agent framework sends the conversation back: the calls become the assistant's text in
    the <tool_call> JSON form (SmolLM2's template ignores tool_calls), the result a tool
    turn; with tools, both at once."""
    from inferlab.core.prompts import render_messages
    text = render_messages(AGENT, ref.tokenizer)
    assert ('<|im_start|>assistant\n<tool_call>\n{"name": "weather", "arguments": {"city": '
            '"Paris"}}\n</tool_call><|im_end|>\n<|im_start|>tool\n14 C, light rain<|im_end|>'
            in text)
    want = reference(ref, [AGENT], 8)[0]
    r = client.chat.completions.create(model=eng.model_name, messages=AGENT, max_tokens=8,
                                       **GREEDY)
    assert r.choices[0].message.content == want.text
    assert r.usage.prompt_tokens == len(want.prompt_token_ids)
    with_tools = reference(ref, [render_messages(AGENT, ref.tokenizer, [WEATHER])], 8)[0]
    r = client.chat.completions.create(model=eng.model_name, messages=AGENT, tools=[WEATHER],
                                       max_tokens=8, **GREEDY)
    assert r.choices[0].message.content == with_tools.text
    assert r.usage.prompt_tokens == len(with_tools.prompt_token_ids)


def test_a_template_that_knows_tools_renders_them_itself(ref):
    """A chat template that reads ``tools`` and ``tool_calls`` (a Hermes-style one here) gets
    them as transformers passes them, the calls' JSON arguments as a dict; nothing is added."""
    from inferlab.core.prompts import render_messages, template_reads
    template = (
        "{% if tools %}<tools>{% for t in tools %}{{ t.function.name }};{% endfor %}</tools>"
        "{% endif %}{% for m in messages %}<{{ m.role }}>{{ m.content or '' }}"
        "{% for c in m.tool_calls or [] %}[{{ c.function.name }}({{ c.function.arguments.city"
        " }})]{% endfor %}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}")

    class Knows:
        chat_template = template

        def apply_chat_template(self, msgs, **kw):
            return ref.tokenizer.apply_chat_template(msgs, chat_template=template, **kw)
    tok = Knows()
    assert template_reads(tok, "tools") and template_reads(tok, "tool_calls")
    assert render_messages(AGENT, tok, [WEATHER]) == (
        "<tools>weather;</tools><system>You plan trips.<user>What should I pack for Paris?"
        "<assistant>[weather(Paris)]<tool>14 C, light rain<assistant>")


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
