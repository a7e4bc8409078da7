"""KV cache managers: which physical slots hold each request's keys and values.

Two layouts behind one interface, so the scheduler never knows which it has:

* ``PagedKVManager`` — blocks of ``block_size`` tokens, allocated as tokens are
  computed, shared between requests through the prefix cache (vLLM's PagedAttention).
* ``ContiguousKVManager`` — the pre-paging allocator: at admission a request reserves one
  contiguous run of slots big enough for its whole future (``max_model_len`` or
  prompt + max_tokens) in a linear arena, first fit. Reserved-but-unused slots are waste.

Both hand the model runner a block table, so the same attention kernels serve both:
a contiguous reservation is simply a run of consecutive block ids.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from .block_pool import ROOT_HASH, BlockHash, BlockPool, hash_block
from .events import KVEvent
from .request import Request
from .shapes import cdiv


@dataclass(slots=True)
class KVUsage:
    blocks_total: int
    blocks_used: int
    slots_allocated: int      # token slots held by requests (blocks x block_size, or reservations)
    tokens_used: int          # token slots holding a computed K/V (shared blocks counted once)


class KVManager(Protocol):
    """What the scheduler, the engine and the benchmarks may ask of a KV cache manager."""

    layout: Literal["paged", "contiguous"]
    block_size: int
    num_blocks: int
    enable_prefix_caching: bool

    def can_ever_fit(self, max_total_tokens: int) -> bool: ...
    def get_computed_blocks(self, req: Request) -> list[int]:
        """Cached blocks that already hold a prefix of the request (prefix-cache hits)."""
    def allocate_slots(self, req: Request, num_new_tokens: int,
                       computed_blocks: list[int] = ()) -> bool:
        """Make room for more tokens; False (and nothing changed) when there is no room."""
    def commit(self, req: Request) -> None:
        """K/V are written up to ``req.num_computed_tokens``."""
    def shares_unwritten(self, req: Request) -> bool:
        """Another request holds a block this one fills in the step being scheduled."""
    def free(self, req: Request, keep_hashes: bool = False) -> None: ...
    def block_table(self, rid: str) -> list[int]: ...
    def stored_tokens(self, rid: str) -> int: ...
    def usage(self) -> KVUsage: ...
    def block_ref_counts(self) -> list[int]: ...
    def cached_block_ids(self) -> set[int]: ...
    def reset_prefix_cache(self) -> bool:
        """Drop every cached prefix; False (nothing changed) while a request holds blocks."""
    def drain_events(self) -> list[KVEvent]: ...


class PagedKVManager:
    layout = "paged"

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True,
                 evict_cached_last: bool = True, index_ahead: bool = True):
        self.block_size = block_size
        self.num_blocks = num_blocks
        # evict_cached_last=False: the old single free queue, for the prefix-reuse benchmark
        self.pool = BlockPool(num_blocks, enable_caching=enable_prefix_caching,
                              evict_cached_last=evict_cached_last)
        self.enable_prefix_caching = enable_prefix_caching
        # index_ahead=False: blocks become findable only after their step ran (the lab before
        # it followed vLLM), so requests admitted together each compute a shared prefix
        self.index_ahead = index_ahead
        self.tables: dict[str, list[int]] = {}
        self._hashes: dict[str, list[BlockHash]] = {}  # chained hashes of the request's full blocks
        self._num_indexed: dict[str, int] = {}         # full blocks indexed in the prefix cache
        self._num_stored: dict[str, int] = {}          # tokens with K/V written

    # --- admission -----------------------------------------------------------
    def blocks_needed(self, num_tokens: int) -> int:
        return cdiv(num_tokens, self.block_size)

    def can_ever_fit(self, max_total_tokens: int) -> bool:
        return self.blocks_needed(max_total_tokens) <= self.num_blocks

    def _block_hashes(self, req: Request) -> list[BlockHash]:
        hashes = self._hashes.setdefault(req.request_id, [])
        bs, n_full = self.block_size, req.num_tokens // self.block_size
        tokens = req.all_token_ids if len(hashes) < n_full else None
        while len(hashes) < n_full:
            i = len(hashes)
            parent = hashes[-1] if hashes else ROOT_HASH
            hashes.append(hash_block(parent, tokens[i * bs:(i + 1) * bs]))
        return hashes

    def get_computed_blocks(self, req: Request) -> list[int]:
        """Longest run of cached full blocks matching the request's tokens.

        Stops one token short of the end, so at least one token is computed and yields logits.
        """
        if not self.enable_prefix_caching:
            return []
        hits = []
        max_blocks = (req.num_tokens - 1) // self.block_size
        for h in self._block_hashes(req)[:max_blocks]:
            b = self.pool.lookup(h)
            if b is None:
                break
            hits.append(b)
        return hits

    def allocate_slots(self, req: Request, num_new_tokens: int,
                       computed_blocks: list[int] = ()) -> bool:
        """Make room for ``num_new_tokens`` more tokens; False (nothing changed) if no room."""
        rid = req.request_id
        table = self.tables.get(rid, [])
        hit_tokens = len(computed_blocks) * self.block_size
        total = req.num_computed_tokens + hit_tokens + num_new_tokens
        num_new_blocks = self.blocks_needed(total) - len(table) - len(computed_blocks)
        num_new_blocks = max(num_new_blocks, 0)
        if num_new_blocks + self.pool.num_evictable_among(computed_blocks) > self.pool.num_free:
            return False
        if computed_blocks:
            self.pool.touch(list(computed_blocks), rid)
        table = self.tables.setdefault(rid, table)
        table.extend(computed_blocks)
        table.extend(self.pool.allocate(num_new_blocks, rid))
        if computed_blocks:
            self._num_indexed[rid] = len(computed_blocks)
            self._num_stored[rid] = hit_tokens
        if self.index_ahead:
            self._index_full_blocks(req, min(total, req.num_tokens) // self.block_size)
        return True

    def _index_full_blocks(self, req: Request, n_full: int) -> None:
        """Index the request's blocks that will be full after this step, as vLLM's
        ``allocate_slots`` does: a request admitted later in the same step then finds them
        and computes only its own tail. Their K/V is written in this step's forward, which
        writes every scheduled token's K/V into the cache before attention reads it."""
        if not self.enable_prefix_caching:
            return
        rid = req.request_id
        done = self._num_indexed.get(rid, 0)
        if n_full > done:
            hashes = self._block_hashes(req)
            table = self.tables[rid]
            for i in range(done, n_full):
                self.pool.cache(table[i], hashes[i], rid)
            self._num_indexed[rid] = n_full

    def _unwritten_indexed(self, rid: str) -> list[int]:
        """Blocks of ``rid`` indexed at allocation whose K/V no step has written yet."""
        first = self._num_stored.get(rid, 0) // self.block_size
        return self.tables.get(rid, [])[first:self._num_indexed.get(rid, 0)]

    def shares_unwritten(self, req: Request) -> bool:
        """Does another request hold one of the blocks this request was to fill in this step?
        Such a request must not be preempted in this step: the other counts those tokens
        as computed."""
        return any(self.pool.ref_cnt[b] > 1 for b in self._unwritten_indexed(req.request_id))

    # --- after a step ----------------------------------------------------------
    def commit(self, req: Request) -> None:
        """Record that the request's K/V are written up to ``num_computed_tokens``."""
        self._num_stored[req.request_id] = req.num_computed_tokens
        if not self.index_ahead:
            self._index_full_blocks(req, req.num_computed_tokens // self.block_size)

    def free(self, req: Request, keep_hashes: bool = False) -> None:
        rid = req.request_id
        # A request leaving before its step ran (preempted in the step that scheduled it, or
        # a forward that raised): the blocks it indexed ahead hold no K/V, so no later request
        # may find them.
        self.pool.uncache(self._unwritten_indexed(rid))
        table = self.tables.pop(rid, [])
        self.pool.free(table[::-1], rid)
        self._num_indexed.pop(rid, None)
        self._num_stored.pop(rid, None)
        if not keep_hashes:
            self._hashes.pop(rid, None)

    # --- views ---------------------------------------------------------------------
    def block_table(self, rid: str) -> list[int]:
        return self.tables.get(rid, [])

    def stored_tokens(self, rid: str) -> int:
        return self._num_stored.get(rid, 0)

    def usage(self) -> KVUsage:
        fill: dict[int, int] = {}
        bs = self.block_size
        for rid, table in self.tables.items():
            stored = self._num_stored.get(rid, 0)
            for i, b in enumerate(table):
                f = min(bs, max(0, stored - i * bs))
                if f > fill.get(b, 0):
                    fill[b] = f
        used = self.pool.num_used
        return KVUsage(self.num_blocks, used, used * bs, sum(fill.values()))

    def block_ref_counts(self) -> list[int]:
        return list(self.pool.ref_cnt)

    def cached_block_ids(self) -> set[int]:
        return self.pool.cached_block_ids()

    def reset_prefix_cache(self) -> bool:
        """Forget every cached prefix. Refused (False) while any request holds blocks, as in
        vLLM; with prefix caching off nothing is cached and it is always True."""
        if not self.enable_prefix_caching:
            return True
        return self.pool.reset_prefix_cache()

    def drain_events(self) -> list[KVEvent]:
        return self.pool.drain_events()


class ContiguousKVManager:
    """First-fit reservations in a linear arena, in units of ``block_size`` slots."""

    layout = "contiguous"
    enable_prefix_caching = False

    def __init__(self, num_blocks: int, block_size: int, max_model_len: int,
                 reserve: str = "max_model_len"):
        if reserve not in ("max_model_len", "request"):
            raise ValueError(f"contiguous_reserve must be 'max_model_len' or 'request', got {reserve!r}")
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.max_model_len = max_model_len
        self.reserve = reserve
        self.regions: dict[str, tuple[int, int]] = {}   # rid -> (first block, num blocks)
        self._num_stored: dict[str, int] = {}
        self._events: list[KVEvent] = []

    def reservation_blocks(self, req_or_total) -> int:
        if self.reserve == "max_model_len":
            return cdiv(self.max_model_len, self.block_size)
        total = req_or_total if isinstance(req_or_total, int) else \
            min(req_or_total.max_total_tokens, self.max_model_len)
        return cdiv(total, self.block_size)

    def can_ever_fit(self, max_total_tokens: int) -> bool:
        return self.reservation_blocks(max_total_tokens) <= self.num_blocks

    def get_computed_blocks(self, req: Request) -> list[int]:
        return []

    def _first_fit(self, n: int) -> int | None:
        start = 0
        for s, length in sorted(self.regions.values()):
            if s - start >= n:
                return start
            start = s + length
        return start if self.num_blocks - start >= n else None

    def allocate_slots(self, req: Request, num_new_tokens: int, computed_blocks=()) -> bool:
        rid = req.request_id
        if rid not in self.regions:
            n = self.reservation_blocks(req)
            start = self._first_fit(n)
            if start is None:
                return False
            self.regions[rid] = (start, n)
            self._events.append(KVEvent("allocated", list(range(start, start + n)), rid))
        start, n = self.regions[rid]
        if req.num_computed_tokens + num_new_tokens > n * self.block_size:
            raise RuntimeError(f"request {rid} outgrew its contiguous reservation")
        return True

    def commit(self, req: Request) -> None:
        self._num_stored[req.request_id] = req.num_computed_tokens

    def shares_unwritten(self, req: Request) -> bool:
        return False                     # nothing is shared here

    def free(self, req: Request, keep_hashes: bool = False) -> None:
        rid = req.request_id
        if rid in self.regions:
            start, n = self.regions.pop(rid)
            self._events.append(KVEvent("freed", list(range(start, start + n)), rid))
        self._num_stored.pop(rid, None)

    def block_table(self, rid: str) -> list[int]:
        if rid not in self.regions:
            return []
        start, n = self.regions[rid]
        return list(range(start, start + n))

    def stored_tokens(self, rid: str) -> int:
        return self._num_stored.get(rid, 0)

    def usage(self) -> KVUsage:
        used = sum(n for _, n in self.regions.values())
        return KVUsage(self.num_blocks, used, used * self.block_size,
                       sum(self._num_stored.get(r, 0) for r in self.regions))

    def block_ref_counts(self) -> list[int]:
        ref = [0] * self.num_blocks
        for s, n in self.regions.values():
            for b in range(s, s + n):
                ref[b] = 1
        return ref

    def cached_block_ids(self) -> set[int]:
        return set()

    def reset_prefix_cache(self) -> bool:
        return True                      # nothing is ever cached here

    def drain_events(self) -> list[KVEvent]:
        ev, self._events = self._events, []
        return ev


def make_kv_manager(cfg, num_blocks: int, max_model_len: int) -> KVManager:
    """The KV manager an ``EngineConfig`` asks for."""
    if cfg.kv_layout == "paged":
        return PagedKVManager(num_blocks, cfg.block_size, cfg.enable_prefix_caching,
                              index_ahead=cfg.index_blocks_ahead)
    return ContiguousKVManager(num_blocks, cfg.block_size, max_model_len, cfg.contiguous_reserve)
