"""Chrome Trace Event Format export of a trace: opens in https://ui.perfetto.dev.

One thread (track) per request with its queued, prefill, decode and preempted slices and an
instant at its finish; counters for KV usage and batch size at the end of every step.
"""
from __future__ import annotations

import json

from .files import write_file
from .lanes import COMPUTE


def chrome_trace(trace, path=None) -> dict:
    """The Chrome trace of ``trace`` (its records, lanes and meta); written to ``path`` when
    given."""
    t0, us = trace.t0, 1e6
    pid = 1
    lanes = trace.lanes()
    meta = trace.meta
    tid = {rid: i + 1 for i, rid in enumerate(lanes.order)}
    ev = [{"ph": "M", "pid": pid, "name": "process_name",
           "args": {"name": f"inferlab {meta.get('model', '')} "
                            f"({meta.get('clock', 'wall')} clock)"}}]
    for rid, i in tid.items():
        ev.append({"ph": "M", "pid": pid, "tid": i, "name": "thread_name",
                   "args": {"name": rid}})
        ev.append({"ph": "M", "pid": pid, "tid": i, "name": "thread_sort_index",
                   "args": {"sort_index": i}})
    for s in lanes.all_segments():
        ev.append({"ph": "X", "pid": pid, "tid": tid[s.request_id], "name": s.kind,
                   "cat": "compute" if s.kind in COMPUTE else "wait",
                   "ts": (s.t0 - t0) * us, "dur": max(s.t1 - s.t0, 0.0) * us,
                   "args": {"steps": [s.step0, s.step1], "tokens": s.tokens}})
    for rid, (t, kind) in lanes.finish.items():
        ev.append({"ph": "i", "s": "t", "pid": pid, "tid": tid[rid], "name": kind,
                   "ts": (t - t0) * us})
    for r in trace.records:
        ts = (r.t_end - t0) * us
        ev.append({"ph": "C", "pid": pid, "name": "KV usage", "ts": ts,
                   "args": {"blocks_used": r.kv_blocks_used,
                            "tokens_used": r.kv_tokens_used}})
        ev.append({"ph": "C", "pid": pid, "name": "batch size", "ts": ts,
                   "args": {"requests": len(r.batch), "prefill_tokens": r.num_prefill_tokens,
                            "decode_tokens": r.num_decode_tokens}})
    out = {"traceEvents": ev, "displayTimeUnit": "ms",
           "otherData": {k: str(v) for k, v in meta.items() if k != "config"}}
    if path is not None:
        write_file(path, json.dumps(out, separators=(",", ":")).encode("utf-8"),
                   "the Chrome trace")
    return out
