"""What the chapters show, checked on their deterministic parts: token, step and slot counts,
and the simulated clock (priced by the cost model, the same on every run). Smoke workloads:
chapters 1, 4, 5 and 13 read the session's claims measurement (SmolLM2; tests/conftest.py), the
others measure on the tiny random model. No wall-clock time is asserted here
(tests/test_no_timed_asserts.py)."""
from __future__ import annotations

import pytest

from inferlab.lab import palette
from inferlab.lab.verdicts import FAILS, HOLDS, HOLDS_SMALLER


def chapter_measurement(results, chapter: str) -> dict:
    """The measurement a chapter's claims were judged on, from the session's ``claims_smoke``
    (tests/conftest.py): the same call as the chapter's ``measure_for_claims(smoke=True)``."""
    return next(d for c, d, _ in results if c.chapter.startswith(chapter))


# --- chapter 1: re-processing the conversation, 20 turns --------------------------------------
@pytest.fixture(scope="module")
def ch01(claims_smoke):
    return chapter_measurement(claims_smoke, "ch01")   # measure(smoke=True, deterministic=True)


def test_ch01_twenty_turns_recompute_grows_without_a_cache(ch01):
    off, on = ch01["runs"]["uncached · sim"], ch01["runs"]["cached · sim"]
    assert [r["turn"] for r in off] == list(range(1, 21)) == [r["turn"] for r in on]
    # without a cache every turn computes its whole prompt, and the prompt grows every turn
    assert all(r["computed_tokens"] == r["prompt_tokens"] for r in off)
    assert all(b["computed_tokens"] > a["computed_tokens"] for a, b in zip(off, off[1:]))
    # with the cache a later turn computes only what is new: flat, not growing
    assert on[0]["computed_tokens"] == off[0]["computed_tokens"]
    assert all(r["computed_tokens"] < 64 for r in on[1:]), [r["computed_tokens"] for r in on]
    assert all(a["prompt_tokens"] == b["prompt_tokens"] for a, b in zip(off, on))
    total_off = sum(r["computed_tokens"] for r in off)
    total_on = sum(r["computed_tokens"] for r in on)
    assert total_off > 5 * total_on
    assert off[-1]["computed_tokens"] > 4 * off[0]["computed_tokens"]


# --- chapter 3: the fixed-plus-per-token fit, on made-up step times ----------------------------
def test_ch03_fit_recovers_fixed_and_per_token_cost():
    from inferlab.lab.chapters import ch03_prefill_decode as ch
    rows = [{"tokens": n, "step": 0.080 + 0.002 * n} for n in (1, 2, 4, 8, 16, 32, 64)]
    rows[3]["step"] += 0.5                        # one step slowed by a busy neighbour
    f = ch.fit_steps(rows, weight_bytes=538e6, read_gbs=10.0, params=134_515_008)
    assert f["intercept"] == pytest.approx(0.080, rel=0.05)
    assert f["slope"] == pytest.approx(0.002, rel=0.05)
    assert f["break_even"] == pytest.approx(40, rel=0.1)
    assert f["weights_read_s"] == pytest.approx(0.0538)
    slow = ch.fit_steps([{**r, "step": r["step"] + 0.4} for r in rows[1:]], 538e6, 10.0,
                        134_515_008)
    text = ch.fit_text({"fits": {1: f, 2: slow}, "threads": 2, "model": "test"})
    assert "one thread a prefill step costs 80 ms + 2.0 ms per prompt token" in text
    assert "538 MB" in text and "2 threads: 480 ms + 2.0 ms per prompt token, 400 ms more" in text


# --- chapter 4: paging at a fixed KV memory ----------------------------------------------------
@pytest.fixture(scope="module")
def ch04(claims_smoke):
    return chapter_measurement(claims_smoke, "ch04")   # measure(smoke=True)


def test_ch04_same_memory_same_outputs_more_requests(ch04):
    c, p = ch04["layouts"]["contiguous"], ch04["layouts"]["paged"]
    assert c["blocks_total"] == p["blocks_total"] == ch04["num_blocks"]
    # contiguous reservation fits only num_slots // max_model_len requests at once
    assert c["max_running"] == ch04["kv_slots"] // ch04["max_model_len"] < ch04["num_requests"]
    assert p["max_running"] > c["max_running"]
    assert p["mean_running"] > 1.5 * c["mean_running"]
    assert ch04["same_outputs"] == ch04["num_requests"]       # token for token
    assert c["finished"] == p["finished"] == ch04["num_requests"]
    assert c["output_tokens"] == p["output_tokens"]
    assert c["queue_median"] > p["queue_median"]  # simulated clock
    assert p["throughput"] > 1.5 * c["throughput"]  # simulated clock
    # real chat requests are short (~50-token prompts, answers to EOS): paged waste is the
    # unfilled end of each last block, less than one block per request, not under 4%
    assert c["peak_waste"] > 0.6 and p["peak_waste"] < c["peak_waste"] / 5
    assert (p["slots"] - p["tokens"]) < ch04["block_size"] * p["requests"]


# --- chapter 5: median and p90, one colour per policy -----------------------------------------
def test_ch05_colours_are_the_policies_by_name():
    from inferlab.lab.chapters import ch05_batching as ch
    assert ch.COLORS == {"static": palette.POLICY["static"],
                         "continuous": palette.POLICY["continuous"]}
    assert set(ch.WIDGET_ORDER) == set(ch.SCHEDULERS)


def test_ch05_reports_median_and_p90(claims_smoke):
    from inferlab.lab.chapters import ch05_batching as ch
    d = chapter_measurement(claims_smoke, "ch05")      # measure(smoke=True): sim and wall
    sim = d["runs"]["sim"]
    for s in ch.SCHEDULERS:
        for k in ch.LATENCY_KEYS:
            assert sim[s][k] > 0, (s, k)
        assert sim[s]["e2e_median"] <= sim[s]["e2e_p90"]  # simulated clock
    assert sim["continuous"]["e2e_p90"] < sim["static"]["e2e_p90"]  # simulated clock
    table = ch.latency_table(d).splitlines()
    assert table[0].startswith("| scheduler | throughput |") and "p90" in table[0]
    assert [row.split(" | ")[0] for row in table[2:4]] == ["| **static**", "| **continuous**"]
    # the wall-clock figure draws the repeat nearest the median ratio, and says so
    w = d["runs"]["wall"]
    assert 0 <= w["drawn"] < w["repeats"]
    assert ch.nearest([1.0, 1.4, 1.2], 1.25) == 2
    title = ch.figure(d, clock="wall").layout.title.text
    assert f"repeat {w['drawn'] + 1} of {w['repeats']}" in title
    assert f"median of the {w['repeats']} A B pairs, {w['ratio']:.2f}x" in title


# --- chapter 8: three real runs ----------------------------------------------------------------
@pytest.fixture(scope="module")
def ch08():
    from inferlab.lab.chapters import ch08_safety_streaming as ch
    return ch.measure(smoke=True, deterministic=True, model="tiny")


def test_ch08_three_runs_and_the_claims_order(ch08):
    runs, fv = ch08["runs"], ch08["first_visible"]
    assert set(runs) == {"streamed", "chunked", "buffered"}
    n = ch08["sizes"]["max_tokens"]
    for p, r in runs.items():
        assert len(r["made"]) == len(r["visible"]) == n, p
        assert all(v >= m for v, m in zip(r["visible"], r["made"])), p
    assert runs["streamed"]["visible"] == runs["streamed"]["made"]
    assert runs["streamed"]["num_checks"] == 0 and runs["buffered"]["num_checks"] == 1
    assert runs["chunked"]["num_checks"] == -(-n // ch08["sizes"]["check_every"])
    assert len(set(runs["buffered"]["visible"])) == 1
    assert "H100" in ch08["clock"]
    assert fv["streamed"] < fv["chunked"] < fv["buffered"]  # simulated clock
    # each run is its own: the buffered run's answer is not reused as the streamed one
    assert runs["streamed"]["made"] is not runs["buffered"]["made"]


# --- chapter 9: arithmetic intensity and the memory-bound judge --------------------------------
def test_ch09_intensity_and_memory_bound_judge():
    """09-memory-bound is judged on the whole decode step at its smallest batch: the nearer
    roof (bandwidth share against matmul share) is the limit; the attention kernel's own
    share is a clause of the reason."""
    from inferlab.lab.chapters import ch09_kernels as ch
    assert ch.intensity() == pytest.approx(1.5) and ch.intensity(9, 9) == pytest.approx(0.5)
    probe = {"context": 32768, "intensity": 0.5, "kv_mb": 144.0, "gbs": 12.0,
             "share_of_bandwidth": 0.3}
    step = lambda b, bw, fl: {"batch": b, "step": {"median": 0.02, "lo": 0.02, "hi": 0.02,
                                                    "n": 2}, "context": 40.0, "bytes": 5.4e8,
                               "flops": b * 2.7e8, "gbs": 40 * bw, "gflops": 50 * fl,
                               "bw_share": bw, "flop_share": fl}
    decode = {"rows": [step(1, 0.75, 0.1), step(64, 0.1, 0.9)], "model": "SmolLM2",
              "weight_mb": 540.0, "kv_bytes_per_token": 46080, "dtype": "float32",
              "read_gbs": 40.0, "matmul_gflops": 50.0, "wall": {"repeats": 2, "warning": None}}
    d = {"rows": [], "intensity": 1.5, "clock": "wall", "decode_step": decode, "machine": {
             "read_gbs": 40.0, "matmul_gflops": 50.0, "ridge": 1.25, "warning": None,
             "probes": [probe]}}
    v = ch.judge_memory_bound(d)
    assert v.verdict == HOLDS, v.reason
    assert "batch 1: a step of 20.0 ms" in v.reason and "memory-bound" in v.reason
    assert "batch 64" in v.reason and "compute-bound" in v.reason
    assert "attention kernel alone reads K/V from memory at up to 30%" in v.reason
    decode["rows"][0].update(bw_share=0.3)           # memory the nearer roof, not reached
    assert ch.judge_memory_bound(d).verdict == HOLDS_SMALLER
    decode["rows"] = decode["rows"][1:]              # past the ridge: compute-bound
    assert ch.judge_memory_bound(d).verdict == FAILS
    del d["decode_step"]                             # no wall-clock run of the step
    assert ch.judge_memory_bound(d).verdict == FAILS


# --- chapter 13: sampling, answer length, the KV cache, the network ---------------------------
@pytest.fixture(scope="module")
def ch13(claims_smoke):
    return chapter_measurement(claims_smoke, "ch13")   # measure(smoke=True) on SmolLM2


def test_ch13_sampling_counts(ch13):
    a, dist, dr = ch13["answers"], ch13["distribution"], ch13["draws"]
    assert a["distinct"] >= 2 and a["repeatable"] and a["greedy_same"]
    nuc = dist["nucleus"]
    assert nuc[0.5] <= nuc[1.0] <= nuc[1.5] <= dist["vocab"]
    assert dist["entropy"][0.5] < dist["entropy"][1.5]
    top = dist["top"]
    assert all(top[i]["p"][1.0] >= top[i + 1]["p"][1.0] for i in range(len(top) - 1))
    assert dr["n"] == ch13["sizes"]["draws"] and 1 <= dr["distinct"] <= dr["n"]


def test_ch13_one_step_per_token_and_what_the_cache_saves(ch13):
    dec = ch13["decode"]
    assert [r["steps"] for r in dec] == [r["max_tokens"] for r in dec]
    assert [r["output_tokens"] for r in dec] == [r["max_tokens"] for r in dec]
    assert all(b["e2e"] > a["e2e"] for a, b in zip(dec, dec[1:]))  # simulated clock
    kv = ch13["kv"]["saving"]
    assert kv["with"]["tokens"] == kv["formula_with"] == kv["prompt"] + kv["answer"] - 1
    assert kv["without"]["tokens"] == kv["formula_without"]
    assert kv["with"]["steps"] == kv["without"]["steps"] == kv["answer"]
    assert kv["same_tokens"] == kv["answer"]
    assert kv["without"]["time"] > kv["with"]["time"]  # simulated clock
    mem = {r["model"]: r for r in ch13["kv"]["memory"]}
    assert mem["llama-3-8b"]["kv_bytes_per_token"] == 2 * 32 * 8 * 128 * 2    # 128 KiB
    assert mem["smollm2-135m"]["kv_bytes_per_token"] == 2 * 30 * 3 * 64 * 2
    assert mem["llama-3-70b"]["tokens_on_80gb"] == 0          # 140 GB of weights


def test_ch13_network_adds_round_trips(ch13):
    from inferlab.lab.chapters._ch13_costs import HANDSHAKE_RTTS
    rows = ch13["network"]
    assert {r["rtt"] for r in rows} == {0.0, 0.05, 0.15}
    for r in rows:
        trips = 1 + (HANDSHAKE_RTTS if r["new_connection"] else 0)
        assert r["perceived"] == pytest.approx(r["server"] + trips * r["rtt"])  # simulated clock
    short = [r for r in rows if r["prompt"] == min(x["prompt"] for x in rows)]
    assert len({round(r["server"], 9) for r in short}) == 1   # an idle engine: same TTFT



def test_ch13_figures_make_one_point_each_with_the_ratio_from_the_data():
    from inferlab.lab import records
    from inferlab.lab.chapters import ch13_sampling_decode as ch
    data = records.load("ch13_sampling_decode")["data"]
    figs = ch.figures(data)
    assert list(figs) == ["", "near", "length", "kv", "network"]
    assert ch.figure(data).to_json() == figs[""].to_json()     # the notebook's figure: main
    titles = {k: f.layout.title.text.split("<br>")[0] for k, f in figs.items()}
    kv, dec = data["kv"]["saving"], data["decode"]
    assert f"{kv['without']['tokens'] / kv['with']['tokens']:.0f}x fewer" in titles["kv"]
    assert f"took {dec[-1]['e2e'] / dec[0]['e2e']:.0f}x the time" in titles["length"]
    a = data["answers"]
    assert f"{a['seeds']} seeds, {a['distinct']} answers" in titles[""]
    for k, f in figs.items():           # one panel's story each: no pooled legend of 9
        assert len(titles[k]) <= 72, titles[k]
        assert sum(t.showlegend is not False for t in f.data) <= 4, k

# --- chapter 14: a real OpenAI client, an agent loop and a burst, through the lab's server ------
@pytest.fixture(scope="module")
def ch14():
    from inferlab.lab.chapters import ch14_own_traffic as ch
    return ch.measure(smoke=True, model="tiny")


def test_ch14_agent_rounds_resend_the_conversation_and_reuse_its_prefix(ch14):
    from inferlab.lab.chapters import ch14_own_traffic as ch
    rounds, s = ch14["agent"]["rounds"], ch14["sizes"]
    assert len(rounds) == s["cities"] + 1
    assert [r["messages"] for r in rounds] == [2 + 2 * k for k in range(len(rounds))]
    assert all(b["prompt_tokens"] > a["prompt_tokens"] for a, b in zip(rounds, rounds[1:]))
    assert rounds[0]["cached"] == 0 and all(r["cached"] > 0 for r in rounds[1:])
    assert all(r["cached"] % 16 == 0 and r["computed"] == r["prompt_tokens"] - r["cached"]
               for r in rounds)                              # whole blocks of 16 tokens
    tools = [m["content"] for m in ch14["agent"]["messages"] if m["role"] == "tool"]
    assert tools == [ch.tool_result(k) for k in range(s["cities"])]   # fixed input


def test_ch14_every_user_of_the_burst_is_answered_and_the_engine_ends_idle(ch14):
    b, s = ch14["burst"], ch14["sizes"]
    assert len(b["users"]) == s["users"]
    assert all("error" not in u and 1 <= u["completion_tokens"] <= s["burst_tokens"]
               for u in b["users"]), b["users"]
    assert all(u["engine_ttft"] is not None for u in b["users"])    # each found in the trace
    assert b["tokens"] == sum(u["completion_tokens"] for u in b["users"])
    idle = ch14["idle"]
    assert (idle["running"], idle["waiting"], idle["blocks_used"], idle["unfinished"]) == \
        (0, 0, 0, False)


def test_ch14_figures_leave_the_burst_out_when_deterministic(ch14):
    from inferlab.lab.chapters import ch14_own_traffic as ch
    figs = ch.figures(ch14)                    # one point each: the agent's rounds, the burst
    assert list(figs) == ["", "burst"] and len(figs[""].data) == 3
    assert len(figs["burst"].data) == 2 and ch.figure(ch14).to_json() == figs[""].to_json()
    assert "left out" not in figs[""].layout.title.text
    alone = ch.figures({**ch14, "burst": None})
    assert list(alone) == [""] and len(alone[""].data) == 3
    assert "burst" in alone[""].layout.title.text and "left out" in alone[""].layout.title.text
