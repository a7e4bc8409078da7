"""BlockPool: the physical KV blocks, their reference counts, and the prefix-cache index.

Knows nothing about requests. Blocks are handed out from the head of a free queue and
returned to its tail, so the queue is also the LRU eviction order of cached blocks:
a freed block that still holds a full, hashed prefix stays findable until it reaches
the head and is handed out again (evicted).
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import NewType

from .events import KVEvent

BlockHash = NewType("BlockHash", bytes)   # names a full block *and* the whole prefix before it
ROOT_HASH = BlockHash(b"inferlab-root")


def hash_block(parent: BlockHash, token_ids) -> BlockHash:
    """Chained hash of one full block: it names the whole prefix up to this block."""
    h = hashlib.sha256(parent)
    h.update(b",".join(str(int(t)).encode() for t in token_ids))
    return BlockHash(h.digest())


@dataclass(slots=True)
class BlockPool:
    num_blocks: int
    enable_caching: bool = True
    ref_cnt: list[int] = field(init=False)
    block_hash: list[BlockHash | None] = field(init=False)
    free_queue: OrderedDict = field(init=False)      # block_id -> None; head = next handed out
    cached: dict[BlockHash, int] = field(init=False)   # hash -> block_id
    events: list[KVEvent] = field(init=False)

    def __post_init__(self):
        if self.num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {self.num_blocks}")
        self.ref_cnt = [0] * self.num_blocks
        self.block_hash = [None] * self.num_blocks
        self.free_queue = OrderedDict((b, None) for b in range(self.num_blocks))
        self.cached = {}
        self.events = []

    @property
    def num_free(self) -> int:
        return len(self.free_queue)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self.free_queue)

    def allocate(self, n: int, request_id: str | None = None) -> list[int]:
        """Take ``n`` blocks from the head of the free queue (evicting cached ones)."""
        if n > len(self.free_queue):
            raise RuntimeError(f"asked for {n} blocks with {len(self.free_queue)} free")
        out, evicted = [], []
        for _ in range(n):
            b, _ = self.free_queue.popitem(last=False)
            h = self.block_hash[b]
            if h is not None:
                evicted.append(b)
                if self.cached.get(h) == b:
                    del self.cached[h]
                self.block_hash[b] = None
            self.ref_cnt[b] = 1
            out.append(b)
        if evicted:
            self.events.append(KVEvent("evicted", evicted, request_id))
        if out:
            self.events.append(KVEvent("allocated", out, request_id))
        return out

    def lookup(self, block_hash: BlockHash) -> int | None:
        return self.cached.get(block_hash) if self.enable_caching else None

    def touch(self, block_ids: list[int], request_id: str | None = None) -> None:
        """Take another reference on cached blocks (a prefix-cache hit)."""
        for b in block_ids:
            if self.ref_cnt[b] == 0:
                del self.free_queue[b]
            self.ref_cnt[b] += 1
        if block_ids:
            self.events.append(KVEvent("shared", list(block_ids), request_id))

    def cache(self, block_id: int, block_hash: BlockHash, request_id: str | None = None) -> None:
        """Index a now-full block by its prefix hash (first writer wins)."""
        if not self.enable_caching or self.block_hash[block_id] is not None:
            return
        self.block_hash[block_id] = block_hash
        self.cached.setdefault(block_hash, block_id)
        self.events.append(KVEvent("cached", [block_id], request_id))

    def free(self, block_ids: list[int], request_id: str | None = None) -> None:
        """Drop one reference from each block; blocks reaching zero go to the queue tail.

        Pass blocks in eviction order: callers free a sequence's blocks tail first, so
        the start of a prefix (most shareable) is evicted last.
        """
        released = []
        for b in block_ids:
            if self.ref_cnt[b] <= 0:
                raise RuntimeError(f"block {b} freed with ref count {self.ref_cnt[b]}")
            self.ref_cnt[b] -= 1
            if self.ref_cnt[b] == 0:
                self.free_queue[b] = None
                released.append(b)
        if released:
            self.events.append(KVEvent("freed", released, request_id))

    def num_evictable_among(self, block_ids) -> int:
        """How many of these (cache-hit) blocks currently sit in the free queue."""
        return sum(1 for b in block_ids if self.ref_cnt[b] == 0)

    def drain_events(self) -> list[KVEvent]:
        ev, self.events = self.events, []
        return ev
