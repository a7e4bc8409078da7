"""The saved trace format: v1 files keep loading (migrated), round trips, clear errors, and
the schema (not the in-memory dataclasses) deciding what a file holds."""
import dataclasses
import json
import warnings
from pathlib import Path

import msgspec
import pytest

import inferlab as il
from inferlab.core.events import RequestEvent, RequestInfo, ScheduledChunk, StepRecord
from inferlab.errors import TraceFormatError
from inferlab.observe import trace_format
from inferlab.observe.lanes import LaneBuilder
from inferlab.observe.trace import Trace

FIXTURE = Path(__file__).parent / "fixtures" / "trace_v1_release_0.1.0.json"


def names(struct) -> set[str]:
    return {f.name for f in msgspec.structs.fields(struct)}


@pytest.fixture(scope="module")
def v1():
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # a v1 file loads without complaint
        return Trace.load(FIXTURE)


@pytest.fixture(scope="module")
def fresh():
    eng = il.Engine("tiny", num_blocks=16, block_size=4, max_num_seqs=4)
    trace = Trace.record(eng, note="fresh")
    eng.generate(["Hello there", "The cat sat on", [5, 6, 7, 8, 9], [10, 11]],
                 il.SamplingParams(max_tokens=4), use_tqdm=False)
    trace.stop()
    return trace


# --- (a) the release 0.1.0 file --------------------------------------------------------
def test_v1_fixture_loads(v1):
    assert json.loads(FIXTURE.read_text())["version"] == 1
    assert len(v1) == 30 and len(v1.records) == 30
    assert len(v1.requests) == 6 and v1.request_ids == [f"req-{i}" for i in range(6)]
    assert v1.meta["format_migrated_from"] == 1
    assert v1.meta["inferlab_version"] == "0.1.0" and v1.meta["config"]["block_size"] == 4
    assert v1.requests["req-0"] == {"prompt_len": 15, "arrival": 0.00014470399997890127,
                                    "prompt_text": ""}
    assert all(isinstance(r, StepRecord) for r in v1.records)


def test_v1_fixture_migrates_request_table_onto_queued_events(v1):
    queued = [e for r in v1.records for e in r.request_events if e.kind == "queued"]
    assert [e.request_id for e in queued] == [f"req-{i}" for i in range(6)]
    for e in queued:
        assert isinstance(e.info, RequestInfo)
        assert e.info.prompt_len == v1.requests[e.request_id]["prompt_len"]
        assert e.info.arrival == v1.requests[e.request_id]["arrival"]
    others = [e for r in v1.records for e in r.request_events if e.kind != "queued"]
    assert others and all(e.info is None for e in others)
    kinds = {e.kind for e in others}
    assert {"admitted", "preempted", "finished", "aborted"} <= kinds


def test_v1_fixture_replays_into_lanes(v1):
    lb = LaneBuilder(v1.arrivals())
    for rec in v1.records:
        lb.add(rec)
    assert lb.order == v1.request_ids
    kinds = {s.kind for s in lb.all_segments()}
    assert {"queued", "prefill", "decode", "preempted"} <= kinds
    assert sorted(k for _, k in lb.finish.values()) == ["aborted"] + ["finished"] * 5
    assert all(s.t1 >= s.t0 for s in lb.all_segments())
    assert v1.to_chrome_trace()["traceEvents"]


def test_v1_fixture_resaves_as_current_version(v1, tmp_path):
    p = v1.save(tmp_path / "v2.trace.json")
    d = json.loads(Path(p).read_text())
    assert d["format"] == "inferlab-trace" and d["version"] == trace_format.VERSION == 2
    assert "requests" not in d                   # v2: request info lives on queued events
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = Trace.load(p)
    assert back.records == v1.records
    assert back.requests == v1.requests
    assert back.meta == v1.meta


def test_v1_request_without_arrival_or_queued_event_is_kept(tmp_path):
    d = json.loads(FIXTURE.read_text())
    d["requests"]["req-0"]["arrival"] = None
    d["requests"]["ghost"] = {"prompt_len": 3, "arrival": 0.0, "prompt_text": "boo"}
    tr = Trace.from_dict(d)
    info = tr.records[0].request_events[0].info
    assert info.arrival == tr.records[0].t_start          # the step it was queued in
    assert tr.requests["ghost"] == {"prompt_len": 3, "arrival": 0.0, "prompt_text": "boo"}


# --- (b) a fresh recording ---------------------------------------------------------------
def test_fresh_recording_round_trips(fresh, tmp_path):
    assert set(fresh.requests) == {"req-0", "req-1", "req-2", "req-3"}
    assert fresh.requests["req-0"]["prompt_text"] == "Hello there"
    assert fresh.requests["req-2"] == {"prompt_len": 5, "prompt_text": "",
                                       "arrival": fresh.requests["req-2"]["arrival"]}
    p = fresh.save(tmp_path / "fresh.trace.json")
    back = Trace.load(p)
    assert back.records == fresh.records
    assert back.requests == fresh.requests
    assert back.meta == fresh.meta and back.meta["note"] == "fresh"
    assert "format_migrated_from" not in back.meta
    assert back.t0 == fresh.t0 and back.request_ids == fresh.request_ids
    assert back.token_texts() == fresh.token_texts()
    # the dict form and the bytes form are the same file
    assert Trace.from_dict(fresh.to_dict()).records == fresh.records
    assert json.loads(Path(p).read_bytes()) == fresh.to_dict()


def test_queued_event_info_is_written_with_prompt_cut():
    info = RequestInfo(7, 0.25, "y" * 5000)
    rec = StepRecord(0, 1.0, 2.0, 1.0, None, "wall", [ScheduledChunk("a", 0, 7, "prefill", True)],
                     7, 8, [], [RequestEvent("a", "queued", info=info),
                                RequestEvent("a", "admitted")],
                     [], 2, 8, 7, 8, 1, 0, 4, {"a": [0, 1]}, {"a": 7})
    tr = Trace()
    tr(rec)
    d = tr.to_dict()
    events = d["steps"][0]["request_events"]
    assert events[0]["info"] == {"prompt_len": 7, "arrival": 0.25, "prompt_text": "y" * 2000}
    assert events[1]["info"] is None
    back = Trace.from_dict(d)
    assert back.requests == tr.requests == {"a": {"prompt_len": 7, "arrival": 0.25,
                                                  "prompt_text": "y" * 2000}}
    assert back.records[0].request_events[0].info == RequestInfo(7, 0.25, "y" * 2000)


# --- (c) clear errors ----------------------------------------------------------------
def test_newer_version_is_refused_naming_it(fresh, tmp_path):
    d = fresh.to_dict()
    d["version"] = 99
    p = tmp_path / "future.json"
    p.write_text(json.dumps(d))
    with pytest.raises(TraceFormatError, match=r"version 99, newer than this inferlab reads "
                                               r"\(up to 2\)") as e:
        Trace.load(p)
    assert str(p) in str(e.value)


def test_wrong_typed_field_names_its_path(fresh, tmp_path):
    d = fresh.to_dict()
    d["steps"][1]["batch"][0]["num_tokens"] = "four"
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(d))
    with pytest.raises(TraceFormatError) as e:
        Trace.load(p)
    msg = str(e.value)
    assert "$.steps[1].batch[0].num_tokens" in msg and "expected `int`, got `str`" in msg
    with pytest.raises(TraceFormatError, match=r"\$\.steps\[1\]\.batch\[0\]\.num_tokens"):
        Trace.from_dict(d)


@pytest.mark.parametrize("where, value, match", [
    (("steps", 0, "batch", 0, "kind"), "both", r"\$\.steps\[0\]\.batch\[0\]\.kind: invalid enum"),
    (("steps", 0, "batch", 0, "num_tokens"), 0, r"num_tokens: expected `int` >= 1"),
    (("steps", 0, "step"), -1, r"\$\.steps\[0\]\.step: expected `int` >= 0"),
    (("steps", 0, "t_end"), True, r"\$\.steps\[0\]\.t_end: expected `float`, got `bool`"),
    (("steps", 0, "t_end"), float("inf"), r"t_end: expected a finite number"),
    (("steps", 0, "kv_blocks_total"), 1 << 30, r"kv_blocks_total: expected `int` <= 4194304"),
    (("steps", 0, "request_events", 0, "kind"), "teleported", r"request_events\[0\]\.kind"),
    (("steps", 0, "request_events", 0, "info", "arrival"), "soon", r"info\.arrival"),
    (("steps", 0, "kv_events", 0, "block_ids"), [0, 16],
     r"\$\.steps\[0\]\.kv_events\[0\]\.block_ids: block id 16 is outside 0\.\.15"),
    (("steps", 0, "block_tables", "req-0"), [99], r"block_tables\['req-0'\]: block id 99"),
    (("steps", 0, "surprise"), 1, r"\$\.steps\[0\]: object contains unknown field `surprise`"),
    (("meta", "config"), [1], r"\$\.meta\.config: expected `object`"),
    (("meta", "model"), 3, r"\$\.meta\.model: expected `str \| null`"),
])
def test_malformed_fields_name_the_path(fresh, where, value, match):
    d = fresh.to_dict()
    obj = d
    for k in where[:-1]:
        obj = obj[k]
    obj[where[-1]] = value
    with pytest.raises(TraceFormatError, match=match):
        Trace.from_dict(d, source="t.json")


def test_v1_file_errors_name_the_version_and_path():
    d = json.loads(FIXTURE.read_text())
    d["steps"][2]["emitted"][0]["token_id"] = -3
    with pytest.raises(TraceFormatError, match=r"\(trace format v1\) is malformed at "
                                               r"\$\.steps\[2\]\.emitted\[0\]\.token_id"):
        Trace.from_dict(d)


# --- (d) the schema decides what a file holds ----------------------------------------
def test_step_keys_are_the_schema_fields(fresh):
    d = fresh.to_dict()
    assert set(d) == names(trace_format.TraceFile)
    for s in d["steps"]:
        assert set(s) == names(trace_format.Step)
        assert all(set(c) == names(trace_format.Chunk) for c in s["batch"])
        assert all(set(e) == names(trace_format.Token) for e in s["emitted"])
        assert all(set(e) == names(trace_format.ReqEvent) for e in s["request_events"])
        assert all(set(e) == names(trace_format.BlockEvent) for e in s["kv_events"])


def test_new_in_memory_field_does_not_change_the_file(fresh):
    @dataclasses.dataclass(slots=True)
    class Richer(StepRecord):
        gpu_temperature: float = 71.5          # a field only the in-memory record has

    richer = Trace(fresh.meta)
    for r in fresh.records:
        richer(Richer(**{f.name: getattr(r, f.name) for f in dataclasses.fields(r)}))
    assert "gpu_temperature" in {f.name for f in dataclasses.fields(richer.records[0])}
    assert trace_format.encode(richer) == trace_format.encode(fresh)
    assert set(richer.to_dict()["steps"][0]) == names(trace_format.Step)
