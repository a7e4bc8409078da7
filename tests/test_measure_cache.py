"""Measure once, read many (lab/measure_cache.py): a chapter's measurement with the same
arguments runs once per INFERLAB_MEASURE_CACHE directory, in any process that has it; unset,
every call measures."""
from __future__ import annotations

import subprocess
import sys

from inferlab.lab import measure_cache

CALLS: list[tuple] = []


@measure_cache.shared
def measure(smoke: bool = False, arms: dict | None = None, engine=None) -> dict:
    CALLS.append((smoke, arms))
    return {"smoke": smoke, "rows": [len(CALLS)]}


def test_unset_every_call_measures(monkeypatch):
    monkeypatch.delenv(measure_cache.ENV, raising=False)
    CALLS.clear()
    assert measure(smoke=True) == {"smoke": True, "rows": [1]}
    assert measure(smoke=True) == {"smoke": True, "rows": [2]}


def test_set_the_same_call_measures_once_and_each_reader_gets_its_own_copy(monkeypatch, tmp_path):
    monkeypatch.setenv(measure_cache.ENV, str(tmp_path))
    CALLS.clear()
    first = measure(smoke=True)
    first["rows"].append("changed by the caller")
    assert measure(True) == measure(smoke=True, arms=None) == {"smoke": True, "rows": [1]}
    assert len(CALLS) == 1
    assert measure(smoke=True, arms={"paged": "contiguous"})["rows"] == [2]   # other arguments
    monkeypatch.setenv("INFERLAB_DTYPE", "bfloat16")                          # other engine
    assert measure(smoke=True)["rows"] == [3]
    assert measure(smoke=True, engine=object())["rows"] == [4]     # no stable text: not kept
    assert measure(smoke=True, engine=object())["rows"] == [5]
    assert len(list(tmp_path.glob("*.pickle"))) == 3


def test_another_process_reads_the_kept_measurement(monkeypatch, tmp_path):
    """What the nbval kernels do: the same call in a new process reads the file."""
    from inferlab.lab.chapters import ch10_multi_gpu as ch     # the cost model only: quick
    monkeypatch.setenv(measure_cache.ENV, str(tmp_path))
    data = ch.measure(smoke=True)
    (kept,) = tmp_path.glob("ch10_multi_gpu-*.pickle")
    kept.write_bytes(__import__("pickle").dumps({**data, "marker": "read, not measured"}))
    code = ("from inferlab.lab.chapters import ch10_multi_gpu as ch;"
            "print(ch.measure(smoke=True).get('marker'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "read, not measured"
