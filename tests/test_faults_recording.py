"""Crash-safe recording (issue 15): a trace written to disk as it runs, one step per line.

A recording's file equals the in-memory trace; it reaches the disk at every request's end and
within the flush interval on a quiet engine; a process killed with SIGKILL mid-run leaves a
file that loads up to its last complete step and says what was cut; a file-backed trace keeps
only its last ``keep`` steps in memory; both layouts load through ``Trace.load``.
"""
import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time
import tracemalloc
import warnings

import msgspec
import numpy as np
import pytest

import inferlab as il
from inferlab.errors import TraceFormatError
from inferlab.observe import trace_lines
from inferlab.observe.trace import Trace
from inferlab.sim.workloads import Uniform, run_workload, synthetic
from inferlab.widgets import KVBlockMap, SchedulerTimeline, TokenStream
from inferlab.widgets._base import wait_until

ROOT = pathlib.Path(__file__).resolve().parents[1]
ENGINE = dict(num_blocks=48, block_size=4, max_num_seqs=4, max_num_batched_tokens=24,
              clock="H100")      # a simulated clock: the same steps every run


def workload(n=8, seed=0):
    return synthetic(n, prompt_len=Uniform(8, 30), output_len=Uniform(4, 16), seed=seed)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """One run recorded twice at once: in memory, and to a file keeping 5 steps in memory."""
    path = tmp_path_factory.mktemp("rec") / "run.trace.jsonl"
    eng = il.Engine("tiny", **ENGINE)
    mem = Trace.record(eng)
    with Trace.record(eng, path=path, keep=5) as disk:
        run_workload(eng, workload(), progress=False)
    mem.stop()
    return mem, disk, path


def lines(path):
    return pathlib.Path(path).read_bytes().split(b"\n")


def test_file_backed_trace_equals_the_in_memory_one(recorded):
    mem, disk, path = recorded
    assert len(disk) == len(mem) > 20
    assert disk.records.in_memory == 5                  # the rest is only in the file
    assert disk.records == mem.records and list(disk.records) == mem.records
    for sl in (slice(0, 3), slice(3, len(mem) - 2), slice(-7, None), slice(2, 30, 5)):
        assert disk.records[sl] == mem.records[sl], sl
    assert disk.records[0] == mem.records[0] and disk.records[-1] == mem.records[-1]
    assert disk.requests == mem.requests and disk.t0 == mem.t0
    assert disk.lanes().all_segments() == mem.lanes().all_segments()
    # the file: a header, one line per step, an end line
    ls = lines(path)
    head, end = json.loads(ls[0]), json.loads(ls[-2])
    assert head["format"] == "inferlab-trace" and head["version"] == 2
    assert head["layout"] == "lines" and head["meta"]["model"] == mem.meta["model"]
    assert end["end"]["steps"] == len(mem) and ls[-1] == b"" and len(ls) == len(mem) + 3


def test_load_round_trips_both_layouts(recorded, tmp_path):
    mem, _, path = recorded
    back = Trace.load(path, keep=3)
    assert "truncated" not in back.meta and back.records.in_memory == 3
    assert back.records == mem.records and back.requests == mem.requests
    # told apart by content, not only by name
    plain = tmp_path / "renamed.trace"
    plain.write_bytes(pathlib.Path(path).read_bytes())
    assert Trace.load(plain).records == mem.records
    mem.save(tmp_path / "a.json")
    assert Trace.load(tmp_path / "a.json").records == mem.records
    # a file-backed trace saves to either layout
    again = Trace.load(path)
    again.save(tmp_path / "b.json")
    again.save(tmp_path / "b.jsonl")
    assert Trace.load(tmp_path / "b.json").records == mem.records
    assert Trace.load(tmp_path / "b.jsonl").records == mem.records
    with pytest.raises(il.InferlabError, match="the file this trace reads"):
        again.save(path)


def test_lines_are_the_v2_step_schema(recorded):
    from inferlab.observe.trace_format import Step
    _, _, path = recorded
    for line in lines(path)[1:-2]:
        msgspec.json.decode(line, type=Step)          # strict: unknown keys refused


def test_views_replay_a_file_backed_trace(recorded):
    mem, _, path = recorded
    back = Trace.load(path, keep=4)
    for cls in (SchedulerTimeline, TokenStream, KVBlockMap):
        a, b = cls(mem), cls(back)
        assert a.num_steps == b.num_steps == len(mem) and not b.errors
        a.cursor = b.cursor = 7                       # scrubbing reads old steps back
        assert a.figure().to_dict() == b.figure().to_dict()
    assert np.array_equal(np.frombuffer(a.cell_owner, "<i4"), np.frombuffer(b.cell_owner, "<i4"))


def test_a_step_that_ends_a_request_is_in_the_file_at_once(tmp_path):
    path = tmp_path / "ends.trace.jsonl"
    eng = il.Engine("tiny", **ENGINE)
    seen = []

    def check(rec):        # subscribed after the trace: its line must be on disk already
        if any(e.kind in ("finished", "aborted") for e in rec.request_events):
            seen.append((len(trace), len(lines(path)) - 2))   # minus header and the ""
    trace = Trace.record(eng, path=path, flush_interval=3600)
    eng.subscribe(check)
    rid = eng.add_request("to be aborted", il.SamplingParams(max_tokens=50))
    eng.step()
    eng.abort(rid)
    eng.generate(["one", "two three"], il.SamplingParams(max_tokens=6), use_tqdm=False)
    trace.stop()
    assert len(seen) >= 2 and all(steps == on_disk for steps, on_disk in seen), seen


def test_a_quiet_engine_s_steps_reach_the_file_within_the_interval(tmp_path):
    path = tmp_path / "quiet.trace.jsonl"
    eng = il.Engine("tiny", **ENGINE)
    trace = Trace.record(eng, path=path, flush_interval=0.2)
    eng.add_request("a long one", il.SamplingParams(max_tokens=40))
    for _ in range(3):
        eng.step()                      # no request ends: these lines wait in the buffer
    # the engine is now quiet; the writer's timer flushes them (a count, not a timing)
    assert wait_until(lambda: len(lines(path)) - 2 == 3, timeout=10)
    trace.stop()
    eng.abort_all()


def test_memory_of_a_file_backed_recording_stays_bounded(recorded, tmp_path):
    """20,000 steps into a trace keeping 500: memory after 20,000 is about that after 2,000
    (the sparse index adds 8 bytes per 256 steps). An in-memory trace grows ~4 KB a step."""
    mem, _, _ = recorded
    recs = mem.records
    eng = FakeEngine()
    trace = Trace.record(eng, path=tmp_path / "big.trace.jsonl", keep=500)
    tracemalloc.start()
    try:
        sizes = {}
        for i in range(20_000):
            trace(recs[i % len(recs)])
            if i + 1 in (2_000, 20_000):
                trace.writer.flush()
                sizes[i + 1] = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    trace.stop()
    assert trace.records.in_memory <= 500 + 1
    growth = (sizes[20_000] - sizes[2_000]) / 18_000
    assert growth < 100, f"{growth:.0f} bytes per step"    # bytes, not seconds
    assert len(Trace.load(tmp_path / "big.trace.jsonl", keep=10)) == 20_000


class FakeEngine:
    """Just what Trace.record reads (no model)."""

    class config:                       # noqa: N801 - stands in for an EngineConfig
        block_size = 4
    model_name, clock_name, num_blocks = "fake", "wall", 48

    def subscribe(self, fn):
        return lambda: None


# --- damaged and foreign files ------------------------------------------------------------
def write(path, *ls):
    path.write_bytes(b"".join(ls))
    return path


def test_a_cut_last_line_is_dropped_and_said(recorded, tmp_path):
    mem, _, path = recorded
    ls = [ln + b"\n" for ln in lines(path)[:-2]]             # no end line
    p = write(tmp_path / "cut.trace.jsonl", *ls[:-1], ls[-1][:40])
    with pytest.warns(RuntimeWarning, match=r"last line incomplete \(40 bytes\) dropped"):
        back = Trace.load(p)
    assert len(back) == len(mem) - 1 and back.records == mem.records[:-1]
    assert back.meta["truncated"].startswith("last line incomplete (40 bytes) dropped; no end")
    # whole lines but no end line (killed between two writes): loads all, says so
    p = write(tmp_path / "noend.trace.jsonl", *ls)
    with pytest.warns(RuntimeWarning, match="did not stop cleanly"):
        back = Trace.load(p)
    assert back.records == mem.records and f"{len(mem)} complete steps" in back.meta["truncated"]
    # the last line complete but for its newline: a whole step
    p = write(tmp_path / "nonl.trace.jsonl", *ls[:-1], ls[-1][:-1])
    with pytest.warns(RuntimeWarning):
        assert Trace.load(p).records == mem.records


@pytest.mark.parametrize("damage, match", [
    (lambda ls: [], "is empty"),
    (lambda ls: [ls[0][:30]], "cut short"),
    (lambda ls: [b'{"format": "other"}\n'], "not an inferlab trace"),
    (lambda ls: [ls[0].replace(b'"version":2', b'"version":9')], "version 9, newer"),
    (lambda ls: [ls[0].replace(b'"layout":"lines",', b'"layout":"lines","x":1,')],
     r"line 1, \$: object contains unknown field `x`"),
    (lambda ls: ls[:3] + [b"{oops\n"] + ls[4:], "line 4 is not valid JSON"),
    (lambda ls: ls[:2] + [ls[2].replace(b'"kv_blocks_total":', b'"kv_blocks_total":-')]
     + ls[3:], r"line 3, \$\.kv_blocks_total: expected `int` >= 1"),
    (lambda ls: ls + [ls[1]], "data after its end line"),
    (lambda ls: ls[:2] + ls[-1:], "end line says"),
])
def test_damaged_files_are_refused_with_the_line(recorded, tmp_path, damage, match):
    _, _, path = recorded
    ls = [ln + b"\n" for ln in lines(path)[:-1]]
    p = write(tmp_path / "bad.trace.jsonl", *damage(ls))
    with pytest.raises(TraceFormatError, match=match):
        Trace.load(p)


# --- kill -9 ------------------------------------------------------------------------------
CHILD = textwrap.dedent("""
    import os, sys, time
    import inferlab as il
    from inferlab.observe.trace import Trace
    from inferlab.sim.workloads import Uniform, run_workload, synthetic
    eng = il.Engine("tiny", **{engine!r})
    trace = Trace.record(eng, path=sys.argv[1], flush_interval=0.05)
    if sys.argv[2] == "mid-line":          # die in the middle of writing a line
        n = [0]
        def cut(rec):
            n[0] += 1
            if n[0] == 30:
                trace.writer.flush()
                os.write(trace.writer._fd, b'{{"step":30,"t_start":0.1,"t_e')
                print("cut", flush=True)
                time.sleep(600)
        eng.subscribe(cut)
    wl = synthetic(400, prompt_len=Uniform(8, 30), output_len=Uniform(4, 16), seed=0)
    run_workload(eng, wl, progress=False)
    print("finished", flush=True)
""").format(engine=ENGINE)


@pytest.mark.parametrize("how", ["running", "mid-line"])
def test_a_recording_killed_with_sigkill_loads_to_its_last_step(tmp_path, how):
    path = tmp_path / "killed.trace.jsonl"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    proc = subprocess.Popen([sys.executable, str(script), str(path), how], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if how == "mid-line":
            assert proc.stdout.readline().strip() == "cut", proc.stderr.read()
        else:         # let it get well into the run: 40 steps on disk, then kill it
            assert wait_until(lambda: path.exists() and len(lines(path)) > 41, timeout=300,
                              every=0.05), proc.stderr.read() if proc.poll() is not None else ""
        assert proc.poll() is None, "the child finished before it was killed"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(30)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = Trace.load(path)
    note = trace.meta["truncated"]
    assert any(note in str(w.message) for w in caught)
    assert "did not stop cleanly" in note and f"{len(trace)} complete steps" in note
    if how == "mid-line":
        cut = len(b'{"step":30,"t_start":0.1,"t_e')
        assert len(trace) == 30 and note.startswith(f"last line incomplete ({cut} bytes) dropped")
    assert len(trace) >= 30
    # the steps that loaded are the run's own: the same as the first steps of that run here
    eng = il.Engine("tiny", **ENGINE)
    ref = Trace.record(eng)
    submit(eng)
    while len(ref) < len(trace):
        eng.step()
    ref.stop()
    assert [(r.batch, [e.token_id for e in r.emitted]) for r in trace.records] == \
        [(r.batch, [e.token_id for e in r.emitted]) for r in ref.records]


def submit(eng):
    """The child's workload, submitted as run_workload does (all arrive at once)."""
    wl = synthetic(400, prompt_len=Uniform(8, 30), output_len=Uniform(4, 16), seed=0)
    for r in wl.requests:
        eng.add_request(list(r.prompt_token_ids),
                        il.SamplingParams(max_tokens=r.max_tokens, ignore_eos=True),
                        request_id=r.request_id, arrival_time=eng.now + r.arrival_time)


def test_the_lab_records_each_run_to_a_file(tmp_path):
    from inferlab.widgets import Lab
    path = tmp_path / "lab.trace.jsonl"
    lab = Lab("tiny", workload_kind="random tokens: synthetic", num_requests=6, rate=0.0, num_blocks=64, block_size=4, record_to=path)
    lab.start().join(300)
    assert lab.status.value.startswith("done"), lab.status.value
    assert isinstance(lab.trace.records, trace_lines.StepLog) and lab.trace.writer.closed
    back = Trace.load(path)
    assert "truncated" not in back.meta and back.records == lab.trace.records
    assert all(v.num_steps == len(back) for v in lab.views)
