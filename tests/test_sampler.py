"""Sampler: seeded reproducibility in any batch, top_k=1 == greedy, stop strings cut exactly."""
import pytest
import torch

import inferlab as il
from inferlab.model.sampler import filter_logits

PROMPTS = ["Hello there", "The weather today is", [7, 8, 9, 10, 11], "Once upon a time, far away"]


@pytest.fixture(scope="module")
def eng():
    return il.Engine("tiny", num_blocks=128, block_size=4)


def test_seeded_sampling_same_text_in_any_batch(eng):
    sp = il.SamplingParams(max_tokens=12, temperature=1.0, top_p=0.9, seed=1234, ignore_eos=True)
    alone = eng.generate([PROMPTS[0]], sp, use_tqdm=False)[0].token_ids
    crowd = eng.generate(PROMPTS, [sp] + [il.SamplingParams(max_tokens=20, temperature=0.8)] * 3,
                         use_tqdm=False)[0].token_ids
    later = eng.generate(PROMPTS[::-1], [il.SamplingParams(max_tokens=5, temperature=1.0)] * 3
                         + [sp], use_tqdm=False)[3].token_ids
    assert alone == crowd == later
    other = eng.generate([PROMPTS[0]], il.SamplingParams(max_tokens=12, temperature=1.0,
                                                         top_p=0.9, seed=99, ignore_eos=True),
                         use_tqdm=False)[0].token_ids
    assert other != alone          # 12 tokens over a 49k vocab: a different seed differs


def test_top_k_1_equals_greedy(eng):
    greedy = eng.generate(PROMPTS, il.SamplingParams(max_tokens=10, ignore_eos=True),
                          use_tqdm=False)
    topk = eng.generate(PROMPTS, il.SamplingParams(max_tokens=10, temperature=1.5, top_k=1,
                                                   ignore_eos=True), use_tqdm=False)
    assert [o.token_ids for o in greedy] == [o.token_ids for o in topk]


def test_stop_string_cuts_text_exactly(eng):
    full = eng.generate(["Hello there"], il.SamplingParams(max_tokens=24, ignore_eos=True),
                        use_tqdm=False)[0].text
    assert len(full) > 12
    stop = full[6:9]
    cut = full[:full.index(stop)]
    deltas = list(eng.stream("Hello there", il.SamplingParams(max_tokens=24, ignore_eos=True,
                                                              stop=[stop, "\x00never"])))
    assert deltas[-1].text == cut
    assert "".join(d.new_text for d in deltas) == cut        # the stream adds up to the text
    assert deltas[-1].finish_reason == "stop"
    assert eng.stats().kv_blocks_used == 0


def test_top_p_keeps_the_smallest_set_reaching_p():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    kept = filter_logits(logits, il.SamplingParams(temperature=1.0, top_p=0.8)) > -1e30
    assert kept.tolist() == [True, True, False, False]
    kept = filter_logits(logits, il.SamplingParams(temperature=1.0, top_p=0.81)) > -1e30
    assert kept.tolist() == [True, True, True, False]
    kept = filter_logits(logits, il.SamplingParams(temperature=1.0, top_k=3)) > -1e30
    assert kept.tolist() == [True, True, True, False]


def test_max_tokens_and_eos(eng):
    out = eng.generate([[5, 6, 7]], il.SamplingParams(max_tokens=3, ignore_eos=True),
                       use_tqdm=False)[0]
    assert len(out.token_ids) == 3 and out.finish_reason == "length"
    first = out.token_ids[0]
    out = eng.generate([[5, 6, 7]], il.SamplingParams(max_tokens=3, stop_token_ids=[first]),
                       use_tqdm=False)[0]
    assert out.token_ids == [first] and out.finish_reason == "stop"


@pytest.mark.parametrize("kwargs, field", [
    (dict(max_tokens=0), "max_tokens"), (dict(temperature=-0.1), "temperature"),
    (dict(top_p=0.0), "top_p"), (dict(top_p=1.5), "top_p"), (dict(top_k=-1), "top_k"),
    (dict(max_tokens="5"), "max_tokens"), (dict(stop=[""]), "stop"),
    (dict(logprobs=-1), "logprobs"), (dict(logprobs=21), "logprobs"),
    (dict(logprobs=2.0), "logprobs"),
])
def test_bad_params_name_the_field(kwargs, field):
    with pytest.raises((ValueError, TypeError), match=field) as e:
        il.SamplingParams(**kwargs)
    assert isinstance(e.value, il.InferlabError)


def test_logprobs_are_the_raw_distribution_of_each_generated_token(eng):
    """SamplingParams(logprobs=k), as vLLM: per generated token the k likeliest tokens and the
    chosen one, log-probabilities of the raw logits (before temperature and filters); they
    agree with the model's own logits for the same positions."""
    prompt = [5, 6, 7, 8]
    greedy, sampled, plain = eng.generate(
        [prompt] * 3, [il.SamplingParams(max_tokens=4, ignore_eos=True, logprobs=3),
                       il.SamplingParams(max_tokens=4, ignore_eos=True, logprobs=0,
                                         temperature=5.0, seed=1),
                       il.SamplingParams(max_tokens=4, ignore_eos=True)], use_tqdm=False)
    assert plain.logprobs is None
    assert len(greedy.logprobs) == len(sampled.logprobs) == 4
    for tok, lp in zip(greedy.token_ids, greedy.logprobs):
        assert len(lp) == 3 and tok in lp and lp[tok] == max(lp.values())    # greedy: the top
        assert all(v <= 0.0 for v in lp.values())
    for tok, lp in zip(sampled.token_ids, sampled.logprobs):
        assert list(lp) == [tok]                                    # k=0: the chosen one only
    logits = eng.runner.prompt_logits(prompt + greedy.token_ids[:-1])[len(prompt) - 1:]
    ref = torch.log_softmax(logits.float(), -1)
    for row, (tok, lp) in enumerate(zip(greedy.token_ids, greedy.logprobs)):
        assert lp[tok] == pytest.approx(ref[row, tok].item(), abs=1e-4)
        assert set(lp) == set(torch.topk(ref[row], 3).indices.tolist())
