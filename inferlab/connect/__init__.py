"""The lab's views on a running vLLM server: the same step and request records our engine
publishes, built from what vLLM tells (DESIGN.md "Beside vLLM").

    from inferlab.connect import VllmServer, VllmConnector
    with VllmServer(model_dir) as srv:           # `inferlab vllm serve` in a notebook
        conn = srv.connector().connect()
        SchedulerTimeline(conn); TokenStream(conn)    # inferlab.widgets
        VllmPrefixCache(conn)                         # inferlab.widgets.vllm_kv
        conn.generate([...], max_tokens=16)

Modules, one concept each:
    server       start/stop ``vllm serve`` from vLLM's venv, KV events + step reports on
    vllm         VllmConnector: the engine-like surface, the socket pump, requests
    assembler    StepRecords from step reports, KV batches and token arrivals
    kv_stream    KV event subscription: sequence gaps, replay, several DP ranks
    reports      step-report subscription (checked, gaps named); cache shape from /metrics
    frames       one KV event message decoded (map and array forms)
    prefix_tree  vLLM's prefix cache as a tree of block hashes (its KVEvent convention)
    steps        the per-step report schema (shared with the plugin)
    streams      our requests: token streams, arrival times, results
    sse          /v1/completions streaming over plain http.client
    vllm_plugin  the stat-logger plugin INSIDE vLLM (imports vllm: never imported here)

This floor imports ``core/`` and ``observe/`` only, plus pyzmq and msgspec; never vLLM.
"""
from __future__ import annotations

__all__ = ["VllmConnector", "VllmServer", "VllmServerError", "ConnectError", "VllmResult",
           "rank_endpoints"]


def __getattr__(name):
    if name in ("VllmConnector", "ConnectError"):
        from . import vllm
        return getattr(vllm, name)
    if name in ("VllmServer", "VllmServerError"):
        from . import server
        return getattr(server, name)
    if name == "VllmResult":
        from .streams import VllmResult
        return VllmResult
    if name == "rank_endpoints":
        from .kv_stream import rank_endpoints
        return rank_endpoints
    raise AttributeError(f"module 'inferlab.connect' has no attribute {name!r}")
