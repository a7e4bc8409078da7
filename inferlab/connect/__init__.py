"""The lab's views on a running vLLM server: the same step and request records our engine
publishes, built from what vLLM tells (DESIGN.md "Beside vLLM").

    from inferlab.connect import VllmServer, VllmConnector
    with VllmServer(model_dir) as srv:           # `inferlab vllm serve` in a notebook
        conn = srv.connector().connect()
        SchedulerTimeline(conn); TokenStream(conn)    # inferlab.widgets
        VllmPrefixCache(conn)                         # inferlab.widgets.vllm_kv
        conn.generate([...], max_tokens=16)

By concern, each a subpackage with one rule (its ``__init__`` says which):
    wire/     formats on the wire: KV event messages in both encodings (``kv_events``), the
              step-report schema shared with the plugin (``step_reports``), SSE (``sse``)
    feeds/    each reads one source (``kv_stream``, ``reports``, ``request_streams``) or puts
              them together (``hash_tree``, ``prefix_tree``, ``assembler``: StepRecords)
    front/    what a notebook holds: ``VllmConnector`` (``connector``), ``VllmServer``
              (``launcher``) and what it needs from this machine (``machine``)
    plugin/   the stat-logger plugin INSIDE vLLM (``stat_logger``; imports vllm: never
              imported here)

Imports go one way: front -> feeds -> wire. This floor imports ``core/`` and ``observe/`` only,
plus pyzmq and msgspec; never vLLM.
"""
from __future__ import annotations

__all__ = ["VllmConnector", "VllmServer", "VllmServerError", "ConnectError", "VllmResult",
           "rank_endpoints"]


def __getattr__(name):
    if name in ("VllmConnector", "ConnectError"):
        from .front import connector
        return getattr(connector, name)
    if name == "VllmServer":
        from .front.launcher import VllmServer
        return VllmServer
    if name == "VllmServerError":
        from .front.machine import VllmServerError
        return VllmServerError
    if name == "VllmResult":
        from .feeds.request_streams import VllmResult
        return VllmResult
    if name == "rank_endpoints":
        from .feeds.kv_stream import rank_endpoints
        return rank_endpoints
    raise AttributeError(f"module 'inferlab.connect' has no attribute {name!r}")
