"""Chapter 14's sweep (inferlab/lab/chapters/_ch14_sweep.py): the analyst's question on the
bundled chat traffic, answered from the sweep's own rows, and the claim 14-sweep ("more seats,
more output tokens/s in total") judged on them and falsifiable.

Default tier: the judge and the answer on fixed numbers (a smoke claims run measures no
sweep: like 14-stacks it is judged on chapter 14's record, which test_claims checks). Full
tier (the smoke sweep on SmolLM2 and this machine's wall clock, ~1-2 minutes of the default
tier's budget otherwise): the answer from its own rows, the judge shown failing on it with
the effect taken out (the most seats' numbers replaced by one seat's), and a grid whose two
ends are the same setting (one seat twice) requiring "does not hold here". A busy machine's sweep is "not measurable here" (a visible skip in ``fails``);
the judge's own verdict, before that, is checked too.
"""
from __future__ import annotations

import copy

import pytest
from claim_verdict import fails

from inferlab.lab.chapters import _ch14_sweep as sw
from inferlab.lab.verdicts import FAILS, HOLDS, HOLDS_SMALLER, UNMEASURABLE


COVER = "tests/test_claims_sweep.py::test_the_sweep_judge_on_fixed_numbers"


@pytest.fixture(scope="module")
def smoke_sweep() -> dict:
    return {"sweep": sw.measure(smoke=True)}


def _data(smoke_sweep) -> dict:
    return copy.deepcopy(smoke_sweep)


def _row(point, seats, total, spread, per_user=None, chunked=False):
    return {"point": point, "knobs": sw.point(seats, chunked), "error": None,
            "clock": "wall", "projection": False, "trace_path": None,
            "metrics": {"output_tok_s": total, "output_tok_s_per_user": per_user or total / 6,
                        "ttft_p50_ms": 1.0, "ttft_p99_ms": 2.0, "itl_p50_ms": 1.0,
                        "itl_p99_ms": 2.0, "spread": {"output_tok_s": list(spread),
                                                      "output_tok_s_per_user": None}}}


def _sweep(rows, warning=None, repeats=2):
    return {"sweep": {"rows": rows, "meta": {"repeats": repeats, "warning": warning,
                                             "workload": "chat requests", "label": "wall"},
                      "sizes": {"num_requests": 6}, "floor": sw.FLOOR}}


@pytest.mark.full(COVER)
def test_the_smoke_sweep_answers_the_question_from_its_own_rows(smoke_sweep):
    d = _data(smoke_sweep)["sweep"]
    rows = d["rows"]
    assert [r["knobs"] for r in rows] == sw.GRID[True] and all(r["error"] is None for r in rows)
    assert d["meta"]["repeats"] == 2 and d["meta"]["clock"] == "wall"
    a = sw.answer(d)
    assert a["best"] is None or a["best"] in a["meets"]
    text = sw.answer_text(d)
    assert f"at least {sw.FLOOR:g} output tok/s" in text and "max_num_seqs" in text
    shown = f"{a['worst']['metrics']['output_tok_s']:.1f} output tok/s"
    assert shown in text                 # the numbers printed are the rows'
    fig = sw.figure(d)
    assert len(fig.data[0].x) == len(rows) and len(fig.data[1].x) >= 1      # the frontier
    # the objective moves the answer: a floor above every point leaves none meeting it
    top = max(r["metrics"]["output_tok_s_per_user"] for r in rows)
    assert sw.answer(d, floor=top * 2)["best"] is None
    assert "No point gives each user" in sw.answer_text(d, floor=top * 2)


@pytest.mark.full(COVER)
def test_the_sweep_judge_without_more_seats_in_the_numbers(smoke_sweep):
    d = _data(smoke_sweep)
    low, high = sw.arms(d["sweep"]["rows"])
    assert low["knobs"]["max_num_seqs"] == 1 and high["knobs"]["max_num_seqs"] == 8
    high["metrics"] = copy.deepcopy(low["metrics"])      # 8 seats measured as 1
    assert sw.judge_sweep(d).verdict == FAILS            # the judge itself, busy or not
    fails("14-sweep", d)


def test_the_sweep_judge_on_fixed_numbers():
    apart = _sweep([_row(0, 1, 20.0, (19, 21)), _row(1, 8, 50.0, (45, 55)),
                    _row(2, 8, 30.0, (28, 32), chunked=True)])
    v = sw.judge_sweep(apart)
    assert v.verdict == HOLDS and v.measured == "2.50x", v
    assert "max_num_seqs 8 vs 1: 50.0 vs 20.0 output tok/s" in v.reason
    small = _sweep([_row(0, 1, 20.0, (19, 21)), _row(1, 8, 26.0, (25, 27))])
    assert sw.judge_sweep(small).verdict == HOLDS_SMALLER
    overlap = _sweep([_row(0, 1, 20.0, (15, 30)), _row(1, 8, 50.0, (25, 55))])
    assert sw.judge_sweep(overlap).verdict == FAILS             # the spread explains it
    assert sw.judge_sweep(_sweep(apart["sweep"]["rows"], repeats=1)).verdict == FAILS
    noise = _sweep([_row(0, 1, 20.0, (19, 20)), _row(1, 8, 22.0, (21, 23))])
    assert sw.judge_sweep(noise).verdict == FAILS               # 1.1x: the wall clock's noise
    same = _sweep([_row(0, 1, 20.0, (19, 21)), _row(1, 1, 20.5, (19, 22))])
    assert sw.arms(same["sweep"]["rows"]) is not None           # one setting twice: compared
    assert sw.judge_sweep(same).verdict == FAILS
    assert sw.judge_sweep(_sweep([_row(0, 8, 20.0, (19, 21))])).verdict == FAILS
    assert sw.judge_sweep({}).verdict == UNMEASURABLE           # a record without a sweep
    # the objective: the most in total among the points meeting the floor (per user: 3.3,
    # 8.3 and 5.0 tok/s)
    rows = apart["sweep"]["rows"]
    assert [r["point"] for r in sw.answer(apart["sweep"], floor=5.0)["meets"]] == [1, 2]
    assert sw.answer(apart["sweep"], floor=5.0)["best"]["point"] == 1
    assert sw.answer(apart["sweep"], floor=9.0)["best"] is None
    assert sw.answer(apart["sweep"])["worst"]["point"] == 0
    assert "Answer: max_num_seqs 8, whole prompts" in sw.answer_text(apart["sweep"], floor=5.0)
    # the chunking knob's effect is read with the seats the same
    effects = dict((k, r) for k, r, _, _ in sw.knob_effects(rows))
    assert effects == {"max_num_seqs": 2.5, "enable_chunked_prefill": pytest.approx(50 / 30)}


@pytest.mark.full(COVER)
def test_one_seat_twice_serves_no_more():
    one = sw.point(1, False)
    d = sw.measure(smoke=True, grid=[one, one])
    assert [r["knobs"] for r in d["rows"]] == [one, one]
    assert sw.judge_sweep({"sweep": d}).verdict == FAILS
    fails("14-sweep", {"sweep": d})
