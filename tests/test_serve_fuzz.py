"""inferlab serve fuzzed from its own OpenAPI document (schemathesis; issue 45 item 2).

Every operation the server publishes at /openapi.json gets cases generated from its schema:
positive ones (valid by the document) and negative ones (each breaking it somewhere), with a
fixed seed (hypothesis ``derandomize``), sent over loopback to a server started in this
process. ``max_tokens`` is capped at a small number (the fuzzer's cases are about the input,
not long answers). Every response must be: no 5xx; every 4xx OpenAI's error body; a negative
case refused; a status and content type the document lists; a stream that ends with [DONE]
and carries no error event. Counted apart: requests that reached the engine (answered 200 by
a generation route; the engine's "queued" events count their choices) and requests refused.
After: a known greedy prompt answers as the engine does directly, no KV block is held, no
request is left. Nothing here asserts a duration.
"""
from __future__ import annotations

import collections
import copy
import json
import time

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (content_type_conformance,
                                               negative_data_rejection,
                                               status_code_conformance)

import inferlab as il
import inferlab.serve
from inferlab.serve.protocol import MAX_N
from serve_fixtures import *  # noqa: F401,F403 (fixtures and helpers)
from serve_fixtures import Recorder

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          negative_data_rejection]
GENERATE = ("/v1/completions", "/v1/chat/completions")
MAX_PROMPTS = 3                    # prompts of a valid completions batch sent (cap_tokens)
ERROR_KEYS = {"message", "type", "param", "code"}


class Counting(Recorder):
    """The fixtures' recorder, also counting the engine requests queued (one per choice)."""

    def __init__(self):
        super().__init__()
        self.queued = 0

    def __call__(self, rec):
        self.queued += sum(e.kind == "queued" for e in rec.request_events)
        super().__call__(rec)


# serve_fixtures' settings with a longer context: generated conversations with tools render
# to ~1,000 tokens, and the fuzzer's cases should reach the engine, not stop at its length
FUZZ_ENGINE = {**TINY, "max_model_len": 2048, "num_blocks": 2048}


@pytest.fixture(scope="module")
def eng():
    return il.Engine("tiny", **FUZZ_ENGINE)


@pytest.fixture(scope="module")
def ref():
    return il.Engine("tiny", **FUZZ_ENGINE)


@pytest.fixture(scope="module")
def rec(eng):                          # replaces serve_fixtures' rec: subscribed before srv
    r = Counting()
    eng.subscribe(r)
    return r


def cap_tokens(case, limit: int) -> None:
    """At most ``limit`` new tokens and choices (and MAX_PROMPTS prompts in a valid batch);
    an invalid max_tokens or n stays as generated (a valid value is capped to a valid one,
    so a case keeps its validity)."""
    body = case.body
    if case.method.upper() != "POST" or not isinstance(body, dict):
        return
    for k in ("max_tokens", "max_completion_tokens"):
        if integer(body.get(k)) and body[k] > limit:
            body[k] = limit
    if integer(body.get("n")) and limit < body["n"] <= MAX_N:    # > MAX_N: a 400 case
        body["n"] = limit
    prompt = body.get("prompt")
    if (case.meta and case.meta.generation.mode.value == "positive" and isinstance(prompt, list)
            and prompt and isinstance(prompt[0], (str, list))):
        body["prompt"] = prompt[:MAX_PROMPTS]       # a batch of prompts: the first few


    if body.get("max_tokens") is None and body.get("max_completion_tokens") is None:
        body["max_completion_tokens" if case.path.endswith("chat/completions")
             else "max_tokens"] = limit


def integer(v) -> bool:
    """An integer as JSON Schema (and the server) reads one: 3 or 3.0, not true."""
    return type(v) is int or (type(v) is float and v.is_integer())


def problems(case, resp) -> list[str]:
    """What is wrong with one response beyond schemathesis' checks."""
    out = []
    if 400 <= resp.status_code < 500:
        try:
            err = resp.json()["error"]
            ok = set(err) == ERROR_KEYS and isinstance(err["message"], str) and err["message"]
        except (ValueError, KeyError, TypeError):
            ok = False
        if not ok:
            out.append(f"a {resp.status_code} without OpenAI's error body: {resp.text[:200]}")
    if resp.status_code == 200 and resp.headers.get("content-type", [""])[0].startswith(
            "text/event-stream"):
        events = [x[6:] for x in resp.text.splitlines() if x.startswith("data: ")]
        if not events or events[-1] != "[DONE]":
            out.append(f"a stream that does not end with [DONE]: {resp.text[-200:]}")
        out += [f"an error event in a 200 stream: {e[:300]}" for e in events[:-1]
                if "error" in json.loads(e)]
    return out


def closed(doc: dict) -> dict:
    """The document with every object closed to the fields it names. The server ignores
    other fields (as vLLM does; tests/test_serve.py sends some), and generating them costs
    most of a case's time, so the default tier leaves them out; the full tier keeps them."""
    doc = copy.deepcopy(doc)

    def walk(x):
        if isinstance(x, dict):
            if x.get("type") == "object" and "properties" in x:
                x.setdefault("additionalProperties", False)
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
    walk(doc)
    return doc


def fuzz(srv, examples: dict[str, tuple[int, int]], limit: int, extra_fields: bool) -> dict:
    """Send ``examples[path] = (positive, negative)`` cases per operation of the server's
    published document; return the counts and the first failures."""
    base = srv.url.removesuffix("/v1")
    doc = httpx.get(base + "/openapi.json").json()
    schema = schemathesis.openapi.from_dict(
        doc if extra_fields else closed(doc), config=schemathesis.Config.from_dict(
            {"generation": {"allow-extra-parameters": extra_fields},
             "max-stream-events": 1_000_000}))       # read streams to the end (default 20)
    session = requests.Session()
    got = collections.Counter()
    failures: list[str] = []

    clock = {"last": time.perf_counter()}

    def send(case) -> None:
        t0 = time.perf_counter()
        got["generating s"] += t0 - clock["last"]
        cap_tokens(case, limit)
        resp = case.call(base_url=base, session=session, timeout=120)
        got["sending s"] += time.perf_counter() - t0
        route = "generate" if case.path in GENERATE else "other"
        mode = case.meta.generation.mode.value if case.meta else "?"
        got["sent"] += 1
        got[f"{mode}"] += 1
        got[f"{route} {resp.status_code // 100}xx"] += 1
        if route == "generate" and resp.status_code == 200:
            got["reached the engine"] += 1
        if 400 <= resp.status_code < 500:
            got["refused"] += 1
        found = problems(case, resp)
        try:
            case.validate_response(resp, checks=CHECKS)
        except Exception as e:        # noqa: BLE001 - schemathesis' FailureGroup
            found.append(f"{type(e).__name__}: {e}"[:600])
        clock["last"] = time.perf_counter()
        if found:
            got["failed"] += 1
            if len(failures) < 10:
                failures.append(f"{case.method} {case.path} {case.body!r:.300}: {found}")

    for op in schema.get_all_operations():
        op = op.ok()
        for mode, n in zip(schemathesis.GenerationMode, examples[op.path]):
            if not n:
                continue

            @settings(max_examples=n, derandomize=True, database=None, deadline=None,
                      phases=[Phase.generate], suppress_health_check=list(HealthCheck))
            @given(case=op.as_strategy(generation_mode=mode))
            def one(case):
                send(case)

            clock["last"] = time.perf_counter()
            one()
    return {"counts": dict(got), "failures": failures}


def assert_serves_and_is_clean(srv, eng, ref, max_tokens=6):
    want = reference(ref, [HELLO], max_tokens)[0].text
    r = httpx.post(srv.url + "/completions", timeout=120, json={
        "model": eng.model_name, "prompt": HELLO, "max_tokens": max_tokens,
        "temperature": 0.0, "ignore_eos": True})
    assert r.status_code == 200 and r.json()["choices"][0]["text"] == want, r.text
    assert_clean(srv, eng)
    assert eng.scheduler.requests == {} and not srv.driver._jobs   # no request left


def test_the_published_document_types_every_body(srv, eng):
    doc = httpx.get(srv.url.removesuffix("/v1") + "/openapi.json").json()
    ops = {(p, m) for p, ms in doc["paths"].items() for m in ms}
    assert {("/v1/completions", "post"), ("/v1/chat/completions", "post"),
            ("/v1/models", "get"), ("/v1/models/{name}", "get"), ("/health", "get")} <= ops
    for path in GENERATE:
        body = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]
        props = body["schema"]["properties"]
        assert props["model"]["enum"] == [eng.model_name] and "max_tokens" in props
        assert "400" in doc["paths"][path]["post"]["responses"]
    assert set(doc["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"][
        "application/json"]["schema"]["required"]) == {"model", "messages"}


# (positive, negative) cases per operation: >= 1,000 in all, a refused case costs the server
# little, an accepted one an engine step
FUZZ = {"/v1/completions": (230, 270), "/v1/chat/completions": (230, 270),
        "/v1/models": (3, 0), "/v1/models/{name}": (15, 0), "/health": (3, 0)}


def test_fuzzed_from_its_schema_no_5xx_and_clean_after(srv, eng, ref, rec):
    queued = rec.queued
    res = fuzz(srv, FUZZ, limit=1, extra_fields=False)
    c = res["counts"]
    print("fuzz counts:", c)
    assert not res["failures"], "\n".join(res["failures"])
    assert c["sent"] >= 1000 and c["reached the engine"] >= 300, c
    assert not any(k.endswith("5xx") for k in c), c
    assert c.get("negative", 0) > 0 and c["refused"] > 0
    assert rec.queued - queued >= c["reached the engine"]   # every 200 ran in the engine
    assert_serves_and_is_clean(srv, eng, ref)


@pytest.mark.full("tests/test_serve_fuzz.py::test_fuzzed_from_its_schema_no_5xx_and_clean_after")
def test_fuzzed_on_smollm2():
    kw = dict(num_blocks=512, block_size=16, max_model_len=512, max_num_seqs=16)
    eng, ref = il.Engine(**kw), il.Engine(**kw)
    srv = inferlab.serve.start(eng, port=0)
    try:
        res = fuzz(srv, {"/v1/completions": (1200, 400), "/v1/chat/completions": (1200, 400),
                         "/v1/models": (5, 0), "/v1/models/{name}": (50, 0),
                         "/health": (5, 0)}, limit=4, extra_fields=True)
        print("fuzz counts (SmolLM2):", res["counts"])
        assert not res["failures"], "\n".join(res["failures"])
        c = res["counts"]
        assert c["sent"] >= 3000 and c["reached the engine"] >= 900, c
        assert_serves_and_is_clean(srv, eng, ref)
    finally:
        srv.stop()


# --- what the fuzzer found, each pinned ------------------------------------------------------
def post(srv, route: str, body: dict) -> httpx.Response:
    return httpx.post(f"{srv.url}/{route}", json=body, timeout=120)


def test_a_prompt_the_tokenizer_drops_entirely_gets_a_400(srv, eng, ref):
    """Found: "\x14" (a control character the tokenizer drops) made a request of no tokens
    that the scheduler could never run: every step failed with a 500."""
    for body in ({"prompt": "\x14"}, {"prompt": ["ok", "\x14"]}):
        r = post(srv, "completions", {"model": eng.model_name, "max_tokens": 2, **body})
        assert r.status_code == 400 and r.json()["error"]["param"] == "prompt", r.text
        assert "no tokens" in r.json()["error"]["message"]
    with pytest.raises(il.InvalidInputError, match="no tokens"):
        ref.generate(["\x14"], il.SamplingParams(max_tokens=2), use_tqdm=False)
    assert_serves_and_is_clean(srv, eng, ref)


@pytest.mark.parametrize("temperature", [5e-324, 1.3e308])
def test_an_extreme_temperature_samples_instead_of_failing_the_step(srv, eng, ref, temperature):
    """Found: temperature 5e-324 (logits / t overflowed: softmax NaN) and 1.3e308 with
    min_tokens (inf to float32; a banned token's -inf / inf is NaN) failed the step."""
    body = {"model": eng.model_name, "prompt": HELLO, "max_tokens": 2, "min_tokens": 2,
            "temperature": temperature, "top_p": 5e-324 if temperature < 1 else 1.0}
    for stream in (False, True):
        r = post(srv, "completions", {**body, "stream": stream})
        assert r.status_code == 200 and '"error"' not in r.text, r.text
    out = ref.generate([HELLO], il.SamplingParams(max_tokens=2, temperature=temperature,
                                                  min_tokens=2, seed=0), use_tqdm=False)[0]
    assert len(out.token_ids) == 2
    assert_serves_and_is_clean(srv, eng, ref)


def test_integral_numbers_are_integers(srv, eng, ref):
    """Found: 2.0 for max_tokens (an integer to JSON Schema, to the document and to vLLM)
    was refused; "2", true and 2.5 still are."""
    want = reference(ref, [HELLO], 3, temperature=0.0)[0]
    ids = [float(t) for t in want.prompt_token_ids]
    r = post(srv, "completions", {"model": eng.model_name, "prompt": ids, "max_tokens": 3.0,
                                  "n": 1.0, "temperature": 0, "ignore_eos": True})
    assert r.status_code == 200 and r.json()["choices"][0]["text"] == want.text, r.text
    for bad in ("3", True, 2.5):
        r = post(srv, "completions", {"model": eng.model_name, "prompt": HELLO,
                                      "max_tokens": bad})
        assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens", r.text


def test_responses_are_not_held_for_the_clients_ack(srv):
    """Found (every fuzzed request took ~40 ms, GET /health too): the server's socket was made
    without IPPROTO_TCP, so asyncio left Nagle on and each response waited for the client's
    delayed ACK. The listening socket (and so each accepted one) now has TCP_NODELAY."""
    import socket
    sock = srv._sock
    assert sock.proto == socket.IPPROTO_TCP
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
