"""The FastAPI routes: /v1/completions, /v1/chat/completions, /v1/models, /health, /metrics.

Each handler reads its body (at most ``max_body_bytes``: 413 beyond), validates it
(protocol.py), hands the engine inputs to the driver and waits on its asyncio queue, so a
handler never blocks the event loop and never touches the engine. Streaming answers are
server-sent events; a client that goes away mid-answer (mid-stream, or while waiting for a
whole one) has its request aborted, which frees its KV blocks. Every error a client can get
has OpenAI's body ``{"error": {"message", "type", "param", "code"}}``.
"""
from __future__ import annotations

import asyncio
import hmac
import time

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException

from .driver import EngineDriver, Job
from .errors import APIError, engine_error
from .openapi import openapi_document
from .protocol import ChatRequest, CompletionRequest, parse
from .responses import Answer, sse
from .timing import RequestTimes, now

MAX_BODY_BYTES = 1 << 20             # 1 MiB: a long prompt is ~100 KiB


def create_app(driver: EngineDriver, model_name: str, *, api_key: str | None = None,
               max_body_bytes: int = MAX_BODY_BYTES, recorder=None, metrics=None) -> FastAPI:
    """``recorder``: a ``record.RequestRecorder`` that logs each accepted request, or None.
    ``metrics``: a ``metrics.ServerMetrics`` served at GET /metrics (no API key: as vLLM's,
    for a Prometheus scraper; counts and timings only, no prompt or answer text), or None."""
    app = FastAPI(title="inferlab", docs_url=None, redoc_url=None, openapi_url="/openapi.json")
    eng = driver.engine
    created = int(time.time())

    def check_key(request: Request) -> None:
        if api_key is None:
            return
        got = request.headers.get("authorization", "")
        scheme, _, token = got.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(),
                                                                 api_key.encode()):
            raise APIError(401, "missing or wrong API key: send the header "
                           "'Authorization: Bearer <key>'", code="invalid_api_key")

    def check_model(name: str) -> None:
        if name != model_name:
            raise APIError(404, f"the model {name!r} does not exist here; this server serves "
                           f"{model_name!r} (GET /v1/models)", param="model",
                           code="model_not_found")

    v1 = APIRouter(prefix="/v1", dependencies=[Depends(check_key)])

    @v1.get("/models")
    async def models():
        return {"object": "list", "data": [_model_card(model_name, created, eng)]}

    @v1.get("/models/{name:path}")
    async def model(name: str):
        check_model(name)
        return _model_card(model_name, created, eng)

    @v1.post("/completions")
    async def completions(request: Request):
        arrived = now()
        req = parse(CompletionRequest, await _read_body(request, max_body_bytes))
        check_model(req.model)
        return await _answer(request, driver, req, "completion", model_name, recorder, arrived)

    @v1.post("/chat/completions")
    async def chat(request: Request):
        arrived = now()
        req = parse(ChatRequest, await _read_body(request, max_body_bytes))
        check_model(req.model)
        return await _answer(request, driver, req, "chat", model_name, recorder, arrived)

    app.include_router(v1)

    @app.get("/health")
    async def health():
        if not driver.alive:
            raise APIError(503, "the engine thread has stopped", "server_error")
        return {"status": "ok"}

    if metrics is not None:
        @app.get("/metrics", include_in_schema=False)
        def prometheus():                    # a plain def: it runs in FastAPI's thread pool
            return Response(metrics.render(), media_type=metrics.content_type)

    @app.exception_handler(APIError)
    async def api_error(request, exc: APIError):
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(HTTPException)
    async def http_error(request, exc: HTTPException):
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return JSONResponse(APIError(exc.status_code, f"{exc.detail} ({request.method} "
                                     f"{request.url.path})", kind).body(),
                            status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def internal(request, exc: Exception):
        err = APIError(500, f"internal error: {type(exc).__name__}: {exc}", "server_error")
        return JSONResponse(err.body(), status_code=500)

    def openapi() -> dict:                   # request bodies typed from protocol.py's models
        if app.openapi_schema is None:
            app.openapi_schema = openapi_document(app, model_name, eng.vocab_size)
        return app.openapi_schema

    app.openapi = openapi
    return app


def _model_card(name: str, created: int, eng) -> dict:
    return {"id": name, "object": "model", "created": created, "owned_by": "inferlab",
            "max_model_len": eng.max_model_len}


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(int(declared), limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(size, limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(size: int, limit: int) -> APIError:
    return APIError(413, f"the request body has more than {limit} bytes ({size} so far); "
                    "send a shorter prompt", code="request_too_large")


async def _answer(request: Request, driver: EngineDriver, req, kind: str, model_name: str,
                  recorder=None, arrived: float = 0.0):
    if kind == "chat":
        prompts, params = req.engine_inputs(driver.engine.max_model_len, driver.engine.tokenizer)
    else:
        prompts, params = req.engine_inputs(driver.engine.max_model_len)
    times = None if driver.timing is None else RequestTimes(arrived, bool(req.stream))
    job = driver.submit(prompts, params, "messages" if kind == "chat" else "prompt", times)
    streaming = False
    try:
        await job.started()                  # refused input comes back here, as a 4xx
        answer = Answer(kind, model_name, len(prompts), req.n)
        if recorder is not None:             # accepted: validated and in the engine
            recorder.record(arrived, answer.id, kind, req, prompts, params)
        if req.stream:
            streaming = True
            return _Stream(_events(job, answer, req.include_usage, driver.timing), driver, job,
                           media_type="text/event-stream",
                           headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        return JSONResponse(await _whole(request, job, answer))
    finally:
        if not streaming:                    # done, refused, failed, or its client left
            driver.close(job)


async def _whole(request: Request, job: Job, answer: Answer) -> dict:
    """Wait for every choice; if the client disconnects meanwhile, give up (and abort)."""
    async def collect():
        async for index, out in job.outputs():
            answer.add(index, out)

    work = asyncio.ensure_future(collect())
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (work, gone):
            t.cancel()
    if not work.done() or work.cancelled():
        raise APIError(499, "the client closed the connection", code="client_closed")
    work.result()                            # an APIError from the driver, if any
    return answer.body()


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _events(job: Job, answer: Answer, include_usage: bool, timing=None):
    times = job.times
    try:
        async for index, out in job.outputs():
            got = now()
            chunks = answer.chunks(index, out)
            for chunk in chunks:
                yield sse(chunk)             # resumed once the chunk is given to the socket
            if times is not None and chunks:
                times.prompt_tokens = len(out.prompt_token_ids)
                times.chunks.append((job.step, got, now()))
        if include_usage:
            yield sse(answer.usage_chunk())
    except APIError as e:                    # after the 200: the error goes in the stream
        yield sse(e.body())
    except Exception as e:                   # noqa: BLE001
        yield sse(engine_error(e).body())
    yield sse("[DONE]")
    if timing is not None and times is not None:
        timing.finish(times, answer.id, sum(answer.completion_tokens))


class _Stream(StreamingResponse):
    """A streamed answer that aborts its engine requests however the response ends
    (finished, failed, or the client went away and Starlette cancelled it)."""

    def __init__(self, content, driver: EngineDriver, job: Job, **kw):
        super().__init__(content, **kw)
        self._driver, self._job = driver, job

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._driver.close(self._job)
