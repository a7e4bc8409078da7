"""Scheduler: decides, each step, which tokens of which requests the model computes.

There is no prefill phase and no decode phase. Every request has tokens (prompt plus
generated) and computed tokens (K/V in the cache); a step gives some requests a slice of
the difference, within a token budget. A prompt is just a big difference (split across
steps when chunked prefill is on); a decode is a difference of one.

Policies:
* ``continuous`` (iteration-level): running requests are served first, then waiting ones
  join as soon as they fit; a finished request leaves at once.
* ``static`` (naive batching): a batch is admitted only when the previous one has
  completely finished.

When the KV cache runs out, the most recently admitted running request is preempted:
its blocks are freed and it is requeued at the front, to be recomputed later.
"""
from __future__ import annotations

from collections import deque

from .events import RequestEvent, RequestInfo, ScheduledChunk, SchedulerOutput
from .request import Request, RequestStatus


class Scheduler:
    def __init__(self, config, kv_manager, max_model_len: int):
        self.policy = config.scheduler
        self.max_num_seqs = config.max_num_seqs
        self.token_budget = config.max_num_batched_tokens
        self.chunked = config.enable_chunked_prefill
        self.max_model_len = max_model_len
        self.kv = kv_manager
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.requests: dict[str, Request] = {}
        self.num_preemptions = 0
        self._batch_admitted = 0          # static: requests admitted since the engine was empty
        self.prefix_cache_queries = 0     # prompt tokens looked up
        self.prefix_cache_hits = 0        # prompt tokens found
        self._events: list[RequestEvent] = []

    # --- queue management ----------------------------------------------------------
    def add(self, req: Request) -> None:
        self.waiting.append(req)
        self.requests[req.request_id] = req
        info = RequestInfo(req.num_prompt_tokens, req.arrival_time, req.prompt_text)
        self._events.append(RequestEvent(req.request_id, "queued", info=info))

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def finish(self, req: Request, status: RequestStatus) -> None:
        """Move a request to a finished state and give back its KV slots."""
        if req.finished:
            return
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        req.move_to(status)
        self.kv.free(req)
        kind = "aborted" if status is RequestStatus.FINISHED_ABORTED else "finished"
        self._events.append(RequestEvent(req.request_id, kind, req.finish_reason))
        del self.requests[req.request_id]

    def _preempt(self, req: Request) -> None:
        self.running.remove(req)
        self.kv.free(req, keep_hashes=True)
        req.move_to(RequestStatus.PREEMPTED)
        req.num_computed_tokens = 0
        req.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(req)
        self._events.append(RequestEvent(req.request_id, "preempted"))

    # --- the step ----------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.token_budget
        scheduled: set[str] = set()

        # 1. Running requests first: decodes and unfinished prompt chunks.
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            n = req.num_uncomputed
            if n > budget:
                if not self.chunked:
                    i += 1
                    continue
                n = budget
            while not self.kv.allocate_slots(req, n):
                victim = self.running[-1]        # newest admitted, not yet scheduled this step
                self._preempt(victim)
                if victim is req:
                    break
            if req.status is not RequestStatus.RUNNING:
                break                             # it preempted itself: nothing left to evict
            self._add_chunk(out, req, n, 0)
            scheduled.add(req.request_id)
            budget -= n
            i += 1

        # 2. Waiting requests join while there is room (static: only into an empty engine).
        # A static batch stays open only while none of its members has produced a token.
        # A member that finishes early (while others still prefill) leaves no seat behind.
        static = self.policy == "static"
        if static and not self.running:
            self._batch_admitted = 0
        may_admit = not static or all(not r.output_token_ids for r in self.running)
        while (may_admit and self.waiting and budget > 0 and len(self.running) < self.max_num_seqs
               and (not static or self._batch_admitted < self.max_num_seqs)):
            req = self.waiting[0]
            hits = self.kv.get_computed_blocks(req)
            hit_tokens = len(hits) * self.kv.block_size
            n = req.num_tokens - req.num_computed_tokens - hit_tokens
            if n > budget:
                if not self.chunked:
                    break
                n = budget
            if not self.kv.allocate_slots(req, n, hits):
                break
            self.waiting.popleft()
            first_admission = req.status is RequestStatus.WAITING
            if first_admission and self.kv.enable_prefix_caching:
                self.prefix_cache_queries += req.num_prompt_tokens
                self.prefix_cache_hits += hit_tokens
                req.num_cached_tokens = hit_tokens
            req.num_computed_tokens += hit_tokens
            req.move_to(RequestStatus.RUNNING)
            self.running.append(req)
            self._batch_admitted += 1
            self._events.append(RequestEvent(req.request_id, "admitted",
                                             f"cached={hit_tokens}" if hit_tokens else None))
            self._add_chunk(out, req, n, hit_tokens)
            budget -= n

        for c in out.chunks:
            out.block_tables[c.request_id] = self.kv.block_table(c.request_id)
        out.num_batched_tokens = self.token_budget - budget
        return out

    def _add_chunk(self, out: SchedulerOutput, req: Request, n: int, cached: int) -> None:
        start = req.num_computed_tokens
        samples = start + n == req.num_tokens
        kind = "decode" if (n == 1 and req.output_token_ids and samples) else "prefill"
        out.chunks.append(ScheduledChunk(req.request_id, start, n, kind, samples, cached))

    def update(self, out: SchedulerOutput, sampled: dict[str, int]) -> list[Request]:
        """Advance computed tokens, append sampled tokens, finish requests that stopped.

        Returns the requests that received a new token this step.
        """
        got_token = []
        for c in out.chunks:
            req = self.requests.get(c.request_id)
            if req is None or req.status is not RequestStatus.RUNNING:
                continue
            req.num_computed_tokens += c.num_tokens
            self.kv.commit(req)
            if c.samples:
                tok = sampled[c.request_id]
                req.output_token_ids.append(tok)
                got_token.append(req)
                status = self._check_stop(req, tok)
                if status is not None:
                    self.finish(req, status)
        return got_token

    def _check_stop(self, req: Request, tok: int) -> RequestStatus | None:
        p = req.params
        if not p.ignore_eos and req.eos_token_id is not None and tok == req.eos_token_id:
            req.stop_reason = tok
            return RequestStatus.FINISHED_STOPPED
        if tok in p.stop_token_ids:
            req.stop_reason = tok
            return RequestStatus.FINISHED_STOPPED
        if len(req.output_token_ids) >= p.max_tokens or req.num_tokens >= self.max_model_len:
            return RequestStatus.FINISHED_LENGTH
        return None

    def drain_events(self) -> list[RequestEvent]:
        ev, self._events = self._events, []
        return ev
