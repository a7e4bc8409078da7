"""What the engine hands back: RequestOutput (with per-request latency metrics)."""
from __future__ import annotations

from dataclasses import dataclass, field

from .request import Request


@dataclass(slots=True)
class RequestMetrics:
    """Engine-clock times (seconds) and the latencies derived from them."""

    arrival_time: float
    first_scheduled_time: float | None
    first_token_time: float | None
    finish_time: float | None
    ttft: float | None              # first token - arrival
    tpot: float | None              # mean time per output token after the first
    itl: list[float]                # inter-token latencies
    e2e: float | None               # finish - arrival
    queue_time: float | None        # first scheduled - arrival
    num_preemptions: int
    num_cached_tokens: int          # prompt tokens served from the prefix cache
    num_prompt_tokens: int
    num_output_tokens: int

    @classmethod
    def of(cls, req: Request) -> "RequestMetrics":
        t = req.times
        ttft = None if t.first_token is None else t.first_token - t.arrival
        itl = [b - a for a, b in zip(t.token_times, t.token_times[1:])]
        tpot = sum(itl) / len(itl) if itl else None
        e2e = None if t.finish is None else t.finish - t.arrival
        queue = None if t.first_scheduled is None else t.first_scheduled - t.arrival
        return cls(t.arrival, t.first_scheduled, t.first_token, t.finish, ttft, tpot, itl, e2e,
                   queue, req.num_preemptions, req.num_cached_tokens, req.num_prompt_tokens,
                   len(req.output_token_ids))


@dataclass(slots=True)
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    finished: bool
    finish_reason: str | None       # "stop" | "length" | "abort" | None while running
    metrics: RequestMetrics
    new_token_ids: list[int] = field(default_factory=list)   # this step's delta
    new_text: str = ""                                        # this step's text delta

    def __repr__(self) -> str:
        return (f"RequestOutput(id={self.request_id!r}, tokens={len(self.token_ids)}, "
                f"finish_reason={self.finish_reason!r}, text={self.text!r})")
