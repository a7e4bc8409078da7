"""Chapter 13's near-prompts claim on made-up answers: where two token lists part, how many
prompt tokens a change touches, and the judge's three verdicts (no model is loaded; the
real-model run and its falsification: tests/test_claims.py, tests/test_claims_falsifiable.py)."""
from __future__ import annotations

from inferlab.lab.chapters import ch13_sampling_decode as ch
from inferlab.lab.chapters._ch13_near import first_difference, tokens_changed
from inferlab.lab.verdicts import FAILS, HOLDS, HOLDS_SMALLER


def test_where_two_answers_part_and_how_much_of_a_prompt_changed():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2            # one stopped earlier
    assert first_difference([7], [8]) == 0
    assert tokens_changed([1, 2, 3, 4], [1, 2, 3, 4]) == 0
    assert tokens_changed([1, 2, 3, 4], [1, 9, 3, 4]) == 1      # a word swapped
    assert tokens_changed([1, 2, 3, 4], [1, 2, 9, 3, 4]) == 1   # a token inserted
    assert tokens_changed([1, 2, 3], [1, 2, 3, 9]) == 1         # a trailing space
    assert tokens_changed([1, 2, 2], [1, 2, 2, 2]) == 1         # repeats: no double count


def _data(greedy, sampled):
    rows = [{"change": f"change {i}", "prompt_changed": 1, "prompt_tokens": (30, 31),
             "greedy_first": g, "sampled_first": s,
             "sampled_differ": sum(f is not None for f in s) / len(s)}
            for i, (g, s) in enumerate(zip(greedy, sampled))]
    return {"model": "m", "near": {"rows": rows, "tokens": 8, "seeds": 2,
                                   "temperature": 0.8, "top_p": 0.95}}


def test_judge_near_prompts_on_made_up_answers():
    v = ch.judge_near_prompts(_data([3, None], [[0, None], [None, None]]))
    assert v.verdict == HOLDS and "1 of 2 prompt pairs" in v.reason and "1 of 4 answers" in v.reason
    v = ch.judge_near_prompts(_data([None, None], [[2, None], [None, None]]))
    assert v.verdict == HOLDS_SMALLER                          # only the sampled answers part
    v = ch.judge_near_prompts(_data([None, None], [[None, None], [None, None]]))
    assert v.verdict == FAILS and "0 of 2" in v.reason
