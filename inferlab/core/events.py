"""The engine's typed records, and the event bus that publishes them once per step.

Every layer talks through these small records: the scheduler's decision (``SchedulerOutput``
of ``ScheduledChunk``), what happened to requests (``RequestEvent``) and to KV blocks
(``KVEvent``), the tokens that came out (``EmittedToken``), and ``StepRecord``, all of one step.

Hooks (trace recorder, metrics, widgets) receive a ``StepRecord`` after every step. A hook
that raises is reported once (a warning naming it) and unsubscribed: it never breaks the
engine or the other hooks. The saved (file) form of these records is defined apart, in
``inferlab.observe.trace_format``, so a new field here never silently changes a file.
"""
from __future__ import annotations

import traceback
import warnings
from dataclasses import dataclass, field
from typing import Literal

ChunkKind = Literal["prefill", "decode"]
RequestEventKind = Literal["queued", "admitted", "preempted", "finished", "aborted", "rejected"]
KVEventKind = Literal["allocated", "freed", "shared", "cached", "evicted"]


@dataclass(slots=True)
class ScheduledChunk:
    """One request's slice of a step."""

    request_id: str
    start: int              # num_computed_tokens before this step (position of the first token)
    num_tokens: int         # tokens computed this step
    kind: ChunkKind         # "prefill" (prompt or recompute) | "decode"
    samples: bool           # True when the slice reaches the end, so a token is sampled
    num_cached: int = 0     # tokens just served from the prefix cache on admission


@dataclass(slots=True)
class SchedulerOutput:
    chunks: list[ScheduledChunk] = field(default_factory=list)
    block_tables: dict[str, list[int]] = field(default_factory=dict)
    num_batched_tokens: int = 0

    @property
    def is_empty(self) -> bool:
        return not self.chunks


@dataclass(slots=True)
class RequestInfo:
    """What a request is, told once when it is queued (so observers need no engine access)."""

    prompt_len: int
    arrival: float
    prompt_text: str | None = None
    priority: int = 0                    # lower runs first under scheduling_policy="priority"


@dataclass(slots=True)
class RequestEvent:
    request_id: str
    kind: RequestEventKind
    detail: str | None = None
    info: RequestInfo | None = None      # set on "queued"


@dataclass(slots=True)
class KVEvent:
    """What happened to some physical blocks during a step."""

    kind: KVEventKind
    block_ids: list[int]
    request_id: str | None = None


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


class EventBus:
    def __init__(self):
        self._subs: list = []
        self.errors: list[str] = []

    def subscribe(self, fn):
        """Call ``fn(record)`` after every step; returns a function that unsubscribes."""
        if not callable(fn):
            from ..errors import InvalidTypeError
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
