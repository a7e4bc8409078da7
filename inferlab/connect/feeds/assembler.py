"""StepRecords from what a vLLM server tells: its per-step reports, its KV event batches,
and the tokens our streaming requests receive (each timed on arrival).

Step boundaries come from the step reports (inferlab's plugin, ``wire.step_reports``). Tokens
are matched to steps by what the reports count: a token goes to the earliest unpublished
step that still has room (the report says how many tokens the step sampled), that comes after
the request's previous token and holds none of its tokens yet. A token that finds no step yet
waits for the next report. A step is published when all its tokens are in, or when none of
our requests still in flight can add one (each has a token in a later step, or had not been
sent, or no other prompt finished its prefill in that step: tokens of other clients never
come to us), or at the latest ``MAX_WAIT_S`` after its report. So a busy machine that
delivers tokens late delays the view, not the matching. Tokens that find no report (lost
reports, or a server without the plugin: after ``ORPHAN_S``) get steps inferred from their
arrival: a new step whenever a request repeats or the stream pauses; with a warning.

KV batches go to the first step whose report is no older than the batch (both stamped by the
server's clock). Request events: "queued" when sent, "admitted" with the request's first
chunk, "finished" with its last token, "aborted" when its stream broke. Times are the lab's
``time.time()``; server stamps are shifted by the smallest (arrival - stamp) seen.

What the records cannot hold exactly: the split of one step's prefix-cache hits between
several requests admitted together (attributed only when unambiguous, else 0), and prefill
chunks that sample no token when several prompts are prefilling at once (then unattributed:
``num_batched_tokens`` still counts them).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...core.events import (EmittedToken, KVEvent, RequestEvent, RequestInfo, ScheduledChunk,
                            StepRecord)
from ..wire.step_reports import EngineInfo, StepReport
from .prefix_tree import TreeState
from .tokens import TokenArrival

MAX_WAIT_S = 3.0
ORPHAN_S = 1.0
PENDING_S = 1.0
IDLE_STEP_S = 0.15


@dataclass
class _Step:
    report: StepReport | None
    t_recv: float
    key: int
    tokens: list = field(default_factory=list)
    rids: set = field(default_factory=set)
    kv: list = field(default_factory=list)
    events: list = field(default_factory=list)
    inferred: bool = False


class StepAssembler:
    def __init__(self, clock: str = "wall (vLLM)", block_size: int = 1,
                 warn=lambda kind, msg: None, cached_guess=lambda rid, bs, live: None):
        self.clock, self.default_block_size, self.warn = clock, block_size, warn
        self.cached_guess = cached_guess          # (rid, block size, cached slots) -> tokens
        self.tree = TreeState()                   # the cache as of the last published step
        self.info: EngineInfo | None = None
        self.open: list[_Step] = []
        self.orphans: list[TokenArrival] = []
        self.pending_kv: list[tuple[float, float, list]] = []      # (server ts, t_local, evs)
        self.pending_events: list[tuple[float, RequestEvent]] = []
        self.prompt_len: dict[str, int] = {}
        self.prior: dict[str, int] = {}           # prompt tokens already put in chunks
        self.last_key: dict[str, int] = {}
        self.waiting_first: set[str] = set()
        self.inflight: dict[str, float] = {}      # our requests not yet done -> time sent
        self.offset: float | None = None          # local clock - server clock
        self.last_report: StepReport | None = None
        self.num_reports = 0
        self.step_no = 0
        self._key = 0
        self.prev_t_end: float | None = None
        self.ambiguous_cached = 0
        self._cur: _Step | None = None            # the inferred step being filled

    # --- inputs ---------------------------------------------------------------------------
    def on_engine(self, info: EngineInfo) -> None:
        self.info = info

    def on_report(self, rep: StepReport, t_recv: float) -> None:
        self.num_reports += 1
        d = t_recv - rep.ts
        self.offset = d if self.offset is None else min(self.offset, d)
        self.last_report = rep
        scheduled = (rep.ctx_tokens or 0) + (rep.gen_tokens or 0)
        if scheduled == 0 and rep.new_tokens == 0 and not rep.finished:
            return                                  # a step that ran nothing
        self._key += 1
        st = _Step(rep, t_recv, self._key)
        st.kv = [e for ts, _, evs in self.pending_kv if ts <= rep.ts for e in evs]
        self.pending_kv = [p for p in self.pending_kv if p[0] > rep.ts]
        st.events = [e for _, e in self.pending_events]
        self.pending_events = []
        self.open.append(st)
        orphans, self.orphans = self.orphans, []
        for tok in orphans:
            self.on_token(tok)

    def on_kv(self, server_ts: float, events: list[KVEvent], t_local: float) -> None:
        if not events:
            return
        for st in self.open:
            if st.report is not None and st.report.ts >= server_ts:
                st.kv.extend(events)
                return
        self.pending_kv.append((server_ts, t_local, list(events)))

    def on_queued(self, rid: str, info: RequestInfo) -> None:
        self.prompt_len[rid] = info.prompt_len
        self.waiting_first.add(rid)
        self.inflight[rid] = info.arrival
        self.pending_events.append((info.arrival, RequestEvent(rid, "queued", info=info)))

    def on_token(self, tok: TokenArrival) -> None:
        if tok.finish:
            self.inflight.pop(tok.rid, None)
        if any(o.rid == tok.rid for o in self.orphans) or not self._place(tok):
            self.orphans.append(tok)

    def on_done(self, rid: str, kind: str, detail: str | None, t: float) -> None:
        """A stream ended without a final token to carry the news (error, or a stop chunk)."""
        self.inflight.pop(rid, None)
        if kind == "finished":
            for tok in reversed(self.orphans):
                if tok.rid == rid:
                    tok.finish = tok.finish or detail or kind
                    return
            for st in reversed(self.open):
                if rid in st.rids:
                    st.events.append(RequestEvent(rid, kind, detail))
                    return
        self.pending_events.append((t, RequestEvent(rid, kind, detail)))

    def _place(self, tok: TokenArrival) -> bool:
        for st in self.open:
            if st.inferred or st.key <= self.last_key.get(tok.rid, 0) or tok.rid in st.rids:
                continue
            if len(st.tokens) < st.report.new_tokens:
                st.tokens.append(tok)
                st.rids.add(tok.rid)
                self.last_key[tok.rid] = st.key
                return True
        return False

    # --- output ---------------------------------------------------------------------------
    def ready(self, now: float) -> list[StepRecord]:
        """Steps that can be published now, in order."""
        out = []
        while self.open and self._settled(self.open[0], now):
            out.append(self._build(self.open.pop(0)))
        limit = ORPHAN_S if self.num_reports == 0 else MAX_WAIT_S
        late = [o for o in self.orphans if now - o.t >= limit]
        if late and not self.open:
            self.warn("inferred", "tokens arrived that no step report accounts for (reports "
                      "lost, or the server runs without inferlab's plugin): their steps are "
                      "inferred from arrival times")
            self.orphans = [o for o in self.orphans if o not in late]
            for tok in late:
                if self._cur is not None and tok.rid in self._cur.rids:
                    out.append(self._build(self._cur))
                    self._cur = None
                if self._cur is None:
                    self._key += 1
                    self._cur = _Step(None, tok.t, self._key, inferred=True)
                self._cur.tokens.append(tok)
                self._cur.rids.add(tok.rid)
                self.last_key[tok.rid] = self._cur.key
        cur = self._cur
        if cur is not None and (self.open or now - max(t.t for t in cur.tokens) >= IDLE_STEP_S):
            out.append(self._build(cur))
            self._cur = None
        old = [p for p in self.pending_events if now - p[0] >= PENDING_S] or \
            [p for p in self.pending_kv if now - p[1] >= PENDING_S]
        if old and not self.open and self._cur is None:
            self._key += 1
            st = _Step(None, now, self._key)
            st.events = [e for _, e in self.pending_events]
            st.kv = [e for _, _, evs in self.pending_kv for e in evs]
            self.pending_events, self.pending_kv = [], []
            out.append(self._build(st))
        return out

    def _settled(self, st: _Step, now: float) -> bool:
        """Whether step ``st`` can get no more of our tokens (see the module doc)."""
        rep = st.report
        if len(st.tokens) >= rep.new_tokens or now - st.t_recv >= MAX_WAIT_S:
            return True
        t_step = self._server_time(rep.ts)
        prefilled = sum(self.prompt_len.get(k.rid, 0) for k in st.tokens if k.index == 0)
        for rid, sent in self.inflight.items():
            if rid in st.rids:
                continue
            last = self.last_key.get(rid)
            if last is not None:
                if last < st.key:
                    return False            # running: its token of this step is on the way
            elif sent <= t_step and rep.prompt_tokens > prefilled:
                return False                # its prefill may have finished in this step
        return True

    def _server_time(self, ts: float) -> float:
        return ts + (self.offset or 0.0)

    def _build(self, st: _Step) -> StepRecord:
        rep = st.report if st.report is not None else self.last_report
        info = self.info
        toks = sorted(st.tokens, key=lambda k: k.t)
        if st.inferred:                         # no report will carry what is pending
            st.events = [e for _, e in self.pending_events] + st.events
            st.kv = [e for _, _, evs in self.pending_kv for e in evs] + st.kv
            self.pending_events, self.pending_kv = [], []
        t_srv = self._server_time(st.report.ts) if st.report is not None else st.t_recv
        t_end = max([t_srv] + [k.t for k in toks])
        if st.report is not None and st.report.elapsed_ms is not None:
            t_start = t_srv - st.report.elapsed_ms / 1000.0
        elif toks:
            t_start = min(k.t for k in toks)
        else:
            t_start = t_end
        if self.prev_t_end is not None:
            t_start = max(t_start, self.prev_t_end)
        t_start = min(t_start, t_end)
        self.prev_t_end = t_end
        batch, admitted, finished, emitted = self._chunks(st, toks)
        self.tree.fold(st.kv)
        bs = (info.block_size if info and info.block_size else self.default_block_size)
        total = max(1, info.num_blocks if info and info.num_blocks else 1)
        used = min(total, round((rep.kv_usage if rep else 0.0) * total))
        r = st.report
        scheduled = None if r is None or r.ctx_tokens is None else \
            (r.ctx_tokens or 0) + (r.gen_tokens or 0)
        rec = StepRecord(
            step=self.step_no, t_start=t_start, t_end=t_end, wall_duration=t_end - t_start,
            sim_duration=None, clock=self.clock, batch=batch,
            num_batched_tokens=scheduled if scheduled is not None else
            sum(c.num_tokens for c in batch),
            token_budget=(info.max_num_batched_tokens if info else 0) or 0,
            emitted=emitted, request_events=st.events + admitted + finished,
            kv_events=list(st.kv), kv_blocks_used=used, kv_blocks_total=total,
            kv_tokens_used=used * bs, kv_slots_allocated=used * bs,
            num_running=rep.num_running if rep else 0,
            num_waiting=rep.num_waiting if rep else 0, block_size=bs)
        self.step_no += 1
        return rec

    def _chunks(self, st: _Step, toks):
        rep = st.report
        batch, admitted, finished, emitted = [], [], [], []
        firsts = [k for k in toks if k.index == 0 and k.rid not in self.prior]
        split = self._split_cached(rep, firsts)
        for k in toks:
            P = self.prompt_len.get(k.rid, 0)
            if k.index == 0:
                if k.rid in self.prior:
                    start, cached = self.prior.pop(k.rid), 0
                else:
                    cached = split.get(k.rid, 0)
                    start = cached
                    admitted.append(RequestEvent(k.rid, "admitted",
                                                 f"cached={cached}" if cached else None))
                self.waiting_first.discard(k.rid)
                batch.append(ScheduledChunk(k.rid, start, max(1, P - start), "prefill", True,
                                            cached))
            else:
                batch.append(ScheduledChunk(k.rid, max(0, P + k.index - 1), 1, "decode", True))
            emitted.append(EmittedToken(k.rid, k.token_id, k.text, k.index))
            if k.finish:
                kind = "aborted" if k.finish in ("abort", "error") else "finished"
                finished.append(RequestEvent(k.rid, kind, k.finish))
        self._partial_prefill(st, batch, admitted)
        return batch, admitted, finished, emitted

    def _split_cached(self, rep, firsts) -> dict[str, int]:
        """Prefix-cache tokens of each request whose first token came out in this step. The
        report gives the step's total; one request takes it all; several share it as the
        cache tree says, when that adds up to the total (else 0 each: unknown)."""
        if rep is None or rep.prompt_cached == 0 or not firsts:
            return {}
        if len(firsts) == 1 and rep.prompt_tokens == self.prompt_len.get(firsts[0].rid, 0):
            k = firsts[0]
            return {k.rid: min(rep.prompt_cached, max(0, self.prompt_len[k.rid] - 1))}
        bs = self.info.block_size if self.info and self.info.block_size else \
            self.default_block_size
        guess = {k.rid: self.cached_guess(k.rid, bs, self.tree.live) for k in firsts}
        if all(v is not None for v in guess.values()) and \
                sum(guess.values()) == rep.prompt_cached:
            return guess
        self.ambiguous_cached += 1
        return {}

    def _partial_prefill(self, st: _Step, batch, admitted) -> None:
        """A prefill chunk that sampled nothing (a long prompt split over steps): attribute it
        when exactly one of our requests is still waiting for its first token."""
        rep = st.report
        if rep is None or not rep.ctx_tokens:
            return
        left = rep.ctx_tokens - sum(c.num_tokens for c in batch if c.kind == "prefill")
        waiting = [r for r in self.waiting_first if r not in st.rids]
        if left <= 0 or len(waiting) != 1:
            return
        rid = waiting[0]
        if rid not in self.prior:
            cached = rep.prefix_hits if rep.prefix_requests == 1 else 0
            self.prior[rid] = cached
            admitted.append(RequestEvent(rid, "admitted", f"cached={cached}" if cached else None))
        start = self.prior[rid]
        n = min(left, max(1, self.prompt_len.get(rid, start + left) - start - 1))
        batch.append(ScheduledChunk(rid, start, n, "prefill", False))
        self.prior[rid] = start + n
