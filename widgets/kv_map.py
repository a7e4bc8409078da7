"""KVBlockMap: every physical KV block as a cell, coloured by the request that owns it,
filled as far as it holds tokens; shared blocks (ref count > 1) and prefix-cached blocks
marked, free blocks hollow. In the contiguous layout the reserved-but-unused slots of each
request are drawn as waste. Scrubbing asks Python for the map at that step."""
from __future__ import annotations

import traitlets as t

from inferlab.widgets._base import asset, pack
from inferlab.widgets._plot import PlotView

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


def _token_texts(tokenizer, text: str | None, n: int) -> list:
    """The text of each of the ``n`` prompt tokens of ``text``, when re-encoding it with
    ``tokenizer`` gives ``n`` tokens (as the engine encoded it); else ``n`` Nones."""
    if tokenizer is None or not text or not n:
        return [None] * n
    for kw in ({"add_special_tokens": False}, {}):
        try:
            ids = list(tokenizer.encode(text, **kw))
        except Exception:  # noqa: BLE001 - text in the slots is a nicety, never an error
            return [None] * n
        if len(ids) == n:
            return [tokenizer.decode([i]) for i in ids]
    return [None] * n


class KVBlockMap(PlotView):
    _esm = asset("common.js", "kv_map.js")
    _css = asset("common.css", "kv_map.css")
    kind = "KV cache blocks"
    # not "layout": that name is every DOMWidget's Layout model, and a string there makes the
    # widget manager's setLayout throw "Cannot read properties of undefined (reading 'then')"
    kv_layout = t.Unicode("paged").tag(sync=True)
    block_size = t.Int(0).tag(sync=True)
    # the shown step's blocks, for Python (tests, replays): the browser draws the figure
    # (``plot``) and reads none of these, so they stay in the kernel, off the wire
    owners = t.List(t.Unicode())                     # owner index -> request id
    cell_owner = t.Bytes(b"")                        # int32, -1 free
    cell_fill = t.Bytes(b"")                         # uint8 tokens in the block
    cell_ref = t.Bytes(b"")                          # uint8 reference count
    cell_flags = t.Bytes(b"")                        # uint8: FLAGS bits
    flags = t.Dict(dict(FLAGS)).tag(sync=True)       # bit names for the JS (read-only)
    shown = t.Int(-1).tag(sync=True)                 # the step the cells are from
    summary = t.Dict().tag(sync=True)
    selected = t.Unicode("").tag(sync=True)          # block table shown ("" = first request)
    redraw_on = ("dark", "selected")

    def __init__(self, source=None, *, tokenizer=None, **kwargs):
        self._tokenizer = tokenizer if tokenizer is not None else getattr(source, "tokenizer",
                                                                         None)
        super().__init__(source, **kwargs)

    def attach(self, engine, trace=None):
        if self._tokenizer is None:
            self._tokenizer = getattr(engine, "tokenizer", None)
        return super().attach(engine, trace)

    def _reset(self):
        self._owners: dict[str, int] = {}
        self._cached: set[int] = set()         # cached-block set after the latest step
        meta = self._trace.meta if self._trace is not None else {}
        self.kv_layout = str(meta.get("config", {}).get("kv_layout", "paged"))
        self._cells: list[tuple] = []
        self._prompt_texts: dict[str, list] = {}

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
        self._follow()

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
        self._changed()

    def cells(self) -> list[dict]:
        """Per block: owner (request id or None) and its index (the colour), tokens, ref
        count, the FLAGS bits and each bit by name (cached, shared, reserved)."""
        names = list(self._owners)
        return [{"block": b, "owner": names[o] if o >= 0 else None, "owner_index": o,
                 "fill": f, "ref": r, "flags": fl,
                 **{name: bool(fl & bit) for name, bit in FLAGS.items()}}
                for b, (o, f, r, fl) in enumerate(self._cells)]

    def block_table(self, request: str | None = None) -> dict | None:
        """The shown step's block table of ``request`` (default: ``selected``, else the first
        request holding blocks): physical blocks in logical order, tokens stored, and each
        token's text where known (output tokens from the trace; prompt tokens when the view
        has the tokenizer: ``KVBlockMap(..., tokenizer=...)``, or the engine it attached to)."""
        if self._trace is None or not self._step_t:
            return None
        k = self.shown_step()
        rec = self._trace.records[k]
        rid = request or self.selected
        if rid not in rec.block_tables:
            live = [r for r in self._owners if r in rec.block_tables]
            if not live:
                return None
            rid = live[0]
        return {"request": rid, "blocks": list(rec.block_tables[rid]),
                "tokens": int(rec.stored_tokens.get(rid, 0)), "texts": self._texts(rid, k)}

    def _texts(self, rid: str, k: int) -> list:
        """Text of each token of ``rid`` (prompt, then output up to step ``k``); None where
        unknown."""
        info = self._trace.requests.get(rid, {})
        n = int(info.get("prompt_len") or 0)
        prompt = self._prompt_texts.get(rid)
        if prompt is None:
            prompt = self._prompt_texts[rid] = _token_texts(self._tokenizer,
                                                            info.get("prompt_text"), n)
        out = [e.text for rec in self._trace.records[:k + 1] for e in rec.emitted
               if e.request_id == rid]
        return prompt + out

    def _spec(self, dark: bool | None = None) -> dict:
        from inferlab.lab.drawings.kv_map import spec
        title = self.title if self.title != self.kind else None
        with self._lock:
            meta = self._trace.meta if self._trace is not None else {}
            return spec(self.cells(), block_size=self.block_size or 1, layout=self.kv_layout,
                        table=self.block_table(), title=title, clock=self.clock,
                        dark=self._is_dark(dark),
                        bytes_per_token=meta.get("kv_bytes_per_token"),
                        dtype=meta.get("config", {}).get("dtype"))

    def __repr__(self):
        s = self.summary
        return (f"KVBlockMap({s.get('blocks_used', 0)}/{s.get('blocks_total', 0)} blocks used, "
                f"layout={self.kv_layout!r}, clock={self.clock!r})")
