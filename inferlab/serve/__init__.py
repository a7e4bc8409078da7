"""The lab's engine behind the OpenAI API (FastAPI + uvicorn, as vLLM serves it).

    import inferlab as il, inferlab.serve
    eng = il.Engine()
    srv = inferlab.serve.start(eng, port=0)       # background thread; the kernel stays free
    # any OpenAI client: openai.OpenAI(base_url=srv.url, api_key="none")
    srv.stop()                                     # the engine is idle again, no blocks held

or ``inferlab serve`` from a shell. Modules: ``protocol`` (request bodies), ``errors``
(OpenAI-style error bodies), ``responses`` (bodies, SSE chunks, usage), ``driver`` (the one
thread that steps the engine), ``app`` (the routes), ``server`` (start / stop, safe
defaults), ``record`` (``record_requests=PATH``: accepted requests as a request log),
``metrics`` (GET /metrics: vLLM's Prometheus names, from the engine's step records),
``command`` (the CLI). Importing this package does not import FastAPI or
pydantic; starting a server does.
"""
from __future__ import annotations

from .server import Server, start

__all__ = ["Server", "start"]
