"""A streaming completion from vLLM's OpenAI-compatible API, each token's arrival timed.

    for ev in stream_completion("http://127.0.0.1:8000", {"model": m, "prompt": [1, 2, 3],
                                "max_tokens": 8}):
        ev.t, ev.token_ids, ev.text, ev.finish_reason

Plain ``http.client`` and a small Server-Sent-Events parser (``data: {...}`` lines, events
separated by a blank line, ``data: [DONE]`` at the end); no HTTP library to install. The
request asks vLLM for the token ids of every chunk (``return_token_ids``, a vLLM extension)
and for usage with the prompt's cached tokens at the end.
"""
from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from dataclasses import dataclass, field

from ...errors import InferlabError


class StreamError(InferlabError, RuntimeError):
    """The server refused the request, or the stream broke off."""


@dataclass(slots=True)
class Chunk:
    t: float                                  # time.time() when the chunk was read
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    prompt_token_ids: list[int] | None = None
    finish_reason: str | None = None
    usage: dict | None = None
    id: str | None = None


def sse_events(lines):
    """The ``data`` payloads of an SSE stream, given its lines (bytes or str)."""
    data: list[str] = []
    for raw in lines:
        line = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        line = line.rstrip("\r\n")
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue                          # an SSE comment (keep-alive)
        name, _, value = line.partition(":")
        if name == "data":
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield "\n".join(data)


def parse_chunk(payload: str, t: float) -> Chunk | None:
    """One ``data:`` payload as a Chunk; None for ``[DONE]``. Raises StreamError on an error
    object or on something that is not a completion chunk."""
    if payload.strip() == "[DONE]":
        return None
    try:
        obj = json.loads(payload)
    except ValueError:
        raise StreamError(f"the server sent a chunk that is not JSON: {payload[:200]!r}") \
            from None
    if not isinstance(obj, dict):
        raise StreamError(f"the server sent an unexpected chunk: {payload[:200]!r}")
    if "error" in obj:
        err = obj["error"]
        msg = err.get("message") if isinstance(err, dict) else err
        raise StreamError(f"the server reported an error mid-stream: {msg}")
    ch = Chunk(t=t, usage=obj.get("usage"), id=obj.get("id"))
    choices = obj.get("choices") or []
    if choices:
        c = choices[0]
        ch.text = c.get("text") or ""
        ch.token_ids = list(c.get("token_ids") or [])
        ch.prompt_token_ids = c.get("prompt_token_ids")
        ch.finish_reason = c.get("finish_reason")
    return ch


def stream_completion(base_url: str, body: dict, timeout: float = 600.0, clock=time.time):
    """POST /v1/completions with stream=true; yields a Chunk per SSE event as it arrives."""
    u = urllib.parse.urlsplit(base_url)
    body = {**body, "stream": True, "return_token_ids": True,
            "stream_options": {"include_usage": True}}
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
    try:
        try:
            conn.request("POST", (u.path.rstrip("/") or "") + "/v1/completions",
                         body=json.dumps(body), headers={"Content-Type": "application/json",
                                                         "Accept": "text/event-stream"})
            resp = conn.getresponse()
        except OSError as e:
            raise StreamError(f"cannot reach the vLLM server at {base_url}: {e}") from None
        if resp.status != 200:
            detail = resp.read(2000).decode("utf-8", "replace")
            raise StreamError(f"the vLLM server refused the request (HTTP {resp.status}): "
                              f"{detail}")
        try:
            for payload in sse_events(iter(resp.readline, b"")):
                ch = parse_chunk(payload, clock())
                if ch is not None:
                    yield ch
        except (OSError, http.client.HTTPException) as e:
            raise StreamError(f"the stream from {base_url} broke off: {e}") from None
    finally:
        conn.close()


def _call(base_url: str, method: str, path: str, body: dict | None, timeout: float) -> bytes:
    u = urllib.parse.urlsplit(base_url)
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
    try:
        conn.request(method, (u.path.rstrip("/") or "") + path,
                     body=None if body is None else json.dumps(body),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        if r.status != 200:
            raise StreamError(f"{method} {path} on {base_url}: HTTP {r.status} "
                              f"{data[:300].decode('utf-8', 'replace')}")
        return data
    except (OSError, http.client.HTTPException) as e:
        raise StreamError(f"cannot reach the vLLM server at {base_url}: {e}") from None
    finally:
        conn.close()


def get_json(base_url: str, path: str, timeout: float = 5.0):
    try:
        return json.loads(_call(base_url, "GET", path, None, timeout))
    except ValueError:
        raise StreamError(f"GET {path} on {base_url}: the answer is not JSON") from None


def get_text(base_url: str, path: str, timeout: float = 5.0) -> str:
    return _call(base_url, "GET", path, None, timeout).decode("utf-8", "replace")


def post_json(base_url: str, path: str, body: dict, timeout: float = 30.0):
    try:
        return json.loads(_call(base_url, "POST", path, body, timeout))
    except ValueError:
        raise StreamError(f"POST {path} on {base_url}: the answer is not JSON") from None
