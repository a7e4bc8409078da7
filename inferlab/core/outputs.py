"""What the engine hands back: RequestOutput (with per-request latency metrics).

The latency definitions live here, once: every other place (run metrics, traces, views, the
vLLM connector) computes TTFT, TPOT, ITL and E2E by calling ``RequestMetrics.from_times``.
"""
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
    def from_times(cls, arrival: float, first_scheduled: float | None, token_times: list[float],
                   finish: float | None, *, num_preemptions: int = 0, num_cached_tokens: int = 0,
                   num_prompt_tokens: int = 0) -> "RequestMetrics":
        """The definitions. TTFT: arrival -> first output token. ITL: the gaps between
        consecutive output tokens. TPOT: their mean (decode speed, the first token excluded).
        E2E: arrival -> finish. Queue time: arrival -> first scheduled."""
        first = token_times[0] if token_times else None
        itl = [b - a for a, b in zip(token_times, token_times[1:])]
        return cls(arrival, first_scheduled, first, finish,
                   None if first is None else first - arrival,
                   sum(itl) / len(itl) if itl else None, itl,
                   None if finish is None else finish - arrival,
                   None if first_scheduled is None else first_scheduled - arrival,
                   num_preemptions, num_cached_tokens, num_prompt_tokens, len(token_times))

    @classmethod
    def of(cls, req: Request) -> "RequestMetrics":
        t = req.times
        return cls.from_times(t.arrival, t.first_scheduled, t.token_times, t.finish,
                              num_preemptions=req.num_preemptions,
                              num_cached_tokens=req.num_cached_tokens,
                              num_prompt_tokens=req.num_prompt_tokens)


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
    # SamplingParams(logprobs=k): per generated token {token id: log-probability} of the k
    # most likely tokens and the chosen one; None when not asked for
    logprobs: list[dict[int, float]] | None = None

    def __repr__(self) -> str:
        return (f"RequestOutput(id={self.request_id!r}, tokens={len(self.token_ids)}, "
                f"finish_reason={self.finish_reason!r}, text={self.text!r})")
