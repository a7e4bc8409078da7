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

``HashTree`` (``hash_tree``) turns decoded events into such KVEvents (the connector), and
``TreeState`` (here) folds KVEvents back into the tree (the view, live or from a saved trace).
"""
from __future__ import annotations

from dataclasses import dataclass, field

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
