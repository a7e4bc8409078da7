"""vLLM's KV cache event messages, decoded: one ZMQ multipart message -> one ``KVBatch``.

A message is ``[topic, seq (8 bytes, big-endian), payload (msgpack)]``. The payload is an
``EventBatch`` encoded as an array ``[ts, events, data_parallel_rank?]``. Its events come in
two forms, both accepted:

    map form (vLLM 0.32, seen here)   {"type": "BlockStored", "block_hashes": [...], ...}
    array form (older releases,       ["BlockStored", block_hashes, parent_block_hash,
      array_like=True structs)          token_ids, block_size, lora_id, medium, ...]

Events: ``BlockStored`` (a chain of full blocks: hashes, the parent of the first, their tokens),
``BlockRemoved`` (hashes evicted), ``AllBlocksCleared`` (the prefix cache was reset). A hash
is an int (vLLM's default, 64 bits) or bytes. Anything else is an ``UnknownEvent`` (reported,
skipped); a bad field makes its event a ``BadEvent``; a message that cannot be read at all
raises ``FrameError``. Nothing here raises anything else, whatever the bytes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

import msgspec

from ...errors import InferlabError

Hash = Union[int, bytes]
END_SEQ = -1                          # the replay socket's end-of-replay marker


class FrameError(InferlabError, ValueError):
    """A KV event message that cannot be read (wrong parts, seq, or payload)."""


@dataclass(slots=True, frozen=True)
class BlockStored:
    hashes: tuple
    parent: Hash | None
    token_ids: tuple
    block_size: int
    medium: str | None = None


@dataclass(slots=True, frozen=True)
class BlockRemoved:
    hashes: tuple
    medium: str | None = None


@dataclass(slots=True, frozen=True)
class AllBlocksCleared:
    pass


@dataclass(slots=True, frozen=True)
class UnknownEvent:
    type: str


@dataclass(slots=True, frozen=True)
class BadEvent:
    problem: str


Event = Union[BlockStored, BlockRemoved, AllBlocksCleared, UnknownEvent, BadEvent]


@dataclass(slots=True)
class KVBatch:
    seq: int
    ts: float
    events: list = field(default_factory=list)
    rank: int | None = None
    topic: bytes = b""
    form: str = "map"                 # "map" | "array" | "empty"


def short_hash(h) -> str:
    """A block hash as 8 hex digits (for labels)."""
    if isinstance(h, int):
        return f"{h & (2**64 - 1):016x}"[:8]
    if isinstance(h, (bytes, bytearray)):
        return bytes(h).hex()[:8]
    return str(h)[:8]


def _is_hash(h) -> bool:
    return isinstance(h, (int, bytes)) and not isinstance(h, bool)


def _hashes(v, what: str) -> tuple:
    if not isinstance(v, list) or not all(_is_hash(h) for h in v):
        raise ValueError(f"{what} must be a list of block hashes (ints or bytes)")
    return tuple(v)


def _stored(type_, get) -> BlockStored:
    hashes = _hashes(get("block_hashes", 1), "block_hashes")
    parent = get("parent_block_hash", 2)
    if parent is not None and not _is_hash(parent):
        raise ValueError("parent_block_hash must be a block hash or nil")
    tokens = get("token_ids", 3)
    if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
        raise ValueError("token_ids must be a list of ints")
    bs = get("block_size", 4)
    if not isinstance(bs, int) or isinstance(bs, bool) or bs < 1:
        raise ValueError(f"block_size must be an int >= 1, got {bs!r}")
    if not hashes:
        raise ValueError("block_hashes is empty")
    medium = get("medium", 6)
    return BlockStored(hashes, parent, tuple(tokens), bs,
                       medium if isinstance(medium, str) else None)


def _removed(type_, get) -> BlockRemoved:
    medium = get("medium", 2)
    return BlockRemoved(_hashes(get("block_hashes", 1), "block_hashes"),
                        medium if isinstance(medium, str) else None)


KINDS = {"BlockStored": _stored, "BlockRemoved": _removed,
         "AllBlocksCleared": lambda type_, get: AllBlocksCleared()}


def decode_event(ev) -> tuple[Event, str]:
    """One event in either form -> (event, form)."""
    if isinstance(ev, dict):
        form, type_ = "map", ev.get("type")

        def get(name, _pos):
            return ev.get(name)
    elif isinstance(ev, list) and ev:
        form, type_ = "array", ev[0]

        def get(_name, pos):
            return ev[pos] if pos < len(ev) else None
    else:
        return BadEvent(f"an event must be a map or a tagged array, got {type(ev).__name__}"), "?"
    if not isinstance(type_, str):
        return BadEvent(f"event without a type tag ({str(ev)[:80]})"), form
    make = KINDS.get(type_)
    if make is None:
        return UnknownEvent(type_), form
    try:
        return make(type_, get), form
    except (ValueError, TypeError, IndexError) as e:
        return BadEvent(f"{type_}: {e}"), form


def decode_frame(parts) -> KVBatch:
    """A multipart message ``[topic, seq, payload]`` -> KVBatch. Raises FrameError."""
    if not isinstance(parts, (list, tuple)) or len(parts) != 3:
        n = len(parts) if isinstance(parts, (list, tuple)) else type(parts).__name__
        raise FrameError(f"a KV event message has 3 parts (topic, seq, payload), got {n}")
    topic, seq_b, payload = (bytes(p) for p in parts)
    if len(seq_b) != 8:
        raise FrameError(f"the sequence number must be 8 bytes (big-endian), got {len(seq_b)}")
    seq = int.from_bytes(seq_b, "big", signed=True)
    try:
        obj = msgspec.msgpack.decode(payload)
    except (msgspec.DecodeError, ValueError, TypeError) as e:
        raise FrameError(f"seq {seq}: the payload is not msgpack ({e})") from None
    if isinstance(obj, dict):                   # tolerate a map-encoded batch too
        obj = [obj.get("ts"), obj.get("events"), obj.get("data_parallel_rank")]
    if not isinstance(obj, list) or len(obj) < 2:
        raise FrameError(f"seq {seq}: the payload is not an event batch [ts, events, rank]")
    ts, events = obj[0], obj[1]
    rank = obj[2] if len(obj) > 2 else None
    if not isinstance(ts, (int, float)) or isinstance(ts, bool) or not isinstance(events, list):
        raise FrameError(f"seq {seq}: an event batch needs a number ts and a list of events")
    if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool) or rank < 0):
        raise FrameError(f"seq {seq}: data_parallel_rank must be an int >= 0, got {rank!r}")
    out = KVBatch(seq=seq, ts=float(ts), rank=rank, topic=topic, form="empty")
    for ev in events:
        e, form = decode_event(ev)
        out.events.append(e)
        if form in ("map", "array"):
            out.form = form if out.form in ("empty", form) else "mixed"
    return out
