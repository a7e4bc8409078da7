"""Chapter 15's claims, each with its effect removed (the judge must stop saying "holds"),
and the counts behind them (smoke sizes, SmolLM2; the memory breakdown in a process of its
own). With the effect in place the judges hold (tests/test_claims.py, `inferlab claims
--smoke`). No wall-clock time is asserted (tests/test_no_timed_asserts.py)."""
from __future__ import annotations

import pytest
from claim_verdict import fails, verdict

from inferlab.lab import claims
from inferlab.lab.chapters import ch15_memory_and_price as ch
from inferlab.lab.verdicts import FAILS, HOLDS, HOLDS_SMALLER, ILLUSTRATED

pytestmark = pytest.mark.slow


def test_15_price_with_prompts_fed_one_token_per_step_is_no_cheaper():
    # short prompts and one repeat (A B): a step per prompt token is slow on two cores
    d = ch.measure(smoke=True, parts=("price",), one_token_per_step=True,
                   resize=dict(prompt_len=16, decode=4, repeats=1))
    rows = d["price"]["rows"]
    assert [r["tokens_per_prefill_step"] <= r["batch"] for r in rows] == [True, True]
    fails("15-token-price", d)          # a prompt token costs a step, as a generated one does


def test_15_a_budget_with_room_for_everyone_runs_them_all_at_once():
    s = ch.sizes(True)
    d = ch.measure(smoke=True, parts=("capacity",))
    lo, sh = d["capacity"]["long"], d["capacity"]["short"]
    assert lo["max_running"] == ch.FITS < lo["requests"]                  # block counts
    assert sh["max_running"] == sh["requests"] == s["requests"]
    assert lo["budget_blocks"] == sh["budget_blocks"] and lo["preemptions"] == 0
    assert lo["kv_bytes_per_token"] == 2 * 30 * 3 * 64 * 4                 # SmolLM2, fp32
    # the budget is the lab's (FITS): an illustration, never judged; its reason gives the
    # engine's default budget at SmolLM2's own 8,192-token window beside it (1 context here)
    v = claims.for_chapter(15)[1].assess(d)
    assert v.verdict == ILLUSTRATED and ch.judge_long_context(d).verdict == HOLDS
    b = d["capacity"]["default_budget"]
    assert b["context"] == 8192 and b["fit"] == (512 << 20) // (8192 * 2 * 30 * 3 * 64 * 4) == 1
    assert "own 8,192-token context window" in v.reason and "holds 1 such context" in v.reason
    d = ch.measure(smoke=True, parts=("capacity",), fits=None)
    assert d["capacity"]["long"]["max_running"] == s["requests"]
    assert ch.judge_long_context(d).verdict == FAILS          # room for all: all at once


def test_15_memory_of_a_tiny_model_is_not_its_weights_and_kv():
    d = ch.measure(smoke=True, parts=("memory",), memory_model="tiny")
    m = d["memory"]
    assert m["parts_load"]["weights"] < 50e6 and m["kv"] < 50e6
    fails("15-memory", d)


def test_15_judge_price_on_made_up_numbers():
    row = lambda b, pre, dec: {"arm": f"batch {b}", "batch": b, "prefill": pre, "decode": dec,
                               "ratio": dec / pre, "tokens_per_prefill_step": 64 * b,
                               "tokens_per_decode_step": b, "usd_per_m_prefill": 0.1,
                               "usd_per_m_decode": 1.0}
    p = {"rows": [row(1, 0.002, 0.030), row(8, 0.002, 0.009)], "model": "m", "cpu": "c",
         "repeats": 3, "hourly_usd": 0.1, "label": "wall clock"}
    assert ch.judge_price({"price": p}).verdict == HOLDS        # 4.5x: the 4x list prices
    p["rows"][1] = row(8, 0.002, 0.005)
    assert ch.judge_price({"price": p}).verdict == HOLDS_SMALLER       # 2.5x
    p["rows"][1] = row(8, 0.002, 0.0022)
    assert ch.judge_price({"price": p}).verdict == FAILS
    assert ch.judge_price({}).verdict == FAILS                        # no wall-clock run
