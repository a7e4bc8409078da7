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
    num_steps: int
    clock: str

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
