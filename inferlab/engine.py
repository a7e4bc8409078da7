"""Engine: the public face. Requests in, tokens out, one step at a time.

    schedule -> run the model -> update, then publish what happened.
"""
from __future__ import annotations

import heapq
import itertools
import time

from inferlab.core.config import EngineConfig
from inferlab.errors import CapacityError, InvalidInputError, InvalidTypeError
from inferlab.core.events import EmittedToken, EventBus, StepRecord
from inferlab.core.kv_manager import ContiguousKVManager, PagedKVManager
from inferlab.model.loader import load_model
from inferlab.core.outputs import RequestMetrics, RequestOutput
from inferlab.core.params import SamplingParams
from inferlab.core.prompts import to_token_ids
from inferlab.core.request import Request, RequestStatus
from inferlab.model.resources import cpu_count, default_kv_cache_memory
from inferlab.core.scheduler import Scheduler
from inferlab.core.stats import EngineStats, PeakTracker, waste
from inferlab.core.textstream import TextState


class Engine:
    def __init__(self, model: str | None = None, **kwargs):
        import torch
        self.config = cfg = EngineConfig.from_kwargs(model=model, **kwargs)
        if torch.get_num_threads() > cpu_count():   # containers (Binder) report fewer CPUs
            torch.set_num_threads(cpu_count())
        device = cfg.device or ("cuda" if torch.cuda.is_available() else "cpu")
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise InvalidInputError(f"device={device!r} but this torch sees no CUDA GPU "
                                    f"(torch {torch.__version__}); use device='cpu' or None")
        self.loaded = load_model(cfg.model, cfg.dtype, device, cfg.seed)
        self.tokenizer = self.loaded.tokenizer
        hf_cfg = self.loaded.hf_model.config
        self.vocab_size = hf_cfg.vocab_size
        self.eos_token_id = _first(getattr(self.tokenizer, "eos_token_id", None)
                                   if self.tokenizer else hf_cfg.eos_token_id)
        model_len = getattr(hf_cfg, "max_position_embeddings", 2048)
        self.max_model_len = cfg.max_model_len or min(model_len, 2048)
        if self.max_model_len > model_len:
            raise InvalidInputError(f"max_model_len={self.max_model_len} exceeds the model's "
                                    f"context of {model_len} tokens")
        from inferlab.model.llama import LlamaForward
        bytes_per_token = LlamaForward.kv_bytes_per_token_of(hf_cfg, cfg.dtype)
        self.num_blocks = cfg.num_blocks or self._auto_num_blocks(bytes_per_token)
        from inferlab.model.runner import ModelRunner
        self.runner = ModelRunner(self.loaded.hf_model, self.num_blocks, cfg.block_size,
                                  cfg.attention_backend, cfg.seed)
        if self.runner.backend == "numba-cpu":
            import numba
            numba.set_num_threads(min(cpu_count(), numba.config.NUMBA_NUM_THREADS))
        self.runner.warm_up()   # compile kernels now, not inside the first request's TTFT
        if cfg.kv_layout == "paged":
            self.kv = PagedKVManager(self.num_blocks, cfg.block_size, cfg.enable_prefix_caching)
        else:
            self.kv = ContiguousKVManager(self.num_blocks, cfg.block_size, self.max_model_len,
                                          cfg.contiguous_reserve)
        sched_cfg = cfg
        if not cfg.enable_chunked_prefill and cfg.max_num_batched_tokens < self.max_model_len:
            # Without chunking a whole prompt must fit one step's budget.
            from dataclasses import replace
            sched_cfg = replace(cfg, max_num_batched_tokens=self.max_model_len)
        self.scheduler = Scheduler(sched_cfg, self.kv, self.max_model_len)
        self.clock = _make_clock(cfg, hf_cfg, self.loaded.name)
        self.bus = EventBus()
        self._pending: list = []              # heap of (arrival, seq, Request) not yet arrived
        self._texts: dict[str, TextState] = {}
        self._ids = itertools.count()
        self._seq = itertools.count()
        self._num_steps = 0
        self._peak = PeakTracker()

    def _auto_num_blocks(self, bytes_per_token: int) -> int:
        cfg = self.config
        budget = cfg.kv_cache_memory or default_kv_cache_memory()
        by_budget = budget // (bytes_per_token * cfg.block_size)
        # never more than every sequence at full length could use
        by_need = cfg.max_num_seqs * -(-self.max_model_len // cfg.block_size)
        n = min(by_budget, by_need)
        if n < 1:
            raise InvalidInputError(f"kv_cache_memory={budget} bytes holds no block of "
                                    f"{cfg.block_size} tokens ({bytes_per_token} bytes/token)")
        return int(n)

    # --- properties -----------------------------------------------------------------
    @property
    def now(self) -> float:
        return self.clock.now()

    @property
    def clock_name(self) -> str:
        return self.clock.name

    @property
    def model_name(self) -> str:
        return self.loaded.name

    def has_unfinished_requests(self) -> bool:
        return bool(self._pending) or self.scheduler.has_unfinished()

    # --- requests -----------------------------------------------------------------
    def add_request(self, prompt, params: SamplingParams | None = None, *,
                    request_id: str | None = None, arrival_time: float | None = None) -> str:
        """Queue a prompt (string, token ids or chat messages); returns its request id."""
        params = SamplingParams() if params is None else params
        if not isinstance(params, SamplingParams):
            raise InvalidTypeError(f"params must be SamplingParams, got {type(params).__name__}")
        ids, text = to_token_ids(prompt, self.tokenizer, self.vocab_size)
        if len(ids) >= self.max_model_len:
            raise CapacityError(f"prompt has {len(ids)} tokens; max_model_len is "
                                f"{self.max_model_len}, which must leave room for at least one "
                                "new token (shorten the prompt or raise max_model_len)")
        total = min(len(ids) + params.max_tokens, self.max_model_len)
        if not self.kv.can_ever_fit(total):
            raise CapacityError(
                f"request needs up to {total} tokens of KV cache but the whole cache holds "
                f"{self.num_blocks} blocks x {self.config.block_size} tokens"
                + (" (contiguous layout reserves max_model_len per request)"
                   if self.kv.layout == "contiguous" else "")
                + "; lower max_tokens or give the engine more num_blocks / kv_cache_memory")
        if request_id is None:
            request_id = f"req-{next(self._ids)}"
        elif not isinstance(request_id, str):
            raise InvalidTypeError(f"request_id must be a string, got {type(request_id).__name__}")
        if request_id in self.scheduler.requests or any(r.request_id == request_id
                                                        for _, _, r in self._pending):
            raise InvalidInputError(f"request_id {request_id!r} is already in use")
        now = self.clock.now()
        arrival = now if arrival_time is None else float(arrival_time)
        req = Request(request_id, ids, params, prompt_text=text, eos_token_id=self.eos_token_id,
                      arrival_time=arrival)
        self._texts[request_id] = TextState(self.tokenizer, params.stop)
        if arrival > now:
            heapq.heappush(self._pending, (arrival, next(self._seq), req))
        else:
            self.scheduler.add(req)
        return request_id

    def abort(self, request_id: str) -> bool:
        """Stop a request now and free its KV blocks. False if it was unknown or finished."""
        for i, (_, _, r) in enumerate(self._pending):
            if r.request_id == request_id:
                self._pending.pop(i)
                heapq.heapify(self._pending)
                self._texts.pop(request_id, None)
                return True
        req = self.scheduler.requests.get(request_id)
        if req is None:
            return False
        self.scheduler.finish(req, RequestStatus.FINISHED_ABORTED)
        req.times.finish = self.clock.now()
        self.runner.forget(request_id)
        self._texts.pop(request_id, None)
        return True

    def abort_all(self) -> int:
        """Abort every queued, future and running request; returns how many were aborted."""
        ids = list(self.scheduler.requests) + [r.request_id for _, _, r in self._pending]
        return sum(self.abort(rid) for rid in ids)

    def _admit_arrivals(self) -> None:
        if self._pending and not self.scheduler.has_unfinished():
            self.clock.skip_to(self._pending[0][0])      # idle: jump to the next arrival
        now = self.clock.now()
        while self._pending and self._pending[0][0] <= now:
            self.scheduler.add(heapq.heappop(self._pending)[2])

    # --- the step ----------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """Run one engine step; returns outputs of the requests that progressed or finished."""
        self._admit_arrivals()
        t_start = self.clock.now()
        sched = self.scheduler.schedule()
        if sched.is_empty and not self.scheduler.has_unfinished():
            if len(self.bus) and self.scheduler._events:     # e.g. an abort: still report it
                self._publish(sched, t_start, t_start, 0.0, 0.0, [])
            return []
        if sched.is_empty:
            raise RuntimeError("inferlab: the scheduler could not schedule any waiting request "
                               f"({len(self.scheduler.waiting)} waiting); this is a bug")
        wall0 = time.perf_counter()
        sampled = self.runner.execute(sched, self.scheduler.requests) if not sched.is_empty else {}
        wall = time.perf_counter() - wall0
        sim = self.clock.advance_step([(c.num_tokens, c.start + c.num_tokens)
                                       for c in sched.chunks], wall) if sched.chunks else 0.0
        now = self.clock.now()
        requests = {c.request_id: self.scheduler.requests[c.request_id] for c in sched.chunks}
        for req in requests.values():
            if req.times.first_scheduled is None:
                req.times.first_scheduled = t_start
        got = self.scheduler.update(sched, sampled)
        emitted, outputs = [], []
        for req in got:
            st = self._texts[req.request_id]
            req.times.token_times.append(now)
            if req.times.first_token is None:
                req.times.first_token = now
            delta, stopped = st.push(req.output_token_ids, final=req.finished)
            emitted.append(EmittedToken(req.request_id, req.output_token_ids[-1], delta,
                                        len(req.output_token_ids) - 1))
            if stopped and not req.finished:
                self.scheduler.finish(req, RequestStatus.FINISHED_STOPPED)
            if req.finished:
                req.times.finish = now
                self.runner.forget(req.request_id)
            outputs.append(self._output(req, [req.output_token_ids[-1]], delta))
        for req in requests.values():    # finished without a token (none today), keep honest
            if req.finished and req.times.finish is None:
                req.times.finish = now
        self._num_steps += 1
        self._publish(sched, t_start, now, wall, sim, emitted)
        for out in outputs:
            if out.finished:
                self._texts.pop(out.request_id, None)
        return outputs

    def _output(self, req: Request, new_ids, new_text) -> RequestOutput:
        return RequestOutput(req.request_id, req.prompt_text, req.prompt_token_ids,
                             list(req.output_token_ids), self._texts[req.request_id].text,
                             req.finished, req.finish_reason, RequestMetrics.of(req),
                             list(new_ids), new_text)

    def _publish(self, sched, t_start, t_end, wall, sim, emitted) -> None:
        usage = self.kv.usage()
        s = self.scheduler
        self._peak.observe(usage, len(s.running))
        if not len(self.bus):
            self.kv.drain_events()
            s.drain_events()
            return
        live = [r.request_id for r in s.running]
        rec = StepRecord(
            step=self._num_steps - 1, t_start=t_start, t_end=t_end, wall_duration=wall,
            sim_duration=None if self.clock.name == "wall" else sim, clock=self.clock.name,
            batch=sched.chunks, num_batched_tokens=sched.num_batched_tokens,
            token_budget=s.token_budget, emitted=emitted, request_events=s.drain_events(),
            kv_events=self.kv.drain_events(), kv_blocks_used=usage.blocks_used,
            kv_blocks_total=usage.blocks_total, kv_tokens_used=usage.tokens_used,
            kv_slots_allocated=usage.slots_allocated, num_running=len(s.running),
            num_waiting=len(s.waiting) + len(self._pending), block_size=self.kv.block_size,
            block_tables={r: list(self.kv.block_table(r)) for r in live},
            stored_tokens={r: self.kv.stored_tokens(r) for r in live})
        self.bus.publish(rec)

    # --- conveniences ------------------------------------------------------------------
    def subscribe(self, callback):
        """Call ``callback(StepRecord)`` after every step; returns an unsubscribe function."""
        return self.bus.subscribe(callback)

    def generate(self, prompts, params=None, use_tqdm: bool = True) -> list[RequestOutput]:
        """Run prompts to completion together; outputs in the order of ``prompts``."""
        if isinstance(prompts, str) or (isinstance(prompts, list) and prompts
                                        and isinstance(prompts[0], (int, dict))):
            prompts = [prompts]
        if not isinstance(prompts, (list, tuple)):
            raise InvalidTypeError(f"prompts must be a list, got {type(prompts).__name__}")
        if isinstance(params, (list, tuple)):
            if len(params) != len(prompts):
                raise InvalidInputError(f"got {len(params)} SamplingParams for {len(prompts)} "
                                        "prompts; give one, or one per prompt")
            plist = list(params)
        else:
            plist = [params] * len(prompts)
        ids = []
        try:
            for p, sp in zip(prompts, plist):
                ids.append(self.add_request(p, sp))
            return self._run_until_done(ids, use_tqdm)
        except BaseException:
            for rid in ids:                  # bad input or Ctrl-C: leave nothing behind
                self.abort(rid)
            raise

    def _run_until_done(self, ids, use_tqdm) -> list[RequestOutput]:
        from tqdm.auto import tqdm
        results: dict[str, RequestOutput] = {}
        wanted = set(ids)
        with tqdm(total=len(ids), desc="generate", unit="req", disable=not use_tqdm) as bar:
            while wanted - results.keys():
                for out in self.step():
                    if out.finished and out.request_id in wanted:
                        results[out.request_id] = out
                        bar.update(1)
        return [results[r] for r in ids]

    def stream(self, prompt, params: SamplingParams | None = None):
        """Yield one RequestOutput delta per new token of one prompt (others keep running)."""
        rid = self.add_request(prompt, params)
        try:
            while True:
                for out in self.step():
                    if out.request_id == rid:
                        yield out
                        if out.finished:
                            return
        finally:
            if rid in self.scheduler.requests or any(r.request_id == rid
                                                     for _, _, r in self._pending):
                self.abort(rid)

    def stats(self) -> EngineStats:
        u = self.kv.usage()
        s = self.scheduler
        return EngineStats(
            num_running=len(s.running), num_waiting=len(s.waiting) + len(self._pending),
            kv_layout=self.kv.layout, block_size=self.kv.block_size,
            kv_blocks_total=u.blocks_total, kv_blocks_used=u.blocks_used,
            kv_token_slots_allocated=u.slots_allocated, kv_tokens_used=u.tokens_used,
            kv_waste=waste(u.slots_allocated, u.tokens_used),
            peak_kv_blocks_used=self._peak.blocks, peak_kv_waste=self._peak.waste,
            max_concurrent_requests=self._peak.max_running,
            prefix_cache_queries=s.prefix_cache_queries, prefix_cache_hits=s.prefix_cache_hits,
            num_preemptions=s.num_preemptions, num_steps=self._num_steps, clock=self.clock.name)

    def __repr__(self) -> str:
        c = self.config
        return (f"Engine(model={self.model_name!r}, scheduler={c.scheduler!r}, "
                f"kv_layout={c.kv_layout!r}, block_size={c.block_size}, "
                f"num_blocks={self.num_blocks}, backend={self.runner.backend!r}, "
                f"clock={self.clock.name!r})")


def _first(x):
    return x[0] if isinstance(x, (list, tuple)) else x


def _make_clock(cfg: EngineConfig, hf_cfg, name: str):
    from inferlab.sim.costmodel import make_clock
    return make_clock(cfg.clock, hf_config=hf_cfg, sim_model=cfg.sim_model, model_name=name)
