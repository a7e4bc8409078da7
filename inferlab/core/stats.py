"""EngineStats: a snapshot of the engine's queues and KV memory, with run-long peaks."""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(slots=True)
class EngineStats:
    num_running: int
    num_waiting: int
    kv_layout: str
    block_size: int
    kv_blocks_total: int
    kv_blocks_used: int
    kv_token_slots_allocated: int
    kv_tokens_used: int
    kv_waste: float              # 1 - tokens used / slots allocated, now (0 when nothing allocated)
    peak_kv_blocks_used: int
    peak_kv_waste: float         # the same, at the step where allocation peaked
    max_concurrent_requests: int
    prefix_cache_queries: int    # prompt tokens looked up in the prefix cache
    prefix_cache_hits: int       # prompt tokens served from it
    num_preemptions: int
    num_recomputed_tokens: int   # prompt + output tokens computed again after preemptions
    max_preemptions_per_request: int
    num_steps: int
    clock: str

    @classmethod
    def snapshot(cls, scheduler, kv, peak: "PeakTracker", num_future: int, num_steps: int,
                 clock: str) -> "EngineStats":
        """Now, from the scheduler's queues and the KV manager's usage (``num_future``:
        requests whose arrival time has not come yet, counted as waiting)."""
        u, s = kv.usage(), scheduler
        return cls(
            num_running=len(s.running), num_waiting=len(s.waiting) + num_future,
            kv_layout=kv.layout, block_size=kv.block_size,
            kv_blocks_total=u.blocks_total, kv_blocks_used=u.blocks_used,
            kv_token_slots_allocated=u.slots_allocated, kv_tokens_used=u.tokens_used,
            kv_waste=waste(u.slots_allocated, u.tokens_used),
            peak_kv_blocks_used=peak.blocks, peak_kv_waste=peak.waste,
            max_concurrent_requests=peak.max_running,
            prefix_cache_queries=s.prefix_cache_queries, prefix_cache_hits=s.prefix_cache_hits,
            num_preemptions=s.num_preemptions, num_recomputed_tokens=s.num_recomputed_tokens,
            max_preemptions_per_request=s.max_request_preemptions, num_steps=num_steps,
            clock=clock)

    @property
    def prefix_cache_hit_rate(self) -> float:
        return self.prefix_cache_hits / self.prefix_cache_queries if self.prefix_cache_queries else 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def waste(slots: int, used: int) -> float:
    return 1.0 - used / slots if slots else 0.0


class PeakTracker:
    """Remembers the step where KV allocation peaked, and the waste at that step."""

    def __init__(self):
        self.slots = -1
        self.blocks = 0
        self.waste = 0.0
        self.max_running = 0

    def observe(self, usage, num_running: int) -> None:
        self.max_running = max(self.max_running, num_running)
        self.blocks = max(self.blocks, usage.blocks_used)
        if usage.slots_allocated > self.slots:
            self.slots = usage.slots_allocated
            self.waste = waste(usage.slots_allocated, usage.tokens_used)
