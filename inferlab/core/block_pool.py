"""BlockPool: the physical KV blocks, their reference counts, and the prefix-cache index.

Knows nothing about requests.

Free blocks wait in two FIFO queues, and ``allocate`` takes from the head of the first one
before touching the second:

* ``free_uncached`` — free blocks that hold no prefix hash (never used, or a partial last
  block): handing one out costs nothing;
* ``free_cached`` — free blocks that still hold a full, hashed prefix, oldest freed first
  (LRU). They stay findable until they reach the head and are handed out (evicted).

So cached prefixes survive as long as there is anything cheaper to give away, and
``free_queue`` (uncached, then cached) is exactly the order blocks will be handed out in.
``evict_cached_last=False`` keeps the older single-queue policy (every freed block joins
one LRU queue, cached or not); only the prefix-reuse benchmark uses it, for its A/B.

A block is indexed as soon as it is allocated to be filled in this step (vLLM's
``allocate_slots`` does the same), so requests admitted together share it at once. The index
maps a hash to *every* block that holds it (a request that computed a prefix before it was
cached, e.g. after a reset or when another request got there first, keeps its own copy). ``lookup`` prefers a copy that
is in use (a hit then takes no block out of the free queue), else the copy indexed first;
evicting one copy leaves the others findable.
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
    evict_cached_last: bool = True       # False: the old single LRU queue (benchmark A/B only)
    ref_cnt: list[int] = field(init=False)
    block_hash: list[BlockHash | None] = field(init=False)
    free_uncached: OrderedDict = field(init=False)   # block_id -> None; head = next handed out
    free_cached: OrderedDict = field(init=False)     # block_id -> None; head = least recently freed
    cached: dict[BlockHash, dict[int, None]] = field(init=False)   # hash -> its blocks, in index order
    events: list[KVEvent] = field(init=False)

    def __post_init__(self):
        if self.num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {self.num_blocks}")
        self.ref_cnt = [0] * self.num_blocks
        self.block_hash = [None] * self.num_blocks
        self.free_uncached = OrderedDict((b, None) for b in range(self.num_blocks))
        self.free_cached = OrderedDict()
        self.cached = {}
        self.events = []

    @property
    def free_queue(self) -> list[int]:
        """Free block ids in the order ``allocate`` hands them out."""
        return [*self.free_uncached, *self.free_cached]

    @property
    def num_free(self) -> int:
        return len(self.free_uncached) + len(self.free_cached)

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    @property
    def num_cached_blocks(self) -> int:
        """Blocks holding a findable prefix (in use or free): ``len(cached_block_ids())``."""
        return sum(len(ids) for ids in self.cached.values())

    def cached_block_ids(self) -> set[int]:
        return {b for ids in self.cached.values() for b in ids}

    def allocate(self, n: int, request_id: str | None = None) -> list[int]:
        """Take ``n`` free blocks: hashless ones first, then cached ones in LRU order
        (evicting their prefix from the index)."""
        if n > self.num_free:
            raise RuntimeError(f"asked for {n} blocks with {self.num_free} free")
        out, evicted = [], []
        for _ in range(n):
            queue = self.free_uncached if self.free_uncached else self.free_cached
            b, _ = queue.popitem(last=False)
            if self.block_hash[b] is not None:
                self._uncache(b)
                evicted.append(b)
            self.ref_cnt[b] = 1
            out.append(b)
        if evicted:
            self.events.append(KVEvent("evicted", evicted, request_id))
        if out:
            self.events.append(KVEvent("allocated", out, request_id))
        return out

    def _uncache(self, b: int) -> None:
        """Forget block ``b``'s hash; the other blocks holding it stay findable."""
        h = self.block_hash[b]
        ids = self.cached[h]
        del ids[b]
        if not ids:
            del self.cached[h]
        self.block_hash[b] = None

    def uncache(self, block_ids: list[int]) -> None:
        """Forget the hashes of blocks indexed ahead whose K/V was never written (their
        request left before its step ran); a free one moves to the uncached queue."""
        for b in block_ids:
            if self.block_hash[b] is None:
                continue
            self._uncache(b)
            if self.ref_cnt[b] == 0 and b in self.free_cached:
                del self.free_cached[b]
                self.free_uncached[b] = None

    def lookup(self, block_hash: BlockHash) -> int | None:
        """A block holding ``block_hash``: one in use if any, else the first indexed."""
        if not self.enable_caching:
            return None
        ids = self.cached.get(block_hash)
        if not ids:
            return None
        return next((b for b in ids if self.ref_cnt[b] > 0), next(iter(ids)))

    def touch(self, block_ids: list[int], request_id: str | None = None) -> None:
        """Take another reference on cached blocks (a prefix-cache hit)."""
        for b in block_ids:
            if self.ref_cnt[b] == 0:
                self._queue_of(b).pop(b)
            self.ref_cnt[b] += 1
        if block_ids:
            self.events.append(KVEvent("shared", list(block_ids), request_id))

    def _queue_of(self, b: int) -> OrderedDict:
        """The free queue block ``b`` joins (or sits in) while its ref count is zero."""
        if self.evict_cached_last and self.block_hash[b] is not None:
            return self.free_cached
        return self.free_uncached

    def cache(self, block_id: int, block_hash: BlockHash, request_id: str | None = None) -> None:
        """Index a now-full block by its prefix hash, beside any other copy of that prefix."""
        if not self.enable_caching or self.block_hash[block_id] is not None:
            return
        self.block_hash[block_id] = block_hash
        self.cached.setdefault(block_hash, {})[block_id] = None
        self.events.append(KVEvent("cached", [block_id], request_id))

    def free(self, block_ids: list[int], request_id: str | None = None) -> None:
        """Drop one reference from each block; blocks reaching zero join their queue's tail.

        Pass blocks in eviction order: callers free a sequence's blocks tail first, so
        the start of a prefix (most shareable) is evicted last.
        """
        released = []
        for b in block_ids:
            if self.ref_cnt[b] <= 0:
                raise RuntimeError(f"block {b} freed with ref count {self.ref_cnt[b]}")
            self.ref_cnt[b] -= 1
            if self.ref_cnt[b] == 0:
                self._queue_of(b)[b] = None
                released.append(b)
        if released:
            self.events.append(KVEvent("freed", released, request_id))

    def reset_prefix_cache(self) -> bool:
        """Forget every cached prefix (vLLM's name). Refused (False, nothing changed) while
        any block is in use, as in vLLM: a running request's blocks would lose their hashes
        under it. Otherwise the dropped blocks join the uncached queue's tail in the order
        they would have been evicted, one "evicted" event names them, and it returns True."""
        if self.num_used:
            return False
        dropped = [b for b in self.free_queue if self.block_hash[b] is not None]
        for b in dropped:
            self.block_hash[b] = None
        self.free_uncached.update(self.free_cached)
        self.free_cached.clear()
        self.cached.clear()
        if dropped:
            self.events.append(KVEvent("evicted", dropped, None))
        return True

    def num_evictable_among(self, block_ids) -> int:
        """How many of these (cache-hit) blocks currently sit in a free queue."""
        return sum(1 for b in block_ids if self.ref_cnt[b] == 0)

    def drain_events(self) -> list[KVEvent]:
        ev, self.events = self.events, []
        return ev
