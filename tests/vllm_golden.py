"""A Trace as the vLLM connector records it, built from the golden KV frames of a real vLLM
run (stored, evicted, cleared) plus a connector warning: for the prefix-cache view's browser
tests (test_connect_browser.py, and test_browser.py's JupyterLab). Imported with
``from vllm_golden import golden_trace`` (tests/ is on the path)."""
import base64
import json
import pathlib

from inferlab.connect.feeds.hash_tree import HashTree
from inferlab.connect.wire.kv_events import decode_frame
from inferlab.core.events import StepRecord
from inferlab.observe.trace import Trace

FIX = pathlib.Path(__file__).parent / "fixtures"


def golden_trace() -> Trace:
    frames = json.loads((FIX / "vllm_kv_frames.json").read_text())["frames"]
    tree = HashTree(1)
    trace = Trace({"clock": "wall (vLLM)", "config": {"kv_ids": "vllm-block-hashes",
                                                      "dp_ranks": 1},
                   "vllm_warnings": ["KV events from ipc:///x: 2 batches of KV events lost "
                                     "(seq 3..4) (no replay endpoint was given)"]})
    for k, f in enumerate(frames):
        b = decode_frame([base64.b64decode(p) for p in f])
        kv = [e for ev in b.events for e in tree.apply(0, ev)]
        trace(StepRecord(step=k, t_start=k * 0.1, t_end=k * 0.1 + 0.05, wall_duration=0.05,
                         sim_duration=None, clock="wall (vLLM)", batch=[],
                         num_batched_tokens=0, token_budget=2048, emitted=[],
                         request_events=[], kv_events=kv, kv_blocks_used=3,
                         kv_blocks_total=40, kv_tokens_used=96, kv_slots_allocated=96,
                         num_running=1, num_waiting=0, block_size=32))
    return trace
