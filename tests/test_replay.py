"""INFERLAB_REPLAY=1: the tour and the chapters replay their recorded runs with no engine at all
(inferlab/lab/replay.py, replay_tour.py), and say what replays: the CPU, its flags and the date
from the record's own meta."""
from __future__ import annotations

import json
import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

import inferlab.engine
from inferlab.lab import record_file, records, replay, replay_tour

ROOT = pathlib.Path(__file__).resolve().parents[1]

# the first cell of a replayed notebook: building an engine (loading weights, any forward
# pass) fails the cell, and with it the test
REFUSE_ENGINE = """\
import inferlab.engine
def _refuse(*args, **kwargs):
    raise RuntimeError("an engine was built while replaying")
inferlab.engine.Engine.__init__ = _refuse
"""
# the last cell: what the tour's views hold
VIEWS_HOLD = """\
import json
print("VIEWS " + json.dumps({
    "engine": type(eng).__name__, "stream": stream.num_steps, "timeline": timeline.num_steps,
    "kv": kv.num_steps, "comparison": {k: len(t.records) for k, t in cmp.traces.items()},
    "lab_runs": len(lab.runs), "lab_views": [v.num_steps for v in lab.views]}))
"""


def _run(nb, monkeypatch, smoke: str = "1"):
    monkeypatch.setenv(replay.ENV, "1")            # the kernel inherits this environment
    monkeypatch.setenv("INFERLAB_SMOKE", smoke)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    nb.cells.insert(0, nbformat.v4.new_code_cell(REFUSE_ENGINE))
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code), "a cell did not run"
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    return "".join(o.get("text", "") for c in code for o in c.outputs
                   if o.output_type == "stream")


def test_the_tour_replays_its_recorded_run_with_no_engine(monkeypatch):
    """The tour, executed with INFERLAB_REPLAY=1 at Binder's smoke size and with Engine made
    to raise: every cell runs, the banner names the record's CPU, flags and date, and each
    view holds the recorded steps (its scrubber has a run to move through)."""
    rec = replay_tour.load()
    nb = nbformat.read(ROOT / "notebooks" / "00_tour.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(VIEWS_HOLD))
    text = _run(nb, monkeypatch)
    assert f"replaying a run recorded on {replay.where(rec)}" in text
    assert "flags" not in rec or all(f in text for f in rec["flags"])
    assert text.count("replaying a run recorded on") == 1
    held = json.loads(text.split("VIEWS ", 1)[1].splitlines()[0])
    calls = rec["data"]
    assert held["engine"] == "ReplayEngine"
    assert held["stream"] == len(calls["generate"][0]["trace"].records) > 0
    assert held["timeline"] == held["kv"] == len(calls["generate"][1]["trace"].records) > 0
    assert held["comparison"] == {label: len(t.records) for label, t in
                                  zip(calls["comparison"][0]["labels"],
                                      calls["comparison"][0]["traces"])}
    assert held["lab_runs"] == len(calls["lab"]) == 2
    assert all(n == len(calls["lab"][-1]["trace"].records) for n in held["lab_views"])
    # the tour prints the recorded answer and its recorded times
    assert calls["generate"][0]["outputs"][0]["text"].strip()[:40] in text


def test_the_tour_record_is_the_tour_at_full_size():
    """tour.json.gz is what `inferlab record --id tour` wrote: its meta, the tour's calls
    in the order the notebook makes them, each with its trace."""
    rec = replay_tour.load()
    assert rec["command"] == replay_tour.COMMAND and not rec["smoke"]
    assert {"date", "cpu", "flags", "cores", "load"} <= set(rec)
    assert [len(rec["data"][k]) for k in replay_tour.KINDS] == [2, 1, 2]
    lab_blocks = [c["row"]["block_size"] for c in rec["data"]["lab"]]
    assert lab_blocks[0] == 16 and lab_blocks[1] > 16             # the tour's what-if


def test_a_chapter_replays_its_record_whatever_the_arguments(monkeypatch, capsys):
    """With the flag, ch05's measure (any smoke size) is its record's measurement, no engine
    built, and the banner from the record's meta is printed once."""
    def refuse(*args, **kwargs):
        raise RuntimeError("an engine was built while replaying")
    monkeypatch.setattr(inferlab.engine.Engine, "__init__", refuse)
    monkeypatch.setattr(replay, "_told", set())
    monkeypatch.setenv(replay.ENV, "1")
    from inferlab.lab.chapters import ch05_batching as ch
    rec = records.load("ch05")
    for kwargs in ({"smoke": True}, {}, {"smoke": False}):
        assert record_file.json_text(ch.measure(**kwargs)) == record_file.json_text(rec["data"])
    out = capsys.readouterr().out
    assert out.count("replaying a run recorded on") == 1
    assert f"replaying a run recorded on {replay.where(rec)}" in out
    assert rec["date"][:10] in out and rec["cpu"] in out


def test_the_python_switch_and_the_default(monkeypatch):
    """Off by default; ``replay.enable()`` turns it on in Python, ``enable(False)`` off
    whatever the environment says, ``enable(None)`` hands it back to the environment."""
    monkeypatch.delenv(replay.ENV, raising=False)
    monkeypatch.setattr(replay, "_switch", None)
    assert replay.mode() is None and not replay.enabled()
    replay.enable()
    assert replay.enabled()
    monkeypatch.setenv(replay.ENV, "1")
    replay.enable(False)
    assert not replay.enabled()
    replay.enable(None)
    assert replay.enabled()
    monkeypatch.setenv(replay.ENV, "record")
    assert replay.mode() == "record" and not replay.enabled()
    monkeypatch.setenv(replay.ENV, "0")
    assert replay.mode() is None


def test_a_chapter_without_a_record_says_how_to_make_one(tmp_path):
    with pytest.raises(FileNotFoundError, match="inferlab record --id ch05"):
        replay.record_path("ch05_batching", root=tmp_path)
