"""Wire formats: what vLLM and inferlab's plugin send, as bytes, read into plain records.

    kv_events      one ZMQ multipart KV-event message -> ``KVBatch`` (both encodings: map, array)
    step_reports   the per-step report schema (msgspec) shared with the plugin inside vLLM
    sse            /v1/completions streamed as Server-Sent Events; small JSON calls

Its one rule: nothing here imports any other part of ``inferlab.connect`` (only the error
types), so both the lab and the plugin inside vLLM's venv can read the formats.
"""
