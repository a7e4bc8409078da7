"""vLLM's KV cache event messages: golden frames from the real server (vLLM 0.32.0 CPU), the
older array-encoded form, malformed input, and the hash tree built from them. No vLLM needed.

Fixtures: tests/fixtures/vllm_kv_frames.json (captured by tests/fixtures/vllm_capture.py:
requests sharing a prefix, long ones that evict on a 40-block cache, a prefix-cache reset,
then the replay socket asked for everything) and vllm_kv_frames_array.json (the same events
re-encoded with earlier releases' array_like Structs by tests/fixtures/vllm_frames_array.py).
"""
import base64
import importlib.util
import json
import pathlib

import msgspec
import pytest

from inferlab.connect.wire.kv_events import (AllBlocksCleared, BadEvent, BlockRemoved, BlockStored,
                                     FrameError, UnknownEvent, decode_frame, short_hash)
from inferlab.connect.feeds.hash_tree import HashTree
from inferlab.connect.feeds.prefix_tree import TreeState

FIX = pathlib.Path(__file__).parent / "fixtures"
GOLDEN = json.loads((FIX / "vllm_kv_frames.json").read_text())
ARRAY = json.loads((FIX / "vllm_kv_frames_array.json").read_text())


def parts(frame):
    return [base64.b64decode(p) for p in frame]


def golden_batches():
    return [decode_frame(parts(f)) for f in GOLDEN["frames"]]


def without_medium(events):
    return [BlockStored(e.hashes, e.parent, e.token_ids, e.block_size) if isinstance(
        e, BlockStored) else BlockRemoved(e.hashes) if isinstance(e, BlockRemoved) else e
        for e in events]


def test_golden_frames_decode_in_map_form():
    batches = golden_batches()
    assert [b.seq for b in batches] == list(range(len(batches)))
    assert all(b.form == "map" and b.topic == b"kv" and b.rank == 0 for b in batches)
    kinds = {type(e) for b in batches for e in b.events}
    assert kinds == {BlockStored, BlockRemoved, AllBlocksCleared}
    stored = [e for b in batches for e in b.events if isinstance(e, BlockStored)]
    assert all(e.block_size == 32 and len(e.token_ids) == 32 * len(e.hashes) for e in stored)
    assert all(isinstance(h, int) for e in stored for h in e.hashes)   # vLLM's int hashes
    assert stored[0].parent is None and stored[1].parent == stored[0].hashes[-2]
    assert stored[0].medium == "GPU"          # "GPU" even on the CPU build (recipes/vllm.md)


def test_the_replayed_frames_equal_the_published_ones():
    replay = GOLDEN["replay"]
    assert base64.b64decode(replay[-1][2]) == (-1).to_bytes(8, "big", signed=True)
    got = [decode_frame(parts(f[1:])) for f in replay[:-1]]           # [b"", topic, seq, data]
    assert [(b.seq, b.events) for b in got] == [(b.seq, b.events) for b in golden_batches()]


@pytest.mark.parametrize("form", ["no-medium", "medium", "0.32-array"])
def test_array_encoded_frames_decode_to_the_same_events(form):
    got = [decode_frame(parts(f)) for f in ARRAY["forms"][form]]
    ref = golden_batches()
    assert all(b.form == "array" for b in got if b.events)
    assert [b.seq for b in got] == [b.seq for b in ref]
    for a, b in zip(got, ref):
        assert without_medium(a.events) == without_medium(b.events)
    if form != "no-medium":
        assert [b.events for b in got] == [b.events for b in ref]


def test_the_array_fixture_is_what_its_builder_makes():
    spec = importlib.util.spec_from_file_location("vllm_frames_array",
                                                  FIX / "vllm_frames_array.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.build(GOLDEN)["forms"] == ARRAY["forms"]


def test_the_hash_tree_of_the_golden_run():
    tree, state = HashTree(1), TreeState(1)
    for k, b in enumerate(golden_batches()):
        for e in b.events:
            state.fold(tree.apply(0, e), k)
    requests = GOLDEN["requests"]
    bs = GOLDEN["block_size"]
    # every full block of prompt + output (all but the last token is computed) was stored once
    expected = set()
    for r in requests:
        seq = r["prompt_token_ids"] + r["token_ids"][:-1]
        expected |= {tuple(seq[:(k + 1) * bs]) for k in range(len(seq) // bs)}
    assert tree.num_stored == len(expected) == len(state.parent)
    # the four prompts share their first two blocks: one chain, then four branches
    assert len(state.children()[0]) >= 2 and len(state.shared()) >= 1
    assert [r["usage"]["prompt_tokens_details"]["cached_tokens"] for r in requests[:4]] == \
        [0, 64, 64, 64]
    # the 40-block cache evicted blocks, and the reset cleared the rest
    assert state.evicted_at and not state.live and tree.num_cached() == 0
    assert short_hash(tree.hash_of[1]) == f"{tree.hash_of[1]:016x}"[:8]


def test_the_tree_finds_a_cached_prefix_as_vllm_does():
    tree = HashTree(1)
    bs = 4
    tree.apply(0, BlockStored((11, 12), None, tuple(range(8)), bs))
    tree.apply(0, BlockStored((13,), 12, (8, 9, 10, 11), bs))
    assert tree.cached_prefix(list(range(12)) + [99], bs) == 12
    assert tree.cached_prefix(list(range(12)), bs) == 8          # the last token is computed
    assert tree.cached_prefix([0, 1, 2, 3, 7, 7, 7, 7, 1], bs) == 4
    tree.apply(0, BlockRemoved((12,)))
    assert tree.cached_prefix(list(range(12)) + [99], bs) == 4
    tree.apply(0, AllBlocksCleared())
    assert tree.cached_prefix(list(range(12)) + [99], bs) == 0


def frame(events, seq=0, ts=1.0, topic=b"kv", rank=0):
    return [topic, seq.to_bytes(8, "big"), msgspec.msgpack.encode([ts, events, rank])]


@pytest.mark.parametrize("bad, says", [
    ([b"kv", b"\x00" * 8], "3 parts"),
    ([b"kv", b"\x00" * 4, b"\x90"], "8 bytes"),
    ([b"kv", b"\x00" * 8, b"\xc1\xc1"], "not msgpack"),
    ([b"kv", b"\x00" * 8, msgspec.msgpack.encode("hello")], "not an event batch"),
    ([b"kv", b"\x00" * 8, msgspec.msgpack.encode(["x", []])], "number ts"),
    ([b"kv", b"\x00" * 8, msgspec.msgpack.encode([1.0, [], -3])], "data_parallel_rank"),
    ("not a list", "3 parts"),
])
def test_malformed_frames_raise_a_clear_frame_error(bad, says):
    with pytest.raises(FrameError, match=says):
        decode_frame(bad)


def test_bad_and_unknown_events_are_named_and_the_rest_kept():
    good = {"type": "BlockStored", "block_hashes": [1], "parent_block_hash": None,
            "token_ids": [1, 2], "block_size": 2}
    b = decode_frame(frame([
        good,
        {"type": "BlockStored", "block_hashes": "nope", "parent_block_hash": None,
         "token_ids": [], "block_size": 2},
        {"type": "BlockStored", "block_hashes": [2], "parent_block_hash": 1,
         "token_ids": [1], "block_size": 0},
        {"type": "BlockMoved", "block_hashes": [1]},
        ["KVCacheSqueezed", 1, 2],
        {"no": "type"},
        42,
        ["BlockRemoved"],
        ["AllBlocksCleared"],
    ]))
    kinds = [type(e).__name__ for e in b.events]
    assert kinds == ["BlockStored", "BadEvent", "BadEvent", "UnknownEvent", "UnknownEvent",
                     "BadEvent", "BadEvent", "BadEvent", "AllBlocksCleared"]
    assert b.form == "mixed"
    assert "block_hashes" in b.events[1].problem and "block_size" in b.events[2].problem
    assert b.events[3] == UnknownEvent("BlockMoved")
    assert isinstance(b.events[6], BadEvent)


def test_bytes_hashes_are_accepted():
    b = decode_frame(frame([{"type": "BlockStored", "block_hashes": [b"\x01" * 32],
                             "parent_block_hash": b"\x02" * 32, "token_ids": [5, 6],
                             "block_size": 2}]))
    e = b.events[0]
    assert e.hashes == (b"\x01" * 32,) and short_hash(e.parent) == "02020202"


def test_random_bytes_never_raise_anything_but_frame_error():
    import random
    rng = random.Random(0)
    for _ in range(2000):
        payload = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
        try:
            decode_frame([b"kv", rng.randrange(2**63).to_bytes(8, "big"), payload])
        except FrameError:
            pass


def test_the_golden_step_reports_decode_with_the_current_schema():
    """The plugin's reports as the real server sent them (same capture) still decode."""
    from inferlab.connect.wire import step_reports
    msgs = [step_reports.decode(base64.b64decode(f[1])) for f in GOLDEN["steps"]]
    info = [m for m in msgs if isinstance(m, step_reports.EngineInfo)]
    reps = [m for m in msgs if isinstance(m, step_reports.StepReport)]
    assert info and info[0].vllm_version == step_reports.PINNED_VLLM and info[0].block_size == 32
    assert info[0].num_blocks == GOLDEN["num_blocks"] and info[0].iteration_details
    assert [m.seq for m in msgs] == sorted(m.seq for m in msgs)
    sent = sum(len(r["token_ids"]) for r in GOLDEN["requests"])
    assert sum(r.new_tokens for r in reps) == sent
    assert sum(r.prompt_cached for r in reps) == sum(
        r["usage"]["prompt_tokens_details"]["cached_tokens"] for r in GOLDEN["requests"])
    assert len([f for r in reps for f in r.finished]) == len(GOLDEN["requests"])
