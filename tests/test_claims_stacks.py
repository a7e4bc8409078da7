"""Chapter 14's claim, "the same model feels different on different serving stacks", can fail.

The claim is judged on a measurement of two servers on the same weights by one client (vLLM's
``vllm bench serve``, A B A B): the same greedy tokens, and a difference of at least 1.2x
that is at least twice the run-to-run spread. The run ``inferlab bench serve`` recorded
(docs/results/serve-xeon.json: inferlab vs vLLM) holds; a smoke run judges the claim's last
full run (docs/results/stacks.json) where there is one, and says where it was recorded. With the effect removed, inferlab against
inferlab (two servers of the same engine, the same client and protocol, the smallest
workload: 4 prompts of 32 tokens -> 8, all at once, 3 repeats each), it does not hold; on a
machine that other processes kept busy during the runs it is not measurable. The judge's rules
are also checked on made-up numbers. Nothing here asserts a duration: the
verdicts compare the two stacks' numbers with each other and with their own spread.
"""
from __future__ import annotations

import copy

import pytest

from inferlab.lab import claims
from inferlab.lab.stack_bench import AGAIN
from inferlab.lab.chapters import _ch14_stacks as stacks
from inferlab.lab.verdicts import FAILS, HOLDS, HOLDS_SMALLER, MEASURED, UNMEASURABLE


def assess(data: dict):
    claim = next(c for c in claims.CLAIMS if c.id == "14-stacks")
    assert claim.kind == MEASURED and claim.chapter == "ch14_own_traffic"
    return claim.assess(data)


def test_the_recorded_bench_run_holds():
    d = stacks.recorded(stacks.RECORDED_BENCH)
    assert d["source"] == "recorded" and d["recorded"]["command"].startswith(
        "inferlab bench serve")
    v = assess(d)
    assert v.verdict == HOLDS, v
    assert "agree word for word on 4 of 4 prompts" in v.reason
    assert "inferlab bench serve" in v.reason and "2 repeats" in v.reason
    assert v.reason.count("recorded on Intel(R) Xeon(R) Processor, 2026-12-02, not measured") == 1
    assert [p[0] for p in v.points] == ["inferlab", "vLLM"]
    assert v.measured.endswith("p50 (recorded)")


def test_a_smoke_run_judges_the_last_full_run_and_says_so():
    """What the smoke run judges is what the last full run recorded (docs/results/stacks.json),
    else inferlab bench serve's run; either way the reason names the CPU and date."""
    from inferlab.lab.stack_bench import REPO
    want = stacks.RECORDED if (REPO / stacks.RECORDED).exists() else stacks.RECORDED_BENCH
    d = stacks.recorded()
    assert d["path"] == want
    v = assess(d)
    assert f"recorded on {d['recorded']['cpu']}, {d['recorded']['date'][:10]}" in v.reason


def _made_up(first: dict, second: dict, agree: int = 2, n: int = 3) -> dict:
    """A measurement with one rate: each stack's medians (key -> value), ranges of +-2%."""
    s = lambda m: {k: {"median": v, "lo": v * 0.98, "hi": v * 1.02, "n": n}
                   for k, v in m.items()}
    res = copy.deepcopy(stacks.recorded(stacks.RECORDED_BENCH)["result"])
    res["summary"] = {"inf": {"inferlab": s(first), "vLLM": s(second)}}
    res["greedy"] = {**res["greedy"], "agree": agree, "of": 2}
    res["warning"] = None
    return {"source": "measured now", "result": res}


BASE = {"p50_ttft_ms": 500.0, "p50_tpot_ms": 100.0, "p50_itl_ms": 100.0,
        "output_throughput": 200.0}


def test_the_judge_on_made_up_numbers():
    assert assess(_made_up(BASE, {**BASE, "p50_ttft_ms": 2000.0})).verdict == HOLDS
    assert assess(_made_up(BASE, {**BASE, "p50_tpot_ms": 130.0})).verdict == HOLDS_SMALLER
    # the same numbers: no difference at all
    v = assess(_made_up(BASE, dict(BASE)))
    assert v.verdict == FAILS and "0 of 4 metric-rate pairs" in v.reason
    # 10% apart, beyond the spread: not a difference a user notices
    assert assess(_made_up(BASE, {k: v * 1.1 for k, v in BASE.items()})).verdict == FAILS
    # different greedy tokens: not the same model's output, however the times differ
    v = assess(_made_up(BASE, {**BASE, "p50_ttft_ms": 2000.0}, agree=1))
    assert v.verdict == FAILS and "1 of 2 prompts" in v.reason
    # one repeat: no spread to judge against
    assert assess(_made_up(BASE, {**BASE, "p50_ttft_ms": 2000.0}, n=1)).verdict == FAILS


def test_a_wide_spread_hides_a_difference():
    d = _made_up(BASE, {**BASE, "p50_ttft_ms": 650.0})          # 1.3x apart ...
    d["result"]["summary"]["inf"]["vLLM"]["p50_ttft_ms"].update(lo=300.0, hi=1000.0)
    v = assess(d)                                                 # ... within a 700 ms range
    assert v.verdict == FAILS and "0.2x the run-to-run spread" in v.reason


def test_a_busy_machine_is_not_judged_on_its_times():
    d = _made_up(BASE, {**BASE, "p50_ttft_ms": 2000.0})          # a clear difference ...
    d["result"]["warning"] = "WARNING: busy machine (other processes kept 1.4 of our 2 CPUs)"
    v = assess(d)                                                 # ... on a busy machine
    assert v.verdict == UNMEASURABLE and "cannot tell the stacks apart" in v.reason, v
    assert v.warning == d["result"]["warning"]
    # different greedy tokens are not a matter of time: still "does not hold"
    assert assess({**d, "result": {**d["result"], "greedy": {
        **d["result"]["greedy"], "agree": 1}}}).verdict == FAILS


def test_no_vllm_and_no_recorded_run_is_not_measurable(tmp_path):
    d = stacks.recorded(str(tmp_path / "none.json"))
    assert assess(d).verdict == UNMEASURABLE


@pytest.mark.full("tests/test_claims_stacks.py::test_the_judge_on_made_up_numbers")
@pytest.mark.vllm
@pytest.mark.slow
def test_the_same_stack_twice_does_not_hold():
    """inferlab against inferlab, measured as the claim measures inferlab against vLLM."""
    from inferlab.connect.front.machine import VllmServerError, vllm_python
    from inferlab.lab.serving_stacks import group_alive
    try:
        vllm_python()                          # the client: a missing venv fails, as in
    except VllmServerError as e:               # tests/test_bench_serve.py
        pytest.fail(str(e))
    d = stacks.measure(smoke=True, against="inferlab")
    res = d["result"]
    assert list(res["summary"]["inf"]) == ["inferlab", AGAIN]
    assert res["config"]["against"] == "inferlab" and res["config"]["repeats"] == 3
    assert all(r["metrics"]["completed"] == res["config"]["num_prompts"] for r in res["runs"])
    assert res["greedy"]["agree"] == res["greedy"]["of"] == 1       # the same engine twice
    v = assess(d)
    # a busy machine's times are not judged (see test_a_busy_machine_is_not_judged_on_its_times)
    assert v.verdict == (UNMEASURABLE if res["warning"] else FAILS), v
    assert res["left_running"] == {}
    assert not any(group_alive(pg) for pg in res["process_groups"].values())
