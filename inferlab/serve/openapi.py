"""The server's OpenAPI document, complete: what a client (or a fuzzer) may send and get back.

The routes read their bodies themselves (app.py: a size limit, then protocol.py's strict
validation with OpenAI-style errors), so FastAPI cannot see their types. This module writes
them in: each POST's request body is the JSON Schema of its protocol model, narrowed to what
this server accepts (``model``: the one model it serves; the OpenAI fields it takes at their
neutral values only: those values; token ids: the vocabulary), and every operation lists the
errors it can answer with, each OpenAI's ``{"error": {...}}`` body.

Published at ``/openapi.json``; ``tests/test_serve_fuzz.py`` fuzzes the server from it.
"""
from __future__ import annotations

import copy

from fastapi.openapi.utils import get_openapi

from .protocol import ChatRequest, CompletionRequest

REF = "#/components/schemas/{model}"
BODIES = {"/v1/completions": CompletionRequest, "/v1/chat/completions": ChatRequest}
ERRORS = {"400": "invalid request: the error names the field (param) and the problem",
          "401": "missing or wrong API key (a server started with one)",
          "404": "no such model or route",
          "413": "request body too large",
          "503": "the server is stopping or holds max_pending requests"}
ERROR_BODY = {
    "type": "object", "required": ["error"], "title": "ErrorResponse",
    "properties": {"error": {
        "type": "object", "required": ["message", "type", "param", "code"],
        "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                       "param": {"type": ["string", "null"]},
                       "code": {"type": ["string", "null"]}}}}}


def openapi_document(app, model_name: str, vocab_size: int) -> dict:
    """The OpenAPI 3.1 document of ``app`` (create_app's), with typed request bodies."""
    doc = get_openapi(title=app.title, version=app.version, routes=app.routes,
                      description="An OpenAI-compatible server over inferlab's engine")
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):     # FastAPI's 422: never sent
        schemas.pop(name, None)
    schemas["ErrorResponse"] = ERROR_BODY
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            op["responses"].pop("422", None)
            if path in BODIES and method == "post":
                op["requestBody"] = {"required": True, "content": {"application/json": {
                    "schema": _body(BODIES[path], model_name, vocab_size, schemas)}}}
                op["responses"]["200"] = {
                    "description": "the answer: a JSON body, or server-sent events with "
                                   "stream: true",
                    "content": {"application/json": {"schema": {}},
                                "text/event-stream": {"schema": {"type": "string"}}}}
            for status, what in ERRORS.items():
                op["responses"].setdefault(status, {"description": what, "content": {
                    "application/json": {"schema": {"$ref": REF.format(model="ErrorResponse")}}}})
    return doc


def _body(model, model_name: str, vocab_size: int, schemas: dict) -> dict:
    schema = copy.deepcopy(model.model_json_schema(ref_template=REF))
    schemas.update(schema.pop("$defs", {}))
    props = schema["properties"]
    props["model"] = {"type": "string", "enum": [model_name], "title": "Model",
                      "description": "the model this server serves (GET /v1/models)"}
    for name, values in model.neutral().items():
        props[name] = {"enum": list(values), "default": values[0],
                       "description": "accepted at its neutral value only"}
    _nonempty(props["stop"], arrays=False)      # the engine refuses an empty stop string
    if "prompt" in props:                       # completions: text or token ids, not empty
        token = {"type": "integer", "minimum": 0, "maximum": vocab_size - 1}
        for alt in _nonempty(props["prompt"])["anyOf"]:
            items = alt.get("items", {})
            if items.get("type") == "integer":
                alt["items"] = token
            elif items.get("type") == "array":
                items.update(items=token, minItems=1)
    if "Message" in schemas:
        schemas["Message"] = _message(schemas["Message"])
    return schema


def _nonempty(prop: dict, arrays: bool = True) -> dict:
    """Strings (and arrays, if ``arrays``) of a field, and strings in its arrays, at least
    one long."""
    for alt in prop.get("anyOf", [prop]):
        key = {"string": "minLength", "array": "minItems" if arrays else None}.get(
            alt.get("type"))
        if key:
            alt[key] = 1
        if alt.get("items", {}).get("type") == "string":
            alt["items"]["minLength"] = 1
    return prop


def _message(msg: dict) -> dict:
    """A chat message as the server takes it (protocol.Message.as_dict): content is required
    except from an assistant that carries tool calls, and only an assistant carries them."""
    props = msg["properties"]
    content = [a for a in props["content"]["anyOf"] if a.get("type") != "null"]
    no_calls = {"anyOf": [{"type": "null"}, {"type": "array", "maxItems": 0}]}
    calls = next(a for a in props["tool_calls"]["anyOf"] if a.get("type") == "array")
    others = {**msg, "title": "OtherMessage", "required": ["role", "content"], "properties": {
        **props, "role": {"enum": [r for r in props["role"]["enum"] if r != "assistant"]},
        "content": {"anyOf": content}, "tool_calls": no_calls}}
    assistant = {**msg, "title": "AssistantMessage", "properties": {
        **props, "role": {"const": "assistant"}},
        "anyOf": [{"required": ["content"], "properties": {"content": {"anyOf": content}}},
                  {"required": ["tool_calls"],
                   "properties": {"tool_calls": {**calls, "minItems": 1}}}]}
    return {"title": "Message", "anyOf": [others, assistant]}
