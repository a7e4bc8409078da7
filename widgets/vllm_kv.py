"""VllmPrefixCache: vLLM's prefix cache as vLLM tells it, a tree of block hashes.

Each node is one full KV block, named by its hash, drawn under the block before it (a
shared system prompt is a trunk; the prompts that continue it are branches). Filled nodes
are in the cache now, hollow ones were evicted; a ring marks a block that several stored
chains continue (a prefix others reused). The header gives vLLM's own KV usage and the
prefix-cache hits of the requests; the notes say what vLLM's events cannot tell; warnings
from the connector (lost or malformed messages, a dead server) are shown, never swallowed.
The tree is the view's one drawing, a live plotly plot updated in place (``figure()``); the
nodes as typed arrays (``node_*``) stay in the kernel, for Python.

    VllmPrefixCache(conn)      # live from a VllmConnector
    VllmPrefixCache(trace)     # replay a Trace recorded from one (scrub through the steps)
"""
from __future__ import annotations

import traitlets as t

from inferlab.connect.feeds.prefix_tree import KV_IDS, TreeState
from inferlab.widgets._base import asset, pack
from inferlab.widgets._plot import PlotView

MAX_NODES = 2000                 # drawn at most (the most recent); the summary counts all
STATE = {"evicted": 0, "cached": 1}
NOTES = [
    "vLLM's KV events name no request and no physical block: a node is a block hash, "
    "placed under the block before it. Which request stored or reused it is not said.",
    "Only full blocks are reported: a request's last, partly filled block never appears.",
    "Whether a cached block is in use by a running request or free for reuse is not said: "
    "blocks in use come from vLLM's stats (KV usage), as a count.",
]


class VllmPrefixCache(PlotView):
    _esm = asset("common.js", "vllm_kv.js")
    _css = asset("common.css", "vllm_kv.css")
    kind = "vLLM prefix cache"
    node_id = t.Bytes(b"")        # int32 hash slot
    node_depth = t.Bytes(b"")     # int32 blocks from the root
    node_row = t.Bytes(b"")       # int32 row in the drawing
    node_parent = t.Bytes(b"")    # int32 index into the node arrays, -1 = root
    node_state = t.Bytes(b"")     # uint8: STATE
    node_shared = t.Bytes(b"")    # uint8: 1 if several chains continue it
    node_step = t.Bytes(b"")      # int32 step it was (last) stored in
    summary = t.Dict().tag(sync=True)
    notes = t.List(t.Unicode()).tag(sync=True)
    warnings = t.List(t.Unicode()).tag(sync=True)
    shown = t.Int(-1).tag(sync=True)

    def _reset(self):
        meta = self._trace.meta if self._trace is not None else {}
        cfg = meta.get("config", {}) or {}
        self._roots = int(cfg.get("dp_ranks", 1) or 1)
        self._state = TreeState(self._roots)
        self._hits, self._prompt = [], []      # per step: cached and prompt tokens admitted
        self._nodes: list[dict] = []
        self.notes = list(NOTES) if cfg.get("kv_ids", KV_IDS) == KV_IDS else \
            ["this trace is not from vLLM: its block ids are physical blocks; use KVBlockMap"]

    def attach(self, engine, trace=None):
        self._source = engine
        out = super().attach(engine, trace)
        if hasattr(engine, "on_warning"):      # a warning shows even when no step follows it
            self._unwarn = engine.on_warning(lambda msg: self._warnings())
        self._warnings()
        return out

    def detach(self):
        unwarn = getattr(self, "_unwarn", None)
        if unwarn is not None:
            unwarn()
            self._unwarn = None
        return super().detach()

    def load_trace(self, trace):
        self._source = None
        return super().load_trace(trace)

    def _ingest(self, records):
        base = len(self._hits)
        for j, rec in enumerate(records):
            self._state.fold(rec.kv_events, base + j)
            self._hits.append(sum(c.num_cached for c in rec.batch if c.kind == "prefill"))
            self._prompt.append(sum(ev.info.prompt_len for ev in rec.request_events
                                    if ev.kind == "queued" and ev.info is not None))

    def _sync(self):
        self._warnings()
        self._follow()

    def _warnings(self):
        src = getattr(self, "_source", None)
        found = list(getattr(src, "warnings", None) or [])
        if not found and self._trace is not None:
            found = list(self._trace.meta.get("vllm_warnings") or [])
        if found != list(self.warnings):
            self.warnings = found

    def _state_at(self, k: int) -> TreeState:
        if k == len(self._step_t) - 1:
            return self._state
        st = TreeState(self._roots)
        for i, rec in enumerate(self._trace.records[:k + 1]):
            st.fold(rec.kv_events, i)
        return st

    def _show(self, k: int):
        if k < 0:
            return
        st = self._state_at(k)
        nodes = layout(st)[-MAX_NODES:]
        index = {n["id"]: i for i, n in enumerate(nodes)}
        rec = self._trace.records[k]
        self._nodes = nodes
        with self.hold_sync():
            self.node_id = pack([n["id"] for n in nodes], "<i4")
            self.node_depth = pack([n["depth"] for n in nodes], "<i4")
            self.node_row = pack([n["row"] for n in nodes], "<i4")
            self.node_parent = pack([index.get(n["parent"], -1) for n in nodes], "<i4")
            self.node_state = pack([STATE[n["state"]] for n in nodes], "u1")
            self.node_shared = pack([int(n["shared"]) for n in nodes], "u1")
            self.node_step = pack([n["step"] for n in nodes], "<i4")
            hits, prompt = sum(self._hits[:k + 1]), sum(self._prompt[:k + 1])
            self.summary = {
                "cached": len(st.live), "evicted": len(st.evicted_at),
                "stored": sum(st.times_stored.values()), "shared": len(st.shared()),
                "drawn": len(nodes), "blocks_used": rec.kv_blocks_used,
                "blocks_total": rec.kv_blocks_total, "block_size": rec.block_size,
                "hit_tokens": hits, "prompt_tokens": prompt, "ranks": self._roots}
            self.shown = k
        self._changed()

    def nodes(self) -> list[dict]:
        """The drawn nodes: id (hash slot), parent, depth, row, state, shared, step."""
        return [dict(n) for n in self._nodes]

    def _spec(self, dark: bool | None = None) -> dict:
        """The tree of block hashes: edges from each block to the one before it, cached
        blocks filled, evicted ones hollow, a heavy outline on blocks several chains
        continue; in the page's theme unless ``dark`` says."""
        from inferlab.lab import palette
        from inferlab.lab.drawings.spec import Spec
        dark = self._is_dark(dark)
        fg = palette.NEUTRAL["dark" if dark else "light"]["fg"]
        with self._lock:
            nodes, s = list(self._nodes), dict(self.summary)
        by_id = {n["id"]: n for n in nodes}
        ex, ey = [], []
        for n in nodes:
            p = by_id.get(n["parent"])
            if p is not None:
                ex += [p["depth"], n["depth"], None]
                ey += [p["row"], n["row"], None]
        fig = Spec()
        fig.add(dict(type="scatter", x=ex, y=ey, mode="lines", hoverinfo="skip",
                     name="continues", line=dict(color=palette.MUTED, width=1),
                     showlegend=False))
        for state, color, symbol in (("cached", palette.CACHE["cached"], "square"),
                                     ("evicted", palette.MUTED, "square-open")):
            ns = [n for n in nodes if n["state"] == state]
            fig.add(dict(
                type="scatter", x=[n["depth"] for n in ns], y=[n["row"] for n in ns],
                mode="markers", name=f"{state} ({len(ns)})", showlegend=bool(ns),
                marker=dict(symbol=symbol, size=12, color=color,
                            line=dict(width=[2.5 if n["shared"] else 1 for n in ns],
                                      color=[fg if n["shared"] else palette.MUTED_TEXT
                                             for n in ns])),
                text=[f"block #{n['id']} | depth {n['depth']} | stored at step {n['step']}"
                      + (" | continued by several prompts" if n["shared"] else "")
                      for n in ns], hoverinfo="text"))
        rows = max([n["row"] for n in nodes] + [0]) + 1
        fig.yaxes(autorange="reversed", showgrid=False, showticklabels=False, ticks="",
                  zeroline=False)
        depths = [n["depth"] for n in nodes] or [1]
        # half a block of room each side: the deepest node's marker is never cut at the edge
        fig.xaxes(title=dict(text="blocks from the start of the prompt"), showgrid=False,
                  dtick=1, range=[min(depths) - 0.5, max(depths) + 0.5])
        height = min(230 + 18 * rows, 4000)
        # the legend under the axis title, not beside the long title (they ran together)
        fig.update_layout(height=height, showlegend=True, margin=dict(b=95),
                          legend=dict(orientation="h", x=0, xanchor="left", yanchor="top",
                                      y=-72 / max(height - 50 - 95, 1)))
        title = (f"{self.title}: {s.get('cached', 0)} blocks cached, {s.get('evicted', 0)} "
                 f"evicted, {s.get('hit_tokens', 0)} prompt tokens from the cache")
        return fig.style(title, self.clock, dark=dark)

    def __repr__(self):
        s = self.summary
        return (f"VllmPrefixCache({s.get('cached', 0)} cached, {s.get('evicted', 0)} evicted, "
                f"{len(self.warnings)} warnings, clock={self.clock!r})")


def layout(st: TreeState) -> list[dict]:
    """Nodes in depth-first order with a row each: a chain stays on its row, a branch takes
    the next free row (a left-to-right tree, roots at depth 0 not drawn)."""
    kids = st.children()
    shared = st.shared()
    # parents never seen (stored before we joined) stand in for roots
    unknown = sorted({p for p in st.parent.values() if p >= st.num_roots and p not in st.parent})
    unk = set(unknown)
    tops = list(range(st.num_roots)) + unknown
    out, row = [], 0
    stack = [(r, 0) for r in reversed(tops)]
    seen = set()
    while stack:
        node, depth = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if node >= st.num_roots and node not in unk:
            out.append({"id": node, "parent": st.parent.get(node, -1), "depth": depth,
                        "row": row, "state": "cached" if node in st.live else "evicted",
                        "shared": node in shared, "step": st.stored_at.get(node, 0)})
        children = kids.get(node, [])
        if not children and node >= st.num_roots and node not in unk:
            row += 1
        for c in reversed(children):
            stack.append((c, depth + 1))
    return out
