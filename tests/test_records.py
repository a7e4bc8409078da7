"""One recorded run per chapter (inferlab.lab.records): a record read back is the measurement
that was written, the report card judged on it says what the record says, the figure drawn
from it is the figure drawn from the measurement, and the committed records agree with
each other and with the report card."""
import math

import numpy as np
import pytest

from inferlab.lab import claims, records
from inferlab.lab.book import chapter_figure, chapter_modules, figure_json


def test_a_record_keeps_types_that_json_loses():
    data = {"t": (1, 2.5, "a"), "arr": np.arange(6, dtype=np.float32).reshape(2, 3),
            3: "int key", (1, "x"): [None, True], "nested": [{"k": (np.float64(0.1),)}],
            "nan": math.inf, "__t": "a key named like the tag"}
    back = records.loads(records.dumps(data))
    assert back["t"] == (1, 2.5, "a") and back[3] == "int key" and back[(1, "x")] == [None, True]
    assert back["arr"].dtype == np.float32 and back["arr"].shape == (2, 3)
    assert np.array_equal(back["arr"], data["arr"])
    assert back["nested"] == [{"k": (0.1,)}] and back["nan"] == math.inf
    assert back["__t"] == "a key named like the tag"
    assert records.dumps(data) == records.dumps(back)      # the same record, the same bytes


def test_a_record_refuses_what_it_cannot_keep():
    with pytest.raises(TypeError, match="plain data only.*object"):
        records.dumps({"x": object()})


def test_a_chapter_recorded_is_drawn_and_judged_without_measuring(tmp_path, monkeypatch):
    """Chapter 10 (the cost model: quick): record, then read it back; its verdicts, its figure
    and its numbers are those of the measurement."""
    from inferlab.lab.chapters import ch10_multi_gpu as ch
    path = records.record("ch10", smoke=True, root=tmp_path)
    rec = records.load("ch10", root=tmp_path)
    assert path.name == "ch10_multi_gpu.json.gz" and rec["smoke"] and rec["cpu"] and rec["date"]
    assert rec["command"] == "inferlab record --id ch10 --smoke"
    assert rec["workload"] == "ch10-smoke"
    fresh = ch.measure(smoke=True)
    assert records.dumps(rec["data"]) == records.dumps(fresh)
    assert figure_json(ch.figure(rec["data"])) == figure_json(ch.figure(fresh))
    for row, c in zip(rec["verdicts"], claims.for_chapter("ch10")):
        assert row["verdict"] == c.assess(rec["claims"]).verdict
    assert rec["numbers"] and all(n["workload"] == "ch10-smoke" and n["quantity"].startswith("10-")
                                  for n in rec["numbers"])
    monkeypatch.setattr(records, "ROOT", tmp_path)
    assert records.recorded() == ["ch10_multi_gpu"]
    drawn = chapter_figure("ch10_multi_gpu")                 # no measure: the record
    assert figure_json(drawn) == figure_json(ch.figure(rec["data"]))


def test_a_missing_record_says_how_to_make_one(tmp_path):
    with pytest.raises(records.NoRecord, match=r"inferlab record --id ch05.*--measure"):
        records.load("ch05", root=tmp_path)
    with pytest.raises(ValueError, match="no chapter 'ch99'"):
        records.path("ch99")


def test_smoke_figures_say_smoke():
    fig = chapter_figure("ch10_multi_gpu", smoke=True)
    assert "smoke run" in fig.layout.title.text


# --- the committed records ------------------------------------------------------------------
COMMITTED = records.recorded()


def test_every_chapter_has_a_full_record():
    assert COMMITTED == chapter_modules(), "run `inferlab record` (every chapter's full run)"
    for name in COMMITTED:
        rec = records.load(name)
        assert not rec["smoke"], f"{name}'s record is a smoke run"


@pytest.mark.parametrize("name", COMMITTED)
def test_a_committed_record_judges_as_it_says(name):
    rec = records.load(name)
    got = [(c.id, c.assess(rec["claims"]).verdict) for c in claims.for_chapter(name)]
    assert got == [(r["id"], r["verdict"]) for r in rec["verdicts"]]


def test_the_report_card_is_the_records_verdicts():
    import json
    card = json.loads((records.ROOT.parent / "claims.json").read_text())
    rows = {r["id"]: r for r in card["claims"]}
    for name in COMMITTED:
        for r in records.load(name)["verdicts"]:
            assert (rows[r["id"]]["verdict"], rows[r["id"]]["measured"]) == \
                (r["verdict"], r["measured"]), r["id"]


def test_one_quantity_one_workload_one_value():
    """Two records may not give one quantity (id) two values for one workload (id)."""
    from inferlab.tools.one_number import conflicts
    assert conflicts() == []
