"""Sampler: logits -> next token ids, per request (greedy, temperature, top-k, top-p, seed).

Each sampled request owns a torch.Generator seeded once, so a seeded request produces the
same text whatever else shares its batch.
"""
from __future__ import annotations

import torch

from inferlab.core.params import SamplingParams


def make_generator(seed: int) -> torch.Generator:
    g = torch.Generator(device="cpu")
    g.manual_seed(seed)
    return g


# vLLM's floor for a temperature above 0: below it logits / temperature overflows float32
# (5e-324 made every logit inf, softmax NaN, and the step failed); it samples as near-greedy
MIN_TEMPERATURE = 1e-2


def filter_logits(logits: torch.Tensor, p: SamplingParams) -> torch.Tensor:
    """Temperature, then top-k, then top-p on one row of logits [vocab] (fp32)."""
    # a temperature beyond the dtype's range is inf to torch, and a banned token's -inf / inf
    # is NaN (1e308 with min_tokens failed the step): the largest finite one samples the same
    t = min(max(p.temperature, MIN_TEMPERATURE), torch.finfo(logits.dtype).max)
    logits = logits / t
    if p.top_k > 0 and p.top_k < logits.shape[-1]:
        kth = torch.topk(logits, p.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if p.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # drop a token when the tokens before it already reach top_p; always keep the first
        drop = (probs.cumsum(-1) - probs) >= p.top_p
        drop[0] = False
        logits = logits.clone()
        logits[order[drop]] = float("-inf")
    return logits


def top_logprobs(logits: torch.Tensor, k: int, chosen: int) -> dict[int, float]:
    """{token id: log-probability} of the ``k`` likeliest tokens of one row of raw logits
    [vocab] and of ``chosen`` (vLLM's ``logprobs``), computed in float32."""
    lp = torch.log_softmax(logits.float(), dim=-1)
    ids = torch.topk(lp, k).indices.tolist() if k else []
    return {t: float(lp[t]) for t in [*ids, chosen]}


def sample(logits: torch.Tensor, params: list[SamplingParams],
           generators: list[torch.Generator | None],
           banned: list[list[int]] | None = None) -> list[int]:
    """logits [R, vocab] -> R token ids. ``banned[i]``: ids row i may not pick (min_tokens)."""
    if banned and any(banned):
        logits = logits.clone()
        vocab = logits.shape[-1]
        for i, ids in enumerate(banned):
            ids = [t for t in ids if 0 <= t < vocab]
            if ids:
                logits[i, ids] = float("-inf")
    greedy = logits.argmax(dim=-1).tolist()
    out = []
    for i, p in enumerate(params):
        if p.greedy:
            out.append(greedy[i])
            continue
        probs = torch.softmax(filter_logits(logits[i].float().cpu(), p), dim=-1)
        out.append(int(torch.multinomial(probs, 1, generator=generators[i]).item()))
    return out
