"""Every measured claim can fail: each test runs the chapter's own measurement (smoke size,
SmolLM2) with the effect removed, and the judge must stop saying "holds". With the effect in
place the same judges hold (tests/test_claims.py, on `inferlab claims --smoke`).

What is removed, claim by claim: prefix caching (01-stateless, 07-prefix-reuse; for
01-later-turns a prefix cache on both sides), the
languages' differences (02-languages: English in every language), the tokenizers'
differences (02-tokenizers: SmolLM2's twice), input length (03: the same length
at both ends of the sweep), paging (04: the paged run uses the contiguous layout, same
memory), continuous batching (05: both runs static), the input check (08-input-check:
skipped in both arms), sampling
(13-sampling: temperature 0), the prompts' small differences (13-near-prompts: each prompt
paired with itself), longer answers (13-decode-length: the same length twice), the
KV cache (13-kv-tradeoff: no cache on either side), the small batch (09-memory-bound: a
decode step past the ridge point only), chunking (06: both runs unchunked) and reading the K/V
in place (09-kernel: the numba kernel against itself), the context (03-decode-context: one
length twice), the model's size (03-model-sizes: SmolLM2-135M twice), chunking for the
questions after a long prompt (06-first-token-feel: both runs chunked). 13-network (its round trip is the lab's
own proxy delay), 08-output-check (its delays follow from the lab's check_every and
max_tokens) and 15-long-context (its budget is the lab's) are illustrations, not judged.

Tiers (tests/tiers.py): the default tier falsifies the judges on the session's smoke
measurement (``claims_smoke``), the effect taken out of its numbers: where a chapter measures
an arm without the effect (uncached, static, contiguous), that arm's measured numbers stand in
for both arms; no chapter is measured again. The full tier re-runs each chapter with the effect
removed in the engine itself (the timed arms included), each test naming the default-tier
falsification of the same judge.
"""
from __future__ import annotations

import pytest
from claim_verdict import fails


pytestmark = pytest.mark.slow


@pytest.mark.full("tests/test_claims_falsifiable.py::test_01_the_judge_without_saved_turns")
def test_01_without_a_prefix_cache_the_turns_are_not_saved():
    from inferlab.lab.chapters import ch01_prompt_anatomy as ch
    d = ch.measure(smoke=True, deterministic=True, caching=(False, False))
    fails("01-stateless", d)


@pytest.mark.full("tests/test_claims_falsifiable.py::test_01_the_judge_without_saved_turns")
def test_01_with_a_prefix_cache_on_both_sides_later_turns_do_not_start_later():
    from inferlab.lab.chapters import ch01_prompt_anatomy as ch
    d = ch.measure(smoke=True, caching=(True, True), repeats=1, wall_turns=(1, 10))
    assert d["runs"]["uncached · wall"][-1]["cached_tokens"] > 0
    fails("01-later-turns", d)


def test_02_the_same_text_in_every_language_costs_the_same():
    from inferlab.lab.chapters import ch02_tokenization as ch
    same = {lang: ch.TEXTS["English"] for lang in ("English", "French", "Thai")}
    d = ch.measure(smoke=True, deterministic=True, texts=same)
    fails("02-languages", d)


@pytest.mark.full("tests/test_claims_falsifiable.py::test_03_the_judge_without_growth_in_the_numbers")
def test_03_inputs_of_one_length_show_no_growth():
    from inferlab.lab.chapters import ch03_prefill_decode as ch
    d = ch.measure(smoke=True, with_fit=False, wall_lengths=[256, 257], contexts=None,
                   shapes=None)
    fails("03-prefill-decode", d)


@pytest.mark.full("tests/test_claims_falsifiable.py::test_04_the_judges_without_pages")
def test_04_contiguous_against_contiguous_saves_nothing():
    from inferlab.lab.chapters import ch04_kv_cache as ch
    d = ch.measure(smoke=True, arms={"contiguous": "contiguous", "paged": "contiguous"})
    fails("04-kv-waste", d)
    fails("04-paged-throughput", d)


@pytest.mark.full("tests/test_claims_falsifiable.py::test_05_the_judge_without_saved_steps")
def test_05_static_against_static_answers_no_sooner():
    from inferlab.lab.chapters import ch05_batching as ch
    d = ch.measure(smoke=True, arms={"static": "static", "continuous": "static"})
    fails("05-throughput", d)
    fails("05-response-time", d)


@pytest.mark.full("tests/test_claims_falsifiable.py::test_07_the_judge_without_reuse")
def test_07_without_a_prefix_cache_the_loop_recomputes_everything():
    from inferlab.lab.chapters import ch07_prefix_caching as ch
    d = ch.measure(smoke=True, caching=(False, False))
    fails("07-prefix-reuse", d)


@pytest.mark.full("tests/test_claims_falsifiable.py::test_13_the_judge_with_greedy_answers")
def test_13_greedy_answers_do_not_differ():
    from inferlab.lab.chapters import ch13_sampling_decode as ch
    d = ch.measure(smoke=True, deterministic=True, temperature=0.0)
    fails("13-sampling", d)


@pytest.mark.full("tests/test_claims_falsifiable.py::test_13_the_judge_with_greedy_answers")
def test_13_greedy_answers_do_not_differ_and_equal_lengths_take_equal_steps_and_time():
    from inferlab.lab.chapters import ch13_sampling_decode as ch
    d = ch.measure(smoke=True, temperature=0.0, lengths=(32, 32),
                   kv_arms=("without", "without"), rtts=(0.0,))
    assert "decode_wall" in d and "wall" in d["kv"] and "network_wall" in d
    fails("13-sampling", d)
    fails("13-decode-length", d)           # counts equal: no growth
    fails("13-kv-tradeoff", d)             # no cache on either side


@pytest.mark.full("tests/test_claims_falsifiable.py::test_08_the_judges_without_their_effects_in_the_numbers")
def test_08_without_an_input_check_nothing_waits():
    from inferlab.lab.chapters import ch08_safety_streaming as ch
    d = ch.measure(smoke=True, input_check=False)
    fails("08-input-check", d)             # no check: no added wait
    # 08-output-check is an illustration (its sizes are the lab's): not judged, so no
    # falsification; tests/test_claims.py checks that it is shown as such


def test_13_a_prompt_paired_with_itself_gets_the_same_answers():
    from inferlab.lab.chapters import ch13_sampling_decode as ch
    same = [(change, a, a) for change, a, _ in ch.NEAR_PAIRS[:3]]
    eng = ch._kit.engine(None, enable_prefix_caching=True)
    d = {"near": ch.measure_near(eng, ch._kit.tokenizer(), smoke=True, pairs=same),
         "model": eng.model_name}
    rows = d["near"]["rows"]
    assert [r["prompt_changed"] for r in rows] == [0, 0, 0]
    assert all(r["greedy_first"] is None and r["sampled_differ"] == 0 for r in rows)
    fails("13-near-prompts", d)             # nothing differs, nothing parts


def test_02_the_same_tokenizer_twice_cuts_every_text_alike():
    from inferlab.lab.chapters import ch02_tokenization as ch
    smol = ch.smollm2()
    texts = {**{k: ch.TEXTS[k] for k in ("English", "Thai")}, **ch.EXTRA_TEXTS}
    d = {"tokenizers": ch.measure_tokenizers(texts, ch.REPEAT_SMOKE,
                                             [smol, {**smol, "name": "SmolLM2 again"}])}
    assert all(len(set(r["tokens"].values())) == 1 for r in d["tokenizers"]["rows"])
    fails("02-tokenizers", d)


# --- the judges on the smoke run's own numbers, the effect taken out of them -----------------
# (default tier: no new measurement; where one arm of the run is the other without the
# effect, that arm's measured numbers stand in for both; the full tier re-runs the chapter
# without the effect)
def _smoke(claims_smoke, claim_id: str) -> dict:
    """The smoke run's measurement a claim was judged on (shared: read, never changed)."""
    return next(d for c, d, _ in claims_smoke if c.id == claim_id)


def _measured(claims_smoke, claim_id: str) -> dict:
    import copy
    return copy.deepcopy(_smoke(claims_smoke, claim_id))


def _arm_for_both(data: dict, path: tuple, keep: str, drop: str) -> dict:
    """``data`` with the ``drop`` arm under ``path`` replaced by the ``keep`` arm."""
    def go(node, rest):
        if not rest:
            return {**node, drop: node[keep]}
        return {**node, rest[0]: go(node[rest[0]], rest[1:])}
    return go(data, path)


def test_01_the_judge_without_saved_turns(claims_smoke):
    data = _smoke(claims_smoke, "01-stateless")
    d = _arm_for_both(data, ("runs",), keep="uncached · sim", drop="cached · sim")
    fails("01-stateless", d)


def test_04_the_judges_without_pages(claims_smoke):
    data = _smoke(claims_smoke, "04-kv-waste")
    d = _arm_for_both(data, ("layouts",), keep="contiguous", drop="paged")
    fails("04-kv-waste", d)
    fails("04-paged-throughput", d)


def test_07_the_judge_without_reuse(claims_smoke):
    data = _smoke(claims_smoke, "07-prefix-reuse")
    d = _arm_for_both(data, ("agent",), keep="uncached", drop="cached")
    fails("07-prefix-reuse", d)


def test_13_the_judge_with_greedy_answers(claims_smoke):
    d = _measured(claims_smoke, "13-sampling")
    a = d["answers"]
    a["seeded"] = [a["greedy"][0]] * len(a["seeded"])   # every seed answered as greedy did
    a["distinct"] = len(set(a["seeded"]))
    fails("13-sampling", d)


def test_03_the_judge_without_growth_in_the_numbers(claims_smoke):
    d = _measured(claims_smoke, "03-prefill-decode")
    rows = d["runs"]["wall"]
    for r in rows[1:]:
        r["ttft"] = rows[0]["ttft"]                 # every input length: the shortest's TTFT
    fails("03-prefill-decode", d)


def test_05_the_judge_without_saved_steps(claims_smoke):
    data = _smoke(claims_smoke, "05-throughput")
    d = _arm_for_both(data, ("traces", "wall"), keep="static", drop="continuous")
    fails("05-throughput", d)              # continuous took static's steps


def test_06_the_judge_without_chunks(claims_smoke):
    d = _measured(claims_smoke, "06-chunked-prefill")
    for key in ("p99", "max", "long_ttft"):          # the unchunked runs on both sides
        d["wall"][key]["chunked"] = dict(d["wall"][key]["unchunked"])
    fails("06-chunked-prefill", d)


@pytest.mark.full("tests/test_claims_falsifiable.py::test_06_the_judge_without_chunks")
def test_06_unchunked_against_unchunked_smooths_nothing():
    from inferlab.lab.chapters import ch06_chunked_prefill as ch
    d = ch.measure(smoke=True, chunking=(False, False), feel_chunking=None)
    fails("06-chunked-prefill", d)


def test_03_the_judges_without_growth_or_sizes_in_the_numbers(claims_smoke):
    d = _measured(claims_smoke, "03-decode-context")
    rows = d["context"]["rows"]
    for r in rows[1:]:
        r["step"] = dict(rows[0]["step"])         # every context: the shortest's step time
    fails("03-decode-context", d)
    d = _measured(claims_smoke, "03-model-sizes")
    rows = d["sizes"]["rows"]
    for r in rows[1:]:                            # every shape: SmolLM2-135M's times
        r["ttft"], r["tpot"] = dict(rows[0]["ttft"]), dict(rows[0]["tpot"])
    fails("03-model-sizes", d)


@pytest.mark.full("tests/test_claims_falsifiable.py::test_03_the_judges_without_growth_or_sizes_in_the_numbers")
def test_03_one_context_twice_and_one_model_twice_show_nothing():
    from inferlab.lab.chapters import _ch03_context, _ch03_sizes
    fails("03-decode-context", {"context": _ch03_context.measure(True, 2, (64, 64))})
    same = ("smollm2-135m", "smollm2-135m")
    fails("03-model-sizes", {"sizes": _ch03_sizes.measure(True, 2, same)})


def test_06_the_first_token_judge_without_chunks(claims_smoke):
    d = _measured(claims_smoke, "06-first-token-feel")
    for key in ("ttft", "e2e"):                      # the unchunked runs on both sides
        d["feel"][key]["chunked"] = dict(d["feel"][key]["unchunked"])
    fails("06-first-token-feel", d)


@pytest.mark.full("tests/test_claims_falsifiable.py::test_06_the_first_token_judge_without_chunks")
def test_06_chunked_against_chunked_starts_no_sooner():
    from inferlab.lab.chapters import _ch06_feel, ch06_chunked_prefill as ch
    fails("06-first-token-feel", {"feel": _ch06_feel.measure(ch.run, True, 2, (True, True))})


def test_09_the_judge_with_the_kernel_against_itself(claims_smoke):
    d = _measured(claims_smoke, "09-kernel")
    for r in d["rows"]:                              # in place vs in place: the same time
        r.update(speedup=1.0, speedup_lo=1.0, speedup_hi=1.0, ref_ms=r["numba_ms"])
    fails("09-kernel", d)


@pytest.mark.full("tests/test_claims_falsifiable.py::test_09_the_judge_with_the_kernel_against_itself")
def test_09_the_in_place_kernel_against_itself_wins_nothing():
    from inferlab.lab.chapters import ch09_kernels as ch
    d = ch.measure(smoke=True, against="numba")
    fails("09-kernel", d)


def test_09_the_judge_past_the_ridge(claims_smoke):
    d = _measured(claims_smoke, "09-memory-bound")
    rows = d["decode_step"]["rows"]
    assert rows[0]["batch"] == 1 and rows[-1]["batch"] > 1
    d["decode_step"]["rows"] = rows[1:]             # the large batch only: compute-bound
    fails("09-memory-bound", d)


@pytest.mark.full("tests/test_claims_falsifiable.py::test_09_the_judge_past_the_ridge")
def test_09_a_decode_step_past_the_ridge_is_compute_bound():
    from inferlab.lab.chapters import _ch09_decode_step as step, ch09_kernels as ch
    machine = ch._machine(True, 3)
    d = {"rows": [], "intensity": ch.intensity(), "clock": "wall", "machine": machine,
         "decode_step": step.measure(machine, smoke=True, repeats=2, batch_sizes=(64,))}
    fails("09-memory-bound", d)


def test_08_the_judges_without_their_effects_in_the_numbers(claims_smoke):
    d = _measured(claims_smoke, "08-input-check")
    first = d["wall_first_token"]                    # the run without the check, both arms
    first["checked"] = dict(first["unchecked"])
    fails("08-input-check", d)
