"""Fuzzing trace loading: any JSON either loads into a usable Trace or raises TraceFormatError."""
import copy
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import inferlab as il
from inferlab.errors import TraceFormatError
from inferlab.observe import trace_format, trace_read
from inferlab.observe.trace import Trace

FIXTURES = Path(__file__).parent / "fixtures"

JSON = st.recursive(st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats(allow_nan=False)
                    | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)


@pytest.fixture(scope="module")
def good():
    eng = il.Engine("tiny", num_blocks=16, block_size=4, max_num_seqs=2)
    tr = Trace.record(eng)
    eng.generate([[5, 6, 7, 8, 9], [10, 11]], il.SamplingParams(max_tokens=4), use_tqdm=False)
    tr.stop()
    return json.loads(json.dumps(tr.to_dict()))


@pytest.fixture(scope="module")
def good_v1():
    """The release 0.1.0 file: mutated v1 files go through the migration instead."""
    with open(FIXTURES / "trace_v1_release_0.1.0.json", encoding="utf-8") as f:
        return json.load(f)


def _paths(obj, prefix=()):
    """Every (path) into a nested JSON value."""
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


def _set(obj, path, value):
    for p in path[:-1]:
        obj = obj[p]
    obj[path[-1]] = value


def must_load_or_refuse(d):
    blob = json.dumps(d).encode()
    try:
        tr = Trace.from_dict(d)
    except TraceFormatError:
        with pytest.raises(TraceFormatError):       # read from bytes, it is refused too
            trace_read.from_file(blob)
        return
    if "Infinity" not in blob.decode():
        trace_read.from_file(blob)
    # whatever loads must be usable: exported and replayed without a crash
    tr.to_chrome_trace()
    from inferlab.widgets import KVBlockMap, SchedulerTimeline
    SchedulerTimeline(tr)
    KVBlockMap(tr)


def _mutate(good, data):
    d = copy.deepcopy(good)
    paths = [p for p in _paths(d) if p]
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(paths))
        try:
            _set(d, path, data.draw(JSON))
        except (KeyError, IndexError, TypeError):
            pass          # an earlier mutation replaced a parent of this path
    return d


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_trace_loads_or_raises_trace_format_error(good, data):
    must_load_or_refuse(_mutate(good, data))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_v1_trace_loads_or_raises_trace_format_error(good_v1, data):
    must_load_or_refuse(_mutate(good_v1, data))


@settings(max_examples=100, deadline=None)
@given(JSON)
def test_arbitrary_json_is_refused_cleanly(value):
    with pytest.raises(TraceFormatError):
        Trace.from_dict(value)


def test_garbage_files(tmp_path):
    for i, blob in enumerate([b"", b"\xff\xfe\x00", b"{\"format\": 1", b"[1, 2, 3]",
                              b"\x80\x04\x95pickle"]):
        p = tmp_path / f"t{i}.json"
        p.write_bytes(blob)
        with pytest.raises(TraceFormatError):
            Trace.load(p)
