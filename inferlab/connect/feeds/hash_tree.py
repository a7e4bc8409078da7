"""Hash slots for the connector: vLLM's decoded KV events (``wire.kv_events``) -> the lab's
``KVEvent``s in the prefix-tree convention (``prefix_tree``: "cached" [parent, h1, h2, ...],
"evicted" [h, ...], each distinct (rank, hash) a small slot number), and what the tree caches.
"""
from __future__ import annotations

from ...core.events import KVEvent
from ..wire.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, short_hash


class HashTree:
    """Hash slots for the connector: decoded vLLM events -> KVEvents (see ``prefix_tree``)."""

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
