"""KVBlockMap: every physical KV block as a cell, coloured by the request that owns it,
filled as far as it holds tokens; shared blocks (ref count > 1) and prefix-cached blocks
marked, free blocks hollow. In the contiguous layout the reserved-but-unused slots of each
request are drawn as waste. Scrubbing asks Python for the map at that step."""
from __future__ import annotations

import traitlets as t

from inferlab.widgets._base import View, asset, pack

# block-state bits of cell_flags: defined here only; the JS gets them in the ``flags`` trait
FLAGS = {"cached": 1, "shared": 2, "reserved": 4}     # prefix-cached, ref > 1, reserved unused
CACHED, SHARED, RESERVED = FLAGS["cached"], FLAGS["shared"], FLAGS["reserved"]


def block_cells(rec, cached: set, layout: str, owners: dict) -> list[tuple]:
    """(owner index or -1, tokens, ref count, flags) for every block after step ``rec``."""
    n, bs = rec.kv_blocks_total, rec.block_size
    owner, fill, ref, flags = [-1] * n, [0] * n, [0] * n, [0] * n
    for rid, table in rec.block_tables.items():
        o = owners.setdefault(rid, len(owners))
        stored = rec.stored_tokens.get(rid, 0)
        for i, b in enumerate(table):
            if b >= n:
                continue
            tokens = max(0, min(bs, stored - i * bs))
            if owner[b] < 0:
                owner[b] = o
            ref[b] += 1
            fill[b] = max(fill[b], tokens)
            if layout == "contiguous" and tokens == 0:
                flags[b] |= RESERVED
    for b in range(n):
        if b in cached:
            flags[b] |= CACHED
        if ref[b] > 1:
            flags[b] |= SHARED
    return list(zip(owner, fill, ref, flags))


class KVBlockMap(View):
    _esm = asset("common.js", "kv_map.js")
    _css = asset("common.css", "kv_map.css")
    kind = "KV cache blocks"
    # not "layout": that name is every DOMWidget's Layout model, and a string there makes the
    # widget manager's setLayout throw "Cannot read properties of undefined (reading 'then')"
    kv_layout = t.Unicode("paged").tag(sync=True)
    block_size = t.Int(0).tag(sync=True)
    owners = t.List(t.Unicode()).tag(sync=True)      # owner index -> request id
    cell_owner = t.Bytes(b"").tag(sync=True)         # int32, -1 free
    cell_fill = t.Bytes(b"").tag(sync=True)          # uint8 tokens in the block
    cell_ref = t.Bytes(b"").tag(sync=True)           # uint8 reference count
    cell_flags = t.Bytes(b"").tag(sync=True)         # uint8: FLAGS bits
    flags = t.Dict(dict(FLAGS)).tag(sync=True)       # bit names for the JS (read-only)
    shown = t.Int(-1).tag(sync=True)                 # the step the cells are from
    summary = t.Dict().tag(sync=True)

    def _reset(self):
        self._owners: dict[str, int] = {}
        self._cached: set[int] = set()         # cached-block set after the latest step
        meta = self._trace.meta if self._trace is not None else {}
        self.kv_layout = str(meta.get("config", {}).get("kv_layout", "paged"))
        self._cells: list[tuple] = []

    @staticmethod
    def _fold_cache(cached: set, rec) -> None:
        for ev in rec.kv_events:
            if ev.kind == "cached":
                cached.update(ev.block_ids)
            elif ev.kind == "evicted":
                cached.difference_update(ev.block_ids)

    def _ingest(self, records):
        for rec in records:
            self._fold_cache(self._cached, rec)

    def _cells_at(self, k: int) -> list[tuple]:
        recs = self._trace.records
        if k == len(self._step_t) - 1:
            cached = self._cached
        else:
            cached = set()
            for rec in recs[:k + 1]:
                self._fold_cache(cached, rec)
        return block_cells(recs[k], cached, self.kv_layout, self._owners)

    def _sync(self):
        if self.cursor < 0 or self.cursor >= len(self._step_t):
            self._show(len(self._step_t) - 1)

    def _on_cursor(self, change):
        with self._lock:
            if self._trace is not None and self._step_t:
                self._show(self.shown_step())

    def _show(self, k: int):
        if k < 0:
            return
        rec = self._trace.records[k]
        cells = self._cells_at(k)
        self._cells = cells
        with self.hold_sync():
            self.block_size = rec.block_size
            self.owners = list(self._owners)
            self.cell_owner = pack([c[0] for c in cells], "<i4")
            self.cell_fill = pack([c[1] for c in cells], "u1")
            self.cell_ref = pack([c[2] for c in cells], "u1")
            self.cell_flags = pack([c[3] for c in cells], "u1")
            self.summary = {"blocks_used": rec.kv_blocks_used, "blocks_total": rec.kv_blocks_total,
                            "tokens_used": rec.kv_tokens_used,
                            "slots_allocated": rec.kv_slots_allocated,
                            "cached": sum(1 for c in cells if c[3] & CACHED),
                            "shared": sum(1 for c in cells if c[3] & SHARED)}
            self.shown = k

    def cells(self) -> list[dict]:
        """Per block: owner (request id or None) and its index (the colour), tokens, ref
        count, the FLAGS bits and each bit by name (cached, shared, reserved)."""
        names = list(self._owners)
        return [{"block": b, "owner": names[o] if o >= 0 else None, "owner_index": o,
                 "fill": f, "ref": r, "flags": fl,
                 **{name: bool(fl & bit) for name, bit in FLAGS.items()}}
                for b, (o, f, r, fl) in enumerate(self._cells)]

    def figure(self):
        from inferlab.lab import figures
        s = self.summary
        title = (f"{self.title}: {s.get('blocks_used', 0)}/{s.get('blocks_total', 0)} blocks, "
                 f"{s.get('tokens_used', 0)} tokens in {s.get('slots_allocated', 0)} slots "
                 f"({self.kv_layout})")
        return figures.kv_map(self.cells(), title=title, clock=self.clock)

    def __repr__(self):
        s = self.summary
        return (f"KVBlockMap({s.get('blocks_used', 0)}/{s.get('blocks_total', 0)} blocks used, "
                f"layout={self.kv_layout!r}, clock={self.clock!r})")
