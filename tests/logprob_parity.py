"""Parity in half precision, as vLLM's tests judge it (``check_logprobs_close``).

In bfloat16 two correct engines part ways where the model's two best tokens are nearly tied:
summation order changes the last bit of a logit. So greedy outputs are compared token by token
up to the first difference, and there each side's token must be among the other side's
``k`` likeliest; after it the sequences no longer share a context and are not compared.
"""
from __future__ import annotations


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first differing token, or None when one is a prefix of the other."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


def logprobs_close(ours: list[int], our_lps: list[dict[int, float]], theirs: list[int],
                   their_lps: list[dict[int, float]], k: int = 5) -> str | None:
    """None when the two greedy outputs agree, or part where each chose a token in the
    other's top ``k``; else what is wrong, in words."""
    i = first_difference(ours, theirs)
    if i is None:
        return None if len(ours) == len(theirs) else f"lengths {len(ours)} vs {len(theirs)}"
    top_ours = sorted(our_lps[i], key=our_lps[i].get, reverse=True)[:k]
    top_theirs = sorted(their_lps[i], key=their_lps[i].get, reverse=True)[:k]
    if theirs[i] in top_ours and ours[i] in top_theirs:
        return None
    return (f"token {i}: ours {ours[i]} (their top-{k}: {top_theirs}), theirs {theirs[i]} "
            f"(our top-{k}: {top_ours})")
