"""vLLM's prefix cache as vLLM tells it: a tree of block hashes, stored and evicted over time.

vLLM's KV events name no request and no physical block: a ``BlockStored`` says "these full
blocks, with these tokens, hang under that parent hash", ``BlockRemoved`` "these hashes were
evicted", ``AllBlocksCleared`` "the prefix cache was reset". So the records carry *hash slots*,
not block ids: each distinct (rank, hash) gets a small number the first time it is seen.

In a trace from vLLM (``meta["config"]["kv_ids"] == KV_IDS``) the ``KVEvent``s read:

    KVEvent("cached",  [parent, h1, h2, ...])   h1's parent is ``parent``, h2's is h1, ...;
                                                parent r < num ranks is rank r's root (the
                                                empty prefix)
    KVEvent("evicted", [h, ...])                those hashes left the cache

``HashTree`` turns decoded events into such KVEvents (the connector), and ``TreeState`` folds
KVEvents back into the tree (the view, live or from a saved trace).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..core.events import KVEvent
from .frames import AllBlocksCleared, BlockRemoved, BlockStored, short_hash

KV_IDS = "vllm-block-hashes"


@dataclass(slots=True)
class TreeState:
    """The tree folded from KVEvents: parent of every slot, which are cached now, and when
    (step index) each was last stored / evicted."""

    num_roots: int = 1
    parent: dict[int, int] = field(default_factory=dict)
    live: set[int] = field(default_factory=set)
    stored_at: dict[int, int] = field(default_factory=dict)
    evicted_at: dict[int, int] = field(default_factory=dict)
    times_stored: dict[int, int] = field(default_factory=dict)

    def fold(self, kv_events, step: int = 0) -> None:
        for ev in kv_events:
            ids = list(ev.block_ids)
            if ev.kind == "cached" and len(ids) >= 2:
                prev = ids[0]
                for b in ids[1:]:
                    self.parent[b] = prev
                    self.live.add(b)
                    self.stored_at[b] = step
                    self.evicted_at.pop(b, None)
                    self.times_stored[b] = self.times_stored.get(b, 0) + 1
                    prev = b
            elif ev.kind == "evicted":
                for b in ids:
                    if b in self.live:
                        self.live.discard(b)
                        self.evicted_at[b] = step

    def copy(self) -> "TreeState":
        return TreeState(self.num_roots, dict(self.parent), set(self.live), dict(self.stored_at),
                         dict(self.evicted_at), dict(self.times_stored))

    def children(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for b, p in self.parent.items():
            out.setdefault(p, []).append(b)
        for v in out.values():
            v.sort()
        return out

    def shared(self) -> set[int]:
        """Slots under which more than one stored chain branches (prefixes others reuse)."""
        return {p for p, kids in self.children().items() if p >= self.num_roots and len(kids) > 1}


class HashTree:
    """Hash slots for the connector: decoded vLLM events -> KVEvents (see the module doc)."""

    def __init__(self, num_ranks: int = 1):
        self.num_ranks = max(1, num_ranks)
        self.slot: dict[tuple, int] = {}            # (rank, hash) -> slot
        self.hash_of: list = [None] * self.num_ranks
        self.tokens: dict[int, tuple] = {}          # slot -> token ids of the block
        self.live: dict[int, set[int]] = {}         # rank -> cached slots
        self.children: dict[int, dict[tuple, int]] = {}   # slot -> {block tokens: child}
        self.unknown_removed = 0                    # evictions of hashes stored before we joined
        self.num_stored = 0                         # BlockStored blocks seen

    def _slot(self, rank: int, h) -> int:
        key = (rank, h)
        s = self.slot.get(key)
        if s is None:
            s = self.slot[key] = len(self.hash_of)
            self.hash_of.append(h)
        return s

    def label(self, slot: int) -> str:
        if slot < self.num_ranks:
            return f"rank {slot} root"
        return short_hash(self.hash_of[slot])

    def apply(self, rank: int, ev) -> list[KVEvent]:
        rank = rank if 0 <= rank < self.num_ranks else 0
        live = self.live.setdefault(rank, set())
        if isinstance(ev, BlockStored):
            parent = rank if ev.parent is None else self._slot(rank, ev.parent)
            ids = [self._slot(rank, h) for h in ev.hashes]
            bs = ev.block_size
            prev = parent
            for i, s in enumerate(ids):
                self.tokens[s] = ev.token_ids[i * bs:(i + 1) * bs]
                self.children.setdefault(prev, {})[self.tokens[s]] = s
                prev = s
            live.update(ids)
            self.num_stored += len(ids)
            return [KVEvent("cached", [parent, *ids])]
        if isinstance(ev, BlockRemoved):
            ids = []
            for h in ev.hashes:
                s = self.slot.get((rank, h))
                if s is None:
                    self.unknown_removed += 1
                    continue
                ids.append(s)
                live.discard(s)
            return [KVEvent("evicted", ids)] if ids else []
        if isinstance(ev, AllBlocksCleared):
            ids = sorted(live)
            live.clear()
            return [KVEvent("evicted", ids)] if ids else []
        return []

    def cached_prefix(self, ids, block_size: int, live: set | None = None) -> int:
        """Tokens of ``ids`` whose full blocks hang, in order, under a root of the tree and are
        cached (in ``live``, default: cached now): what vLLM's prefix cache would find; at
        most len(ids) - 1, in whole blocks, as vLLM always computes a prompt's last token."""
        if block_size < 1:
            return 0
        cached = live if live is not None else set().union(*self.live.values())
        most = (len(ids) - 1) // block_size
        best = 0
        for root in range(self.num_ranks):
            node, n = root, 0
            while n < most:
                kid = self.children.get(node, {}).get(tuple(ids[n * block_size:
                                                                 (n + 1) * block_size]))
                if kid is None or kid not in cached:
                    break
                node, n = kid, n + 1
            best = max(best, n)
        return best * block_size

    def num_cached(self) -> int:
        return sum(len(v) for v in self.live.values())
