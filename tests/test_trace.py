"""Trace: recording, versioned JSON round-trip, malformed/newer files, Chrome trace shape."""
import json

import pytest

import inferlab as il
from inferlab.errors import TraceFormatError
from inferlab.observe.trace import VERSION, LaneBuilder, Trace


@pytest.fixture(scope="module")
def run():
    from inferlab.sim.workloads import run_workload, synthetic
    eng = il.Engine("tiny", num_blocks=24, block_size=4, max_num_seqs=4,
                    max_num_batched_tokens=16)
    trace = Trace.record(eng, note="test")
    run_workload(eng, synthetic(6, prompt_len=20, output_len=6, seed=1), progress=False)
    trace.stop()
    return eng, trace


def test_records_every_step_with_metadata(run):
    eng, trace = run
    assert len(trace) == eng.stats().num_steps
    assert [r.step for r in trace.records] == list(range(len(trace)))
    assert trace.meta["model"] == eng.model_name and trace.meta["clock"] == "wall"
    assert trace.meta["config"]["block_size"] == 4 and trace.meta["note"] == "test"
    assert trace.meta["inferlab_version"] == il.__version__
    assert set(trace.requests) == {f"r{i}" for i in range(6)}
    assert trace.requests["r0"]["prompt_len"] == 20
    assert sum(len(v) for v in trace.token_texts().values()) == 36


def test_requests_come_from_queued_events_not_the_engine():
    """A Trace subscribed by hand (it never sees the engine) still learns each request from
    its "queued" event; Trace.record reads only the engine's public attributes."""
    import dataclasses
    from types import SimpleNamespace

    from inferlab.core.events import RequestEvent, RequestInfo, StepRecord

    @dataclasses.dataclass
    class Cfg:
        block_size: int = 4
    subs = []
    eng = SimpleNamespace(config=Cfg(), model_name="m", clock_name="wall", num_blocks=8,
                          subscribe=lambda fn: subs.append(fn) or (lambda: subs.remove(fn)))
    trace = Trace.record(eng)
    assert subs == [trace] and trace.meta["num_blocks"] == 8
    info = RequestInfo(3, 0.5, "x" * 3000)
    subs[0](StepRecord(0, 1.0, 2.0, 1.0, None, "wall", [], 0, 8,
                       [], [RequestEvent("a", "queued", info=info)], [], 0, 8, 0, 0, 0, 1, 4))
    trace.stop()
    assert subs == []
    assert trace.requests == {"a": {"prompt_len": 3, "arrival": 0.5, "prompt_text": "x" * 2000}}
    assert trace.t0 == 0.5


def test_stop_unsubscribes(run):
    eng, trace = run
    n = len(trace)
    eng.generate(["hi"], il.SamplingParams(max_tokens=2), use_tqdm=False)
    assert len(trace) == n


def test_lanes_cover_each_request(run):
    _, trace = run
    lb = trace.lanes()
    assert lb.order == [f"r{i}" for i in range(6)]
    kinds = {s.kind for s in lb.all_segments()}
    assert {"prefill", "decode", "queued"} <= kinds
    assert all(k == "finished" for _, k in lb.finish.values())
    for s in lb.all_segments():
        assert s.t1 >= s.t0
    # chunked prefill with a 16-token budget: 20-token prompts take more than one chunk
    r0 = [s for s in lb.segments if s.request_id == "r0" and s.kind == "prefill"]
    assert len(r0) >= 2 and sum(s.tokens for s in r0) == 20


def test_preempted_lane():
    from inferlab.core.events import RequestEvent, ScheduledChunk, StepRecord

    def rec(k, batch, events):
        return StepRecord(k, k * 1.0, k + 1.0, 1.0, None, "wall", batch, 1, 8, [], events, [],
                          1, 4, 1, 4, 1, 0, 4)
    lb = LaneBuilder()
    lb.add(rec(0, [ScheduledChunk("a", 0, 4, "prefill", True)], [RequestEvent("a", "queued")]))
    lb.add(rec(1, [ScheduledChunk("a", 4, 1, "decode", True)], []))
    lb.add(rec(2, [], [RequestEvent("a", "preempted")]))
    lb.add(rec(3, [ScheduledChunk("a", 0, 5, "prefill", True)], []))
    lb.add(rec(4, [ScheduledChunk("a", 5, 1, "decode", True)], [RequestEvent("a", "finished")]))
    kinds = [(s.kind, s.t0, s.t1) for s in lb.all_segments()]
    assert kinds == [("queued", 0.0, 0.0), ("prefill", 0.0, 1.0), ("decode", 1.0, 2.0),
                     ("preempted", 2.0, 3.0), ("prefill", 3.0, 4.0), ("decode", 4.0, 5.0)]
    assert lb.finish["a"] == (5.0, "finished")


def test_save_load_round_trip(run, tmp_path):
    _, trace = run
    p = trace.save(tmp_path / "run.trace.json")
    back = Trace.load(p)
    assert back.records == trace.records
    assert back.meta == json.loads(json.dumps(trace.meta)) and back.requests == trace.requests
    d = json.load(open(p))
    assert d["format"] == "inferlab-trace" and d["version"] == VERSION


@pytest.mark.parametrize("content, match", [
    ("{not json", "not valid JSON"),
    ('{"traceEvents": []}', "not an inferlab trace"),
    ('[1, 2]', "not an inferlab trace"),
    ('{"format": "inferlab-trace", "version": 99, "steps": []}', "newer than this inferlab"),
    ('{"format": "inferlab-trace", "version": "1", "steps": []}', "integer"),
    ('{"format": "inferlab-trace", "version": 1, "steps": {}}',
     r"at \$\.steps: expected `array`, got `object`"),
    ('{"format": "inferlab-trace", "version": 2, "meta": {}, "steps": {}}',
     r"at \$\.steps: expected `array`, got `object`"),
    ('{"format": "inferlab-trace", "version": 1, "steps": [{"step": 0}]}',
     r"at \$\.steps\[0\]: object missing required field"),
    ('{"format": "inferlab-trace", "version": 0, "steps": []}', "invalid trace format version"),
])
def test_bad_files_raise_clear_errors(tmp_path, content, match):
    p = tmp_path / "bad.json"
    p.write_text(content)
    with pytest.raises(TraceFormatError, match=match):
        Trace.load(p)


def test_trace_format_error_is_value_error():
    assert issubclass(TraceFormatError, ValueError)


def test_chrome_trace_shape(run, tmp_path):
    _, trace = run
    out = trace.to_chrome_trace(tmp_path / "c.json")
    assert json.load(open(tmp_path / "c.json")) == out
    ev = out["traceEvents"]
    names = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {f"r{i}" for i in range(6)}
    tids = {e["tid"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    slices = [e for e in ev if e["ph"] == "X"]
    assert {e["name"] for e in slices} >= {"queued", "prefill", "decode"}
    for e in slices:
        assert e["tid"] in tids and e["dur"] >= 0 and e["ts"] >= 0
        assert set(e) >= {"name", "ph", "ts", "dur", "pid", "tid", "args"}
    counters = [e for e in ev if e["ph"] == "C"]
    assert {e["name"] for e in counters} == {"KV usage", "batch size"}
    assert len(counters) == 2 * len(trace)
    assert all(isinstance(v, (int, float)) for e in counters for v in e["args"].values())
    assert sum(1 for e in ev if e["ph"] == "i" and e["name"] == "finished") == 6


def test_recording_overhead_small():
    from inferlab.bench.engine import bench_trace as benchmark
    r = benchmark("tiny", num_requests=4, max_tokens=8, repeats=2)
    assert r["recording_pct_of_step"] < 5.0, r
