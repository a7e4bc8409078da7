"""Scheduler: decides, each step, which tokens of which requests the model computes.

There is no prefill phase and no decode phase. Every request has tokens (prompt plus
generated) and computed tokens (K/V in the cache); a step gives some requests a slice of
the difference, within a token budget (``max_num_batched_tokens``, never exceeded). A prompt
is just a big difference (split across steps when chunked prefill is on, at most
``long_prefill_token_threshold`` tokens of one request per step when that is set); a decode
is a difference of one.

Policies:
* ``continuous`` (iteration-level): running requests are served first, then waiting ones
  join as soon as they fit; a finished request leaves at once.
* ``static`` (static batching, also called naive): a batch is admitted only when the previous one has
  completely finished.
Waiting requests join in the order of the scheduling policy (``core/policy``: ``fcfs`` or
``priority``), which also names the running request that yields when the KV cache runs
out: its blocks are freed and it waits again, to be recomputed later. A step that had to
preempt admits nobody (as vLLM), so a request never yields and rejoins in one step.

Differences from vLLM (deliberate):
* The request state machine is strict: an illegal transition raises, and ``finish``
  checks it before touching any queue (vLLM assigns statuses freely).
* ``long_prefill_token_threshold`` needs chunked prefill (vLLM's scheduler would quietly
  chunk prompts by it even with chunked prefill off).
* With ``priority``, a waiting request that does not fit the cache preempts running
  requests that sort after it (vLLM v0 did; v1 preempts only when a running request must
  grow). Seats (``max_num_seqs``) are never taken this way, nor blocks that a request
  admitted in the same step already shares before they are written.
* A running request that must yield to itself (it sorts last) lets the other running
  requests go on in that step; vLLM stops scheduling running requests there.
* ``scheduling_policy="priority"`` needs ``scheduler="continuous"`` (vLLM has no static
  batching).
"""
from __future__ import annotations

from ..errors import CapacityError
from .events import RequestEvent, RequestInfo, ScheduledChunk, SchedulerOutput
from .policy import make_queue
from .request import Request, RequestStatus


class Scheduler:
    def __init__(self, config, kv_manager, max_model_len: int):
        config.check_model_len(max_model_len)      # chunking off: the budget holds any prompt
        self.policy = config.scheduler
        self.scheduling_policy = config.scheduling_policy
        self.max_num_seqs = config.max_num_seqs
        self.token_budget = config.max_num_batched_tokens
        self.chunked = config.enable_chunked_prefill
        self.long_prefill = config.long_prefill_token_threshold or 0
        self.max_model_len = max_model_len
        self.kv = kv_manager
        self.waiting = make_queue(config.scheduling_policy)
        self.running: list[Request] = []
        self.requests: dict[str, Request] = {}
        self.num_preemptions = 0
        self.num_recomputed_tokens = 0    # tokens computed again after preemptions
        self.max_request_preemptions = 0  # most times one request was preempted
        self._batch_admitted = 0          # static: requests admitted since the engine was empty
        self.prefix_cache_queries = 0     # prompt tokens looked up
        self.prefix_cache_hits = 0        # prompt tokens found
        self._events: list[RequestEvent] = []

    # --- queue management ----------------------------------------------------------
    def check_fits_budget(self, num_prompt_tokens: int) -> None:
        """Without chunked prefill a prompt is computed in one step: refuse one longer than
        the token budget (it could never be scheduled)."""
        if not self.chunked and num_prompt_tokens > self.token_budget:
            raise CapacityError(
                f"prompt has {num_prompt_tokens} tokens but max_num_batched_tokens is "
                f"{self.token_budget} and chunked prefill is off, so it can never be scheduled "
                "(enable chunked prefill or raise max_num_batched_tokens)")

    def add(self, req: Request) -> None:
        self.waiting.add(req)
        self.requests[req.request_id] = req
        info = RequestInfo(req.num_prompt_tokens, req.arrival_time, req.prompt_text,
                           req.priority)
        self._events.append(RequestEvent(req.request_id, "queued", info=info))

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def finish(self, req: Request, status: RequestStatus) -> None:
        """Move a request to a finished state and give back its KV slots.

        The transition is checked first: an illegal one raises and changes nothing."""
        if req.finished:
            return
        if not req.can_move_to(status):
            raise RuntimeError(f"request {req.request_id}: illegal transition "
                               f"{req.status.name} -> {status.name}; nothing was changed")
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        req.move_to(status)
        self.kv.free(req)
        self.waiting.forget(req)
        kind = "aborted" if status is RequestStatus.FINISHED_ABORTED else "finished"
        self._events.append(RequestEvent(req.request_id, kind, req.finish_reason))
        del self.requests[req.request_id]

    def _preempt(self, req: Request, out: SchedulerOutput) -> int:
        """Free a running request's blocks and requeue it; returns the budget it gave back
        (its chunk, when it was already scheduled in this step)."""
        freed = 0
        for k, c in enumerate(out.chunks):
            if c.request_id == req.request_id:
                freed = c.num_tokens
                del out.chunks[k]
                break
        self.running.remove(req)
        self.kv.free(req, keep_hashes=True)
        req.move_to(RequestStatus.PREEMPTED)
        req.num_computed_tokens = 0
        req.num_preemptions += 1
        self.num_preemptions += 1
        self.max_request_preemptions = max(self.max_request_preemptions, req.num_preemptions)
        self.waiting.prepend(req)
        self._events.append(RequestEvent(req.request_id, "preempted"))
        return freed

    def _num_new_tokens(self, remaining: int, budget: int) -> int:
        """Tokens of one request this step: capped per request, then by the budget left
        (0 when chunking is off and the rest does not fit)."""
        n = min(remaining, self.long_prefill) if self.long_prefill else remaining
        if n > budget:
            n = budget if self.chunked else 0
        return n

    # --- the step ----------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.token_budget
        preempted: list[Request] = []

        # 1. Running requests first: decodes and unfinished prompt chunks.
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            n = self._num_new_tokens(req.num_uncomputed, budget)
            if n == 0:
                i += 1
                continue
            while not self.kv.allocate_slots(req, n):
                victim = self.waiting.victim(self.running)
                if self.running.index(victim) < i:
                    i -= 1                        # it was scheduled earlier in this step
                budget += self._preempt(victim, out)
                preempted.append(victim)
                if victim is req:
                    break
            if req.status is not RequestStatus.RUNNING:
                continue                          # it yielded itself; the next one is at i
            self._add_chunk(out, req, n, 0)
            budget -= n
            i += 1

        # 2. Waiting requests join while there is room (static: only into an empty engine).
        # A static batch stays open only while none of its members has produced a token.
        # A member that finishes early (while others still prefill) leaves no seat behind.
        # Nobody joins in a step that preempted: the memory was short a moment ago.
        static = self.policy == "static"
        if static and not self.running:
            self._batch_admitted = 0
        may_admit = not preempted and (
            not static or all(not r.output_token_ids for r in self.running))
        while (may_admit and self.waiting and budget > 0 and len(self.running) < self.max_num_seqs
               and (not static or self._batch_admitted < self.max_num_seqs)):
            req = self.waiting.peek()
            if req in preempted:
                break                             # never back in the step it yielded
            hits = self.kv.get_computed_blocks(req)
            hit_tokens = len(hits) * self.kv.block_size
            n = self._num_new_tokens(req.num_tokens - req.num_computed_tokens - hit_tokens,
                                     budget)
            if n == 0:
                break
            if not self.kv.allocate_slots(req, n, hits):
                victim = self._displaceable_by(req)
                if victim is None:
                    break
                budget += self._preempt(victim, out)
                preempted.append(victim)
                continue          # look the prefix up again: the victim's unwritten blocks left
            self._admit(out, req, n, hit_tokens)
            budget -= n

        for c in out.chunks:
            out.block_tables[c.request_id] = self.kv.block_table(c.request_id)
        out.num_batched_tokens = self.token_budget - budget
        assert 0 <= out.num_batched_tokens <= self.token_budget
        return out

    def _displaceable_by(self, req: Request) -> Request | None:
        """The running request that ``req``, not fitting the cache, may preempt (``priority``
        only), or None. Not one whose blocks of this step a request admitted in this same
        step already shares: those tokens are computed by its chunk."""
        victim = self.waiting.victim(self.running) if self.running else None
        if victim is None or not self.waiting.may_displace(req, victim) \
                or self.kv.shares_unwritten(victim):
            return None
        return victim

    def _admit(self, out: SchedulerOutput, req: Request, n: int, hit_tokens: int) -> None:
        popped = self.waiting.pop()
        assert popped is req
        if req.status is RequestStatus.WAITING and self.kv.enable_prefix_caching:
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

    def _add_chunk(self, out: SchedulerOutput, req: Request, n: int, cached: int) -> None:
        start = req.num_computed_tokens
        samples = start + n == req.num_tokens
        kind = "decode" if (n == 1 and req.output_token_ids and samples) else "prefill"
        out.chunks.append(ScheduledChunk(req.request_id, start, n, kind, samples, cached))

    def update(self, out: SchedulerOutput, sampled: dict[str, int],
               logprobs: dict[str, dict[int, float]] | None = None) -> list[Request]:
        """Advance computed tokens, append sampled tokens (and their ``logprobs``, for the
        requests that asked), finish requests that stopped.

        Returns the requests that received a new token this step.
        """
        got_token = []
        for c in out.chunks:
            req = self.requests.get(c.request_id)
            if req is None or req.status is not RequestStatus.RUNNING:
                continue
            redo = max(0, min(c.start + c.num_tokens, req.max_computed_tokens) - c.start)
            req.num_recomputed_tokens += redo
            self.num_recomputed_tokens += redo
            req.num_computed_tokens += c.num_tokens
            req.max_computed_tokens = max(req.max_computed_tokens, req.num_computed_tokens)
            self.kv.commit(req)
            if c.samples:
                tok = sampled[c.request_id]
                req.output_token_ids.append(tok)
                if logprobs and c.request_id in logprobs:
                    req.output_logprobs.append(logprobs[c.request_id])
                got_token.append(req)
                status = self._check_stop(req, tok)
                if status is not None:
                    self.finish(req, status)
        return got_token

    def _check_stop(self, req: Request, tok: int) -> RequestStatus | None:
        p = req.params
        if len(req.output_token_ids) >= p.min_tokens:    # before that, EOS/stop ids don't stop
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
