"""The saved trace format: versioned, and defined apart from the in-memory records.

A trace file is data from outside (another machine, another version, a hand edit), so it is
decoded as strictly as user input: the msgspec Structs below are the schema, and decoding
checks every field (type, required key, range, kind) and names the path of the first bad one.
Anything that loads can be replayed and exported.

The in-memory records (``inferlab.core.events``) are converted field by field to and from
these Structs, so a new field on a record changes no file until it is added here, with a
version bump and a migration for the older files.

    version 1 (release 0.1.0): a top-level ``requests`` table (prompt_len, arrival,
        prompt_text) beside the steps; request events are ``{request_id, kind, detail}``.
        Read by ``trace_format_v1`` and migrated to the current form on load.
    version 2: the "queued" request event carries the request's ``info`` (prompt_len,
        arrival, prompt_text cut to 2000 chars); the ``requests`` table is gone (it is
        rebuilt from those events). Unknown keys are refused at every level but ``meta``.
        Later in v2: ``info.priority`` (int, written only when not 0; files without it load
        with priority 0).

A recording written as it runs uses the same ``Step`` struct, one per line
(``trace_lines``: a header line, then a step per line; ``Trace.load`` reads both layouts).

    to_file(trace) / encode(trace) / to_builtins(trace)    in memory -> current file form
    (reading a file of any version: trace_read.from_file)
"""
from __future__ import annotations

import re
import sys
from typing import Annotated, Any, Literal, Union

import msgspec

from ..core.events import (ChunkKind, EmittedToken, KVEvent, KVEventKind, RequestEvent,
                           RequestEventKind, RequestInfo, ScheduledChunk, StepRecord)
from ..errors import TraceFormatError

FORMAT = "inferlab-trace"
VERSION = 2
MAX_BLOCKS = 1 << 22        # far above any real cache; keeps a hostile file from huge arrays
MAX_BLOCK_SIZE = 1 << 16
PROMPT_CHARS = 2000         # prompt text kept in a file, per request

NonNeg = Annotated[int, msgspec.Meta(ge=0)]
Positive = Annotated[int, msgspec.Meta(ge=1)]
Finite = Annotated[float, msgspec.Meta(ge=-sys.float_info.max, le=sys.float_info.max)]
Plain = Union[str, int, float, bool, None]


class _Strict(msgspec.Struct, forbid_unknown_fields=True):
    pass


# --- the current format (version 2) ------------------------------------------------------
class Chunk(_Strict):
    request_id: str
    start: NonNeg
    num_tokens: Positive
    kind: ChunkKind
    samples: bool
    num_cached: NonNeg


class Token(_Strict):
    request_id: str
    token_id: NonNeg
    text: str
    index: NonNeg


class Info(_Strict, omit_defaults=True):
    prompt_len: NonNeg
    arrival: Finite
    prompt_text: Union[str, None]
    priority: int = 0                 # omitted when 0, so such files read as before


class ReqEvent(_Strict):
    request_id: str
    kind: RequestEventKind
    detail: Union[str, None]
    info: Union[Info, None]          # v2: set on "queued"


class BlockEvent(_Strict):
    kind: KVEventKind
    block_ids: list[NonNeg]
    request_id: Union[str, None]


class Step(_Strict):
    step: NonNeg
    t_start: Finite
    t_end: Finite
    wall_duration: Finite
    sim_duration: Union[Finite, None]
    clock: str
    batch: list[Chunk]
    num_batched_tokens: NonNeg
    token_budget: NonNeg
    emitted: list[Token]
    request_events: list[ReqEvent]
    kv_events: list[BlockEvent]
    kv_blocks_used: NonNeg
    kv_blocks_total: Annotated[int, msgspec.Meta(ge=1, le=MAX_BLOCKS)]
    kv_tokens_used: NonNeg
    kv_slots_allocated: NonNeg
    num_running: NonNeg
    num_waiting: NonNeg
    block_size: Annotated[int, msgspec.Meta(ge=1, le=MAX_BLOCK_SIZE)]
    block_tables: dict[str, list[NonNeg]]
    stored_tokens: dict[str, NonNeg]


class TraceFile(_Strict):
    format: Literal["inferlab-trace"]
    version: Literal[2]
    meta: dict[str, Any]
    steps: list[Step]


class MetaKnown(msgspec.Struct):
    """The meta keys inferlab reads (other keys are free-form notes and pass through)."""

    model: Union[str, None] = None
    clock: Union[str, None] = None
    config: dict[str, Plain] = {}


class Header(msgspec.Struct):
    format: Any = None
    version: Any = None


# --- in memory -> file -----------------------------------------------------------------
def _text(s):
    """Prompt text as kept in a file: cut, and safe to encode as UTF-8."""
    if s is None:
        return None
    s = s[:PROMPT_CHARS]
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        s = s.encode("utf-8", "replace").decode("utf-8")
    return s


def _event_to_file(e: RequestEvent) -> ReqEvent:
    i = e.info
    info = None if i is None else Info(i.prompt_len, i.arrival, _text(i.prompt_text),
                                       i.priority)
    return ReqEvent(e.request_id, e.kind, e.detail, info)


def step_to_file(r: StepRecord) -> Step:
    return Step(
        step=r.step, t_start=r.t_start, t_end=r.t_end, wall_duration=r.wall_duration,
        sim_duration=r.sim_duration, clock=r.clock,
        batch=[Chunk(c.request_id, c.start, c.num_tokens, c.kind, c.samples, c.num_cached)
               for c in r.batch],
        num_batched_tokens=r.num_batched_tokens, token_budget=r.token_budget,
        emitted=[Token(e.request_id, e.token_id, e.text, e.index) for e in r.emitted],
        request_events=[_event_to_file(e) for e in r.request_events],
        kv_events=[BlockEvent(e.kind, list(e.block_ids), e.request_id) for e in r.kv_events],
        kv_blocks_used=r.kv_blocks_used, kv_blocks_total=r.kv_blocks_total,
        kv_tokens_used=r.kv_tokens_used, kv_slots_allocated=r.kv_slots_allocated,
        num_running=r.num_running, num_waiting=r.num_waiting, block_size=r.block_size,
        block_tables={k: list(v) for k, v in r.block_tables.items()},
        stored_tokens=dict(r.stored_tokens))


def to_file(trace) -> TraceFile:
    """The current file form of a trace (anything with ``.meta`` and ``.records``)."""
    return TraceFile(FORMAT, VERSION, dict(trace.meta),
                     [step_to_file(r) for r in trace.records])


def encode(trace) -> bytes:
    """A trace as the bytes of a current-version JSON file."""
    return msgspec.json.encode(to_file(trace))


def to_builtins(trace) -> dict:
    """A trace as the current file's JSON value (dicts, lists, strs, numbers)."""
    return msgspec.to_builtins(to_file(trace))


# --- file -> in memory -----------------------------------------------------------------
def step_from_file(s: Step) -> StepRecord:
    def event(e: ReqEvent) -> RequestEvent:
        i = e.info
        info = None if i is None else RequestInfo(i.prompt_len, i.arrival, i.prompt_text,
                                                  i.priority)
        return RequestEvent(e.request_id, e.kind, e.detail, info)
    return StepRecord(
        step=s.step, t_start=s.t_start, t_end=s.t_end, wall_duration=s.wall_duration,
        sim_duration=s.sim_duration, clock=s.clock,
        batch=[ScheduledChunk(c.request_id, c.start, c.num_tokens, c.kind, c.samples,
                              c.num_cached) for c in s.batch],
        num_batched_tokens=s.num_batched_tokens, token_budget=s.token_budget,
        emitted=[EmittedToken(e.request_id, e.token_id, e.text, e.index) for e in s.emitted],
        request_events=[event(e) for e in s.request_events],
        kv_events=[KVEvent(e.kind, e.block_ids, e.request_id) for e in s.kv_events],
        kv_blocks_used=s.kv_blocks_used, kv_blocks_total=s.kv_blocks_total,
        kv_tokens_used=s.kv_tokens_used, kv_slots_allocated=s.kv_slots_allocated,
        num_running=s.num_running, num_waiting=s.num_waiting, block_size=s.block_size,
        block_tables=s.block_tables, stored_tokens=s.stored_tokens)


def request_entry(info: RequestInfo) -> dict:
    """A queued request's info as kept in ``Trace.requests`` (``priority`` only when set)."""
    entry = {"prompt_len": info.prompt_len, "arrival": info.arrival,
             "prompt_text": (info.prompt_text or "")[:PROMPT_CHARS]}
    if info.priority:
        entry["priority"] = info.priority
    return entry


def describe_error(e: msgspec.ValidationError, prefix: str = "$") -> tuple[str, str]:
    """msgspec's "Expected `int` >= 0 - at `$.steps[3].start`" as (path, what)."""
    msg = str(e)
    what, sep, path = msg.rpartition(" - at `")
    if not sep:
        what, path = msg, ""
    path = prefix + path.rstrip("`")[1:] if path else prefix
    what = re.sub(r"`float` [<>]= -?1\.7976931348623157e\+308", "a finite number", what)
    return path, what[:1].lower() + what[1:]


def check_meta(meta: dict) -> tuple[str, str] | None:
    """The free-form meta's known keys: the first problem as (path, what), or None."""
    try:
        msgspec.convert(meta, MetaKnown)
    except msgspec.ValidationError as e:
        return describe_error(e, "$.meta")
    return None


def check_step(s: Step, where: str) -> tuple[str, str] | None:
    """What the schema alone cannot say about one step (its block ids within its cache):
    the first problem as (path under ``where``, what), or None."""
    top = s.kv_blocks_total - 1
    places = [(f"{where}.kv_events[{j}].block_ids", e.block_ids)
              for j, e in enumerate(s.kv_events)]
    places += [(f"{where}.block_tables[{rid!r}]", t) for rid, t in s.block_tables.items()]
    for path, ids in places:
        bad = [b for b in ids if b > top]
        if bad:
            return path, (f"block id {bad[0]} is outside 0..{top} "
                          f"(kv_blocks_total is {s.kv_blocks_total})")
    return None


def check_file(f: TraceFile) -> tuple[str, str] | None:
    """What the schema alone cannot say (the free-form meta's known keys, block ids within
    each step's cache): the first problem as (path, what), or None."""
    problem = check_meta(f.meta)
    for i, s in enumerate(f.steps):
        problem = problem or check_step(s, f"$.steps[{i}]")
    return problem
