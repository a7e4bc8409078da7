"""Step records and the event bus: what the engine did in one step, published once.

Hooks (trace recorder, metrics, widgets) receive a ``StepRecord`` after every step. A hook
that raises is reported once (a warning naming it) and unsubscribed: it never breaks the
engine or the other hooks.
"""
from __future__ import annotations

import traceback
import warnings
from dataclasses import asdict, dataclass, field

from inferlab.core.block_pool import KVEvent
from inferlab.core.scheduler import RequestEvent, ScheduledChunk


@dataclass(slots=True)
class EmittedToken:
    request_id: str
    token_id: int
    text: str                    # the text this token added (may be "" mid-character)
    index: int                   # position in the request's output (0 = first token)


@dataclass(slots=True)
class StepRecord:
    step: int
    t_start: float               # engine clock (seconds) when the step began
    t_end: float                 # engine clock when its tokens were out
    wall_duration: float         # measured seconds for the step
    sim_duration: float | None   # roofline seconds when a simulated clock is set
    clock: str                   # "wall" or e.g. "H100 (simulated)"
    batch: list[ScheduledChunk]
    num_batched_tokens: int
    token_budget: int
    emitted: list[EmittedToken]
    request_events: list[RequestEvent]
    kv_events: list[KVEvent]
    kv_blocks_used: int
    kv_blocks_total: int
    kv_tokens_used: int
    kv_slots_allocated: int
    num_running: int
    num_waiting: int
    block_size: int
    # request_id -> [block ids..., ] and stored tokens, for block maps (small: live requests only)
    block_tables: dict[str, list[int]] = field(default_factory=dict)
    stored_tokens: dict[str, int] = field(default_factory=dict)

    @property
    def num_prefill_tokens(self) -> int:
        return sum(c.num_tokens for c in self.batch if c.kind == "prefill")

    @property
    def num_decode_tokens(self) -> int:
        return sum(c.num_tokens for c in self.batch if c.kind == "decode")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "StepRecord":
        d = dict(d)
        d["batch"] = [ScheduledChunk(**c) for c in d["batch"]]
        d["emitted"] = [EmittedToken(**e) for e in d["emitted"]]
        d["request_events"] = [RequestEvent(**e) for e in d["request_events"]]
        d["kv_events"] = [KVEvent(**e) for e in d["kv_events"]]
        return cls(**d)


class EventBus:
    def __init__(self):
        self._subs: list = []
        self.errors: list[str] = []

    def subscribe(self, fn):
        """Call ``fn(record)`` after every step; returns a function that unsubscribes."""
        if not callable(fn):
            from inferlab.errors import InvalidTypeError
            raise InvalidTypeError(f"subscribe() needs a callable, got {type(fn).__name__}")
        self._subs.append(fn)
        return lambda: self.unsubscribe(fn)

    def unsubscribe(self, fn) -> None:
        if fn in self._subs:
            self._subs.remove(fn)

    def __len__(self):
        return len(self._subs)

    def publish(self, record: StepRecord) -> None:
        for fn in list(self._subs):
            try:
                fn(record)
            except Exception as e:  # noqa: BLE001 - a hook must never break the engine
                name = getattr(fn, "__qualname__", repr(fn))
                msg = f"inferlab: hook {name} raised {type(e).__name__}: {e}; it was unsubscribed"
                self.errors.append(msg + "\n" + traceback.format_exc())
                self.unsubscribe(fn)
                warnings.warn(msg, RuntimeWarning, stacklevel=2)
