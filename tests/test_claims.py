"""The report card: every claim in the table is measured (smoke workloads: the tiny model,
token counts and the simulated clock wherever the claim allows) and gets a computed verdict
from the allowed four, with its reason in numbers; the judging helpers and the wall-clock
measurement protocol are checked on made-up numbers."""
from __future__ import annotations

import importlib
import pathlib
import re
import resource

import pytest

from inferlab.lab import claims, protocol, report, verdicts
from inferlab.lab.chapters import ch04_kv_cache
from inferlab.lab.verdicts import (FAILS, HOLDS, HOLDS_SMALLER, VERDICTS, Verdict,
                                   against_published, direction, worst)


@pytest.fixture(scope="module")
def results(claims_smoke):
    """`inferlab claims --smoke`, in process: every claim measured and judged once
    (tests/conftest.py; the chapter content tests share the measurement)."""
    return claims_smoke


def test_every_claim_gets_a_verdict_with_numbers(results):
    assert [c.id for c, _, _ in results] == [c.id for c in claims.CLAIMS]
    for claim, _, v in results:
        assert v.verdict in verdicts.STANDINGS, (claim.id, v.verdict)
        assert re.search(r"\d", v.reason), (claim.id, v.reason)
        assert v.measured and v.points and v.clock, claim.id
    text = report.text_table(results)
    assert all(c.id in text for c in claims.CLAIMS)
    md = report.markdown_table(results)
    assert md.count("\n") == len(results) + 1 and "**holds" in md


def test_published_sizes_are_compared(results):
    by_id = {c.id: v for c, _, v in results}
    why = {cid: v.reason.removeprefix(verdicts.BUSY_REASON) for cid, v in by_id.items()}
    assert why["05-throughput"].startswith("8x published for scheduling alone")
    assert "ideal of" in why["05-throughput"]
    assert why["04-kv-waste"].startswith("60-80% wasted vs under 4% claimed; here ")
    # one device, no multi-GPU run: the cost model's prediction is a projection, not judged
    assert by_id["10-tensor-parallel"].verdict == verdicts.PROJECTED


def test_the_table_covers_every_chapter():
    numbers = {c.number for c in claims.CLAIMS}
    assert set(range(1, 11)) <= numbers and 13 in numbers, sorted(numbers)
    notebooks = pathlib.Path(__file__).resolve().parent.parent / "notebooks"
    for n in numbers:                     # every chapter with claims has its notebook
        assert list(notebooks.glob(f"{n:02d}_*.py")), n
    assert len({c.id for c in claims.CLAIMS}) == len(claims.CLAIMS)
    chapters = {ch.__name__.rsplit(".", 1)[1]: ch for ch in claims.CHAPTERS}
    for c in claims.CLAIMS:
        assert c.source.count("\"") >= 2, c.source        # cites an article by its title
        assert chapters[c.chapter].TITLE
        # one claim, one place: its chapter module holds its measurement and its judge (or a
        # private part of that chapter, e.g. _ch13_costs for chapter 13's cost claims)
        assert c in chapters[c.chapter].CLAIMS, c.id
        home = chapters[c.chapter].__name__
        part = f"inferlab.lab.chapters._{c.chapter[:4]}_"
        assert c.measure.__module__ == home, c.id
        assert c.judge.__module__ == home or c.judge.__module__.startswith(part), c.id
    # every chapter module that declares claims is in the table (a plain import in claims.py)
    from inferlab.lab import book
    declared = [n for n in book.chapter_modules()
                if hasattr(importlib.import_module(f"inferlab.lab.chapters.{n}"), "CLAIMS")]
    assert declared == list(chapters), declared
    assert [c.id for c in claims.for_chapter(5)] == ["05-throughput", "05-response-time"]
    assert claims.for_chapter("ch05_batching") == claims.for_chapter(5)


def test_cli_prints_the_report_card(capsys):
    from inferlab.cli import main
    assert main(["claims", "--smoke", "--only", "ch10"]) == 0
    out = capsys.readouterr().out
    assert "report card (smoke run; 1 claims)" in out and "10-tensor-parallel" in out
    assert "not measurable here" in out


def test_verdict_is_one_of_four_and_states_numbers():
    with pytest.raises(ValueError, match="one of"):
        Verdict("mostly holds", "3 of 4")
    with pytest.raises(ValueError, match="numbers"):
        Verdict(HOLDS, "it clearly works")
    assert str(Verdict(HOLDS, "2x", warning="WARNING: busy")).endswith("WARNING: busy")


def test_a_busy_wall_clock_verdict_is_not_judged_and_keeps_its_numbers():
    busy = "WARNING: busy machine, wall-clock numbers not trustworthy: load average 6.5"
    claim = verdicts.Claim("x-1", "x", "y", "ch05_batching", measure=lambda smoke: {},
                           judge=lambda d: Verdict(d["v"], "2.00x here", warning=d["w"]))
    for v in (HOLDS, FAILS):                 # whatever the numbers would say
        got = claim.assess({"v": v, "w": busy})
        assert got.verdict == verdicts.UNMEASURABLE and got.warning == busy
        assert got.reason == verdicts.BUSY_REASON + "2.00x here"
    assert claim.assess({"v": HOLDS, "w": None}).verdict == HOLDS      # quiet: judged


def test_judging_helpers():
    assert against_published(23.5, 23) == HOLDS
    assert against_published(2.1, 23) == HOLDS_SMALLER
    assert against_published(0.9, 23) == FAILS
    assert direction(3.0) == HOLDS and direction(1.2) == HOLDS_SMALLER and direction(0.5) == FAILS
    assert worst(HOLDS, HOLDS_SMALLER) == HOLDS_SMALLER and worst(HOLDS, FAILS) == FAILS


def test_ideal_batching_gain_counts_decode_steps():
    # 8 answers at 4 seats: static runs 2 batches for as long as each one's longest answer
    lens = [10, 10, 10, 100, 10, 10, 10, 10]
    ratio, static, cont = verdicts.ideal_batching_gain(lens, 4)
    assert (static, cont) == (110, 100)     # continuous can't beat the longest answer
    assert ratio == pytest.approx(1.1)
    assert verdicts.ideal_batching_gain([8] * 8, 4)[0] == 1.0     # equal answers: no gain


def test_kv_waste_judge_explains_a_smaller_effect():
    lay = lambda waste, tokens, slots, reqs: {"peak_waste": waste, "mean_waste": waste,
                                              "tokens": tokens, "slots": slots, "requests": reqs}
    d = {"block_size": 16, "max_model_len": 2048, "kv_memory": 512 << 20, "kv_slots": 11648,
         "num_blocks": 728,
         "layouts": {"contiguous": lay(0.84, 1137, 7168, 7),
                     "paged": lay(0.046, 1298, 1360, 7)}}
    v = ch04_kv_cache.judge_kv_waste(d)
    assert v.verdict == HOLDS_SMALLER and "62 slots empty" in v.reason
    assert "84% vs 4.6% over the run" in v.reason and "above the published range" in v.reason
    d["layouts"]["paged"] = lay(0.02, 1333, 1360, 7)
    assert ch04_kv_cache.judge_kv_waste(d).verdict == HOLDS
    d["layouts"]["paged"] = lay(0.9, 100, 1000, 7)
    assert ch04_kv_cache.judge_kv_waste(d).verdict == FAILS


# --- the wall-clock protocol -----------------------------------------------------------------
def test_interleaved_runs_a_b_a_b():
    order = []
    runs = protocol.interleaved({"A": lambda: order.append("A") or 1,
                                 "B": lambda: order.append("B") or 2}, 3)
    assert order == ["A", "B"] * 3 and runs == {"A": [1, 1, 1], "B": [2, 2, 2]}


def test_spread_is_median_and_range():
    s = protocol.spread([0.003, 0.001, 0.002])
    assert (s.median, s.lo, s.hi, s.n) == (0.002, 0.001, 0.003, 3)
    shown = s.ms(), protocol.spread([2.0]).x()          # formatting made-up numbers
    assert shown == ("2.0 ms (1.0-3.0, n=3)", "2.00x (n=1)")


def test_busy_machine_warns_visibly():
    quiet = protocol.busy_warning(load=1.0, n_cpus=2, own_cpus=1.0, cal_before=0.030,
                                  cal_after=0.031)
    assert quiet is None
    busy = protocol.busy_warning(load=6.5, n_cpus=2, own_cpus=1.0, cal_before=0.030,
                                 cal_after=0.031)
    assert busy.startswith("WARNING: busy machine") and "load average 6.5 on 2 CPUs" in busy
    drift = protocol.busy_warning(load=None, n_cpus=2, own_cpus=1.0, cal_before=0.030,
                                  cal_after=0.070)
    assert "30 ms before and 70 ms after" in drift
    # the loop's own wander on these virtual machines (24 -> 37 ms on a quiet run): no warning
    assert protocol.busy_warning(load=None, n_cpus=2, own_cpus=1.0, cal_before=0.024,
                                 cal_after=0.037) is None
    # other processes' CPU over the run (/proc/stat) replaces the load average, which still
    # carries this process's own earlier work (load 2.0 with only 0.5 of it ours: quiet)
    assert protocol.busy_warning(load=2.0, n_cpus=2, own_cpus=0.5, cal_before=0.030,
                                 cal_after=0.031, others=0.1) is None
    others = protocol.busy_warning(load=0.5, n_cpus=2, own_cpus=0.5, cal_before=0.030,
                                   cal_after=0.031, others=1.4)
    assert "other processes kept 1.4 of 2 CPUs busy during the run" in others
    stolen = protocol.busy_warning(load=1.0, n_cpus=2, own_cpus=1.0, cal_before=0.030,
                                   cal_after=0.031, steal=0.3)
    assert "took 30% of this virtual machine's CPU time" in stolen
    assert protocol.busy_warning(load=1.0, n_cpus=2, own_cpus=1.0, cal_before=0.030,
                                 cal_after=0.031, steal=0.02) is None
    assert protocol.steal_share((10, 1000), (40, 1100)) == 0.3
    assert protocol.steal_share(None, (40, 1100)) is None


def test_other_processes_cpu_is_counted_apart_from_our_own():
    """/proc/stat, read around a child that spins for 1.5 s of its own CPU time, counts at
    least that child's CPU seconds (CPU time, not a duration); what others took is the busy
    time less our own, per second of the run."""
    import subprocess
    import sys
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy0 = protocol.cpu_busy_seconds()
    subprocess.run([sys.executable, "-c", "import time\nt = time.process_time()\n"
                    "while time.process_time() - t < 1.5: pass"], check=True)
    busy1 = protocol.cpu_busy_seconds()
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    child_cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
    assert child_cpu >= 1.5 and busy1 - busy0 >= 0.95 * child_cpu, (child_cpu, busy1 - busy0)
    assert protocol.others_cpus(100.0, 103.0, 1.0, 2.0) == 1.0          # fixed input
    assert protocol.others_cpus(100.0, 101.0, 1.5, 2.0) == 0.0          # fixed input
    assert protocol.others_cpus(None, 101.0, 1.0, 2.0) is None          # fixed input


def test_repeats_of_the_same_work_that_disagree_warn():
    """A neighbour's memory traffic slows a memory-bound engine without moving the load
    average: the same arm, repeated, taking much longer once is what shows it."""
    assert protocol.repeat_warning({"static": [2.0, 2.3], "continuous": [1.5, 1.6]}) is None
    w = protocol.repeat_warning({"static": [2.0, 3.2], "continuous": [1.5, 1.6]})
    assert w.startswith("WARNING: busy machine") and "static took 2.00-3.20 s" in w
    assert "continuous" not in w
    assert protocol.repeat_warning({"tiny": [0.01, 0.05]}) is None     # the timer's spread
    # a first call that was the slowest warmed up (caches, new memory, compiling): left out
    assert protocol.repeat_warning({"warm": [3.2, 2.0, 2.1]}) is None
    assert protocol.repeat_warning({"warm": [3.2, 2.0]}) is None
    assert "took 2.00-3.20 s over 3 repeats" in protocol.repeat_warning({"w": [2.5, 2.0, 3.2]})


def test_compare_judges_each_arms_repeats(monkeypatch):
    """compare() hands every arm's call times to repeat_warning and shows what it says."""
    seen = []

    def judge(times):
        seen.append({arm: len(calls) for arm, calls in times.items()})
        return "WARNING: busy machine, wall-clock numbers not trustworthy: the same work, x"
    monkeypatch.setattr(protocol, "repeat_warning", judge)
    res = protocol.compare({"a": lambda: 1, "b": lambda: 2}, 2)
    assert seen == [{"a": 2, "b": 2}] and "the same work, x" in res.warning
    assert res.runs == {"a": [1, 1], "b": [2, 2]}


def test_compare_reports_spread_and_label():
    res = protocol.compare({"off": lambda: 2.0, "on": lambda: 1.0}, 2)
    assert res.spread("on").median == 1.0 and res.meta()["repeats"] == 2
    assert "interleaved" in res.label and "off on off on" in res.label
    assert "simulated" in protocol.label("H100") and "deterministic" in protocol.label("H100")


def test_every_chapter_with_an_engine_measures_on_smollm2_in_smoke_runs_too(results):
    """Binder runs every chapter in smoke mode: smoke shrinks the workload, not the model."""
    models = {c.chapter: d.get("model") for c, d, _ in results}
    for chapter in ("ch01_prompt_anatomy", "ch02_tokenization", "ch03_prefill_decode",
                    "ch04_kv_cache", "ch05_batching", "ch06_chunked_prefill",
                    "ch07_prefix_caching", "ch08_safety_streaming", "ch13_sampling_decode",
                    "ch15_memory_and_price"):
        assert models[chapter] == "SmolLM2-135M-Instruct", (chapter, models[chapter])


# the measured claims whose falsification tests/test_claims_falsifiable.py runs (14-stacks:
# tests/test_claims_stacks.py; 14-sweep: tests/test_claims_sweep.py; chapter 15's: tests/test_claims_ch15.py): with the effect in place (the smoke run above) each holds,
# fully or smaller
# At smoke size this claim's effect on the wall clock is within the noise line
# (verdicts.WALL_NOISE): continuous batching answered 1.14x sooner (median E2E) with 12
# requests on 3 seats and 96-token caps, 1.21-1.23x with 160- and 192-token caps, on the
# 2-core EPYC (2026-12-06); its full run (32 requests, 8 seats) measured 1.50x. So the smoke
# run cannot show it, and this test reads its full run's record (which
# test_records.py::test_a_committed_record_judges_as_it_says re-judges); the falsification
# (static on both sides, tests/test_claims_falsifiable.py) must still say "does not hold".
BELOW_NOISE_AT_SMOKE_SIZE = ("05-response-time",)
FALSIFIED = ("01-stateless", "01-later-turns", "02-languages", "02-tokenizers",
             "03-prefill-decode", "03-decode-context", "03-model-sizes", "04-kv-waste",
             "04-paged-throughput", "05-throughput", "05-response-time",
             "06-chunked-prefill", "06-first-token-feel", "07-prefix-reuse",
             "08-input-check", "09-kernel", "09-memory-bound", "13-sampling", "13-near-prompts",
             "13-decode-length", "13-kv-tradeoff", "14-stacks", "14-sweep", "15-token-price",
             "15-memory")


def test_only_measured_claims_are_judged_and_the_card_counts_each_kind(results):
    kinds = report.kind_counts(results)
    assert sum(kinds.values()) == len(results) and all(kinds.values()), kinds
    for claim, _, v in results:
        if claim.kind == verdicts.MEASURED:
            assert v.verdict in VERDICTS, (claim.id, v.verdict)
        else:
            assert v.verdict == (verdicts.PROJECTED if claim.kind == verdicts.PROJECTION
                                 else verdicts.ILLUSTRATED), claim.id
            assert v.reason.startswith(claim.kind), claim.id
    assert f"{kinds['measured']} measured" in report.text_table(results)
    assert set(FALSIFIED) <= {c.id for c, _, _ in results if c.kind == verdicts.MEASURED}


def test_the_measured_claims_hold_with_the_effect_in_place(results):
    """Counts always; a wall-clock verdict only when its measurement saw a quiet machine: from
    a busy one it is "not measurable here" with the machine's reason (the numbers kept), and
    this test says so as a visible skip once the others are checked. A claim a smoke run
    judges on a recorded full run (14-stacks) is not measured here: its verdict must be the
    committed report card's (one truth), whichever it is, and say where it was recorded."""
    import json
    root = pathlib.Path(__file__).resolve().parent.parent
    card = {r["id"]: r for r in json.loads((root / "docs" / "results" / "claims.json")
                                           .read_text())["claims"]}
    by_id = {c.id: v for c, _, v in results}
    source = {c.id: d.get("source") for c, d, _ in results}
    busy = []
    for cid in FALSIFIED:
        v = by_id[cid]
        if source[cid] == "recorded":
            assert v.verdict == card[cid]["verdict"] and "recorded on " in v.reason, (cid, v)
            continue
        if cid in BELOW_NOISE_AT_SMOKE_SIZE:        # judged on its full run's record instead
            from inferlab.lab import records
            rec = {r["id"]: r for r in records.load(f"ch{cid[:2]}")["verdicts"]}
            assert rec[cid]["verdict"] in (HOLDS, HOLDS_SMALLER), (cid, rec[cid])
            continue
        if v.warning:
            assert v.warning.startswith("WARNING: busy machine") and v.warning in str(v), cid
            assert v.verdict == verdicts.UNMEASURABLE, (cid, v.verdict)
            assert v.reason.startswith(verdicts.BUSY_REASON), (cid, v.reason)
            busy.append(f"{cid} ({v.warning})")
            continue
        assert v.verdict in (HOLDS, HOLDS_SMALLER), f"{cid}: {v.verdict}: {v.reason}"
    if busy:
        pytest.skip("not judged on a busy machine: " + "; ".join(busy))


def test_the_json_report_lists_every_claim_with_its_class(results):
    import json
    recs = json.loads(json.dumps(report.as_records(results)))
    assert [r["id"] for r in recs] == [c.id for c in claims.CLAIMS]
    assert {r["rests_on"] for r in recs} == set(verdicts.KINDS)
    assert all(r["verdict"] in verdicts.STANDINGS and r["reason"] for r in recs)
