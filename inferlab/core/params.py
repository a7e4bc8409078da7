"""SamplingParams: how one request picks its next tokens and when it stops."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import InvalidInputError, check_type

MAX_LOGPROBS = 20          # as OpenAI's top_logprobs


@dataclass(slots=True)
class SamplingParams:
    """Per-request sampling settings, validated on construction.

    temperature 0 means greedy. ``top_k=0`` and ``top_p=1.0`` disable those filters.
    ``seed`` makes a sampled request reproducible whatever else is in the batch.
    ``stop`` strings end generation; the returned text is cut just before the match.
    ``min_tokens`` (as in vLLM): until that many tokens are out, EOS and ``stop_token_ids``
    cannot be sampled and stop strings are not looked for.
    ``logprobs`` (as in vLLM): with k, each generated token comes with the log-probabilities
    of the model's k most likely tokens and of the token chosen, from the raw logits (before
    temperature, top-k/top-p and min_tokens), in ``RequestOutput.logprobs``.
    """

    max_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: list[str] | str | None = None
    ignore_eos: bool = False
    stop_token_ids: list[int] = field(default_factory=list)
    min_tokens: int = 0
    logprobs: int | None = None

    def __post_init__(self):
        check_type("max_tokens", self.max_tokens, int, "an int >= 1")
        if self.max_tokens < 1:
            raise InvalidInputError(f"max_tokens must be >= 1, got {self.max_tokens}")
        check_type("temperature", self.temperature, (int, float), "a float >= 0")
        if not self.temperature >= 0.0:  # also rejects NaN
            raise InvalidInputError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        check_type("top_p", self.top_p, (int, float), "a float in (0, 1]")
        if not 0.0 < self.top_p <= 1.0:
            raise InvalidInputError(f"top_p must be in (0, 1], got {self.top_p}")
        check_type("top_k", self.top_k, int, "an int >= 0 (0 = off)")
        if self.top_k < 0:
            raise InvalidInputError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if self.seed is not None:
            check_type("seed", self.seed, int, "an int or None")
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        if self.stop is None:
            self.stop = []
        check_type("stop", self.stop, (list, tuple), "a string, a list of strings, or None")
        for s in self.stop:
            check_type("stop[i]", s, str, "a non-empty string")
            if not s:
                raise InvalidInputError("stop strings must be non-empty")
        self.stop = list(self.stop)
        check_type("ignore_eos", self.ignore_eos, bool, "a bool")
        check_type("stop_token_ids", self.stop_token_ids, (list, tuple), "a list of ints")
        self.stop_token_ids = [check_type("stop_token_ids[i]", t, int, "an int")
                               for t in self.stop_token_ids]
        check_type("min_tokens", self.min_tokens, int, "an int >= 0")
        if not 0 <= self.min_tokens <= self.max_tokens:
            raise InvalidInputError(f"min_tokens must be between 0 and max_tokens "
                                    f"({self.max_tokens}), got {self.min_tokens}")
        if self.logprobs is not None:
            check_type("logprobs", self.logprobs, int, f"an int from 0 to {MAX_LOGPROBS}, or None")
            if not 0 <= self.logprobs <= MAX_LOGPROBS:
                raise InvalidInputError(f"logprobs must be from 0 to {MAX_LOGPROBS} (or None), "
                                        f"got {self.logprobs}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1
