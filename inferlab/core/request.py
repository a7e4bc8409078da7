"""Request: one prompt's journey through the engine, as an explicit state machine.

The scheduler never asks "is this a prefill or a decode?". A request simply has
``num_tokens`` (prompt + generated so far) and ``num_computed_tokens`` (those whose
keys/values are in the KV cache); each step schedules some of the difference.
When the two meet, the model's last position yields the next token.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

from .params import SamplingParams


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED_STOPPED = "finished_stopped"      # eos or a stop string / stop token
    FINISHED_LENGTH = "finished_length"        # max_tokens or max_model_len
    FINISHED_ABORTED = "finished_aborted"

    @property
    def finished(self) -> bool:
        return self.value.startswith("finished")


# Allowed transitions; anything else is a bug in the scheduler.
_TRANSITIONS = {
    RequestStatus.WAITING: {RequestStatus.RUNNING, RequestStatus.FINISHED_ABORTED},
    RequestStatus.RUNNING: {RequestStatus.PREEMPTED, RequestStatus.FINISHED_STOPPED,
                            RequestStatus.FINISHED_LENGTH, RequestStatus.FINISHED_ABORTED},
    RequestStatus.PREEMPTED: {RequestStatus.RUNNING, RequestStatus.FINISHED_ABORTED},
}

FINISH_REASONS = {
    RequestStatus.FINISHED_STOPPED: "stop",
    RequestStatus.FINISHED_LENGTH: "length",
    RequestStatus.FINISHED_ABORTED: "abort",
}


@dataclass(slots=True)
class RequestTimes:
    """Engine-clock timestamps (seconds). None until the event happens."""

    arrival: float = 0.0
    first_scheduled: float | None = None
    token_times: list[float] = field(default_factory=list)
    finish: float | None = None


@dataclass(slots=True, eq=False)
class Request:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    prompt_text: str | None = None
    eos_token_id: int | None = None
    arrival_time: float = 0.0
    status: RequestStatus = RequestStatus.WAITING
    output_token_ids: list[int] = field(default_factory=list)
    output_logprobs: list[dict[int, float]] = field(default_factory=list)  # params.logprobs set
    num_computed_tokens: int = 0
    num_cached_tokens: int = 0       # prompt tokens served from the prefix cache (first admission)
    num_preemptions: int = 0
    num_recomputed_tokens: int = 0   # tokens computed again after preemptions
    max_computed_tokens: int = 0     # high-water mark of num_computed_tokens (K/V ever written)
    priority: int = 0                # lower runs first (scheduling_policy="priority")
    stop_reason: str | int | None = None
    times: RequestTimes = field(default_factory=RequestTimes)

    def __post_init__(self):
        self.times.arrival = self.arrival_time

    # --- token bookkeeping -------------------------------------------------
    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    def token_at(self, i: int) -> int:
        p = len(self.prompt_token_ids)
        return self.prompt_token_ids[i] if i < p else self.output_token_ids[i - p]

    @property
    def num_uncomputed(self) -> int:
        return self.num_tokens - self.num_computed_tokens

    @property
    def max_total_tokens(self) -> int:
        return self.num_prompt_tokens + self.params.max_tokens

    def banned_token_ids(self) -> list[int]:
        """Token ids the sampler may not pick now: until ``min_tokens`` outputs exist, EOS and
        the stop token ids (vLLM's min-tokens logits processor, which masks EOS whatever
        ``ignore_eos`` says)."""
        p = self.params
        if len(self.output_token_ids) >= p.min_tokens:
            return []
        ids = list(p.stop_token_ids)
        if self.eos_token_id is not None:
            ids.append(self.eos_token_id)
        return ids

    # --- state machine -----------------------------------------------------
    def can_move_to(self, new: RequestStatus) -> bool:
        return new in _TRANSITIONS.get(self.status, ())

    def move_to(self, new: RequestStatus) -> None:
        if not self.can_move_to(new):
            raise RuntimeError(f"request {self.request_id}: illegal transition "
                               f"{self.status.name} -> {new.name}")
        self.status = new

    @property
    def finished(self) -> bool:
        return self.status.finished

    @property
    def finish_reason(self) -> str | None:
        return FINISH_REASONS.get(self.status)
