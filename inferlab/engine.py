"""Engine: the public face, and the one place where core, model and a clock are wired together.

Each step reads as three verbs (plus telling the world):

    schedule   -> which tokens of which requests the model computes now   (core.Scheduler)
    execute    -> one packed forward pass and the sampled tokens          (model.ModelRunner)
    postprocess-> tokens appended, stops found, text deltas and outputs   (core.OutputProcessor)
    publish    -> one StepRecord to every subscriber                      (core.EventBus)
"""
from __future__ import annotations

import heapq
import itertools
import threading
import time

from . import threads
from .core.config import DTYPE_BYTES, EngineConfig
from .core.events import EventBus, SchedulerOutput, StepRecord
from .core.interrupts import atomic, hold_interrupts
from .core.kv_manager import KVManager, make_kv_manager
from .core.output_processor import OutputProcessor
from .core.outputs import RequestOutput
from .core.params import SamplingParams
from .core.policy import check_priority, priorities_for
from .core.prompts import pair_prompts, to_token_ids
from .core.request import Request, RequestStatus
from .core.scheduler import Scheduler
from .core.shapes import ModelShape, cdiv, kv_bytes_per_token
from .core.stats import EngineStats, PeakTracker
from .errors import CapacityError, InvalidInputError, InvalidTypeError
from .model.loader import load_model
from .model import resources as res
from .model.runner import ModelRunner, check_backend
from .sim.clock import Clock, check_clock, make_clock


class Engine:
    def __init__(self, model: str | None = None, **kwargs):
        import torch
        threads.for_engine(res.cpu_count())    # the policy in force, torch's threads <= our CPUs
        self.config = cfg = EngineConfig.from_kwargs(model=model, **kwargs)
        check_clock(cfg.clock)
        device = cfg.device or ("cuda" if torch.cuda.is_available() else "cpu")
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise InvalidInputError(f"device={device!r} but this torch sees no CUDA GPU "
                                    f"(torch {torch.__version__}); use device='cpu' or None")
        check_backend(cfg.attention_backend, device, cfg.linear_backend)   # before the model loads
        self.loaded = load_model(cfg.model, cfg.dtype, device, cfg.seed)
        self.tokenizer = self.loaded.tokenizer
        hf_cfg = self.loaded.config
        self.vocab_size = hf_cfg.vocab_size
        self.eos_token_id = _first(getattr(self.tokenizer, "eos_token_id", None)
                                   if self.tokenizer else hf_cfg.eos_token_id)
        model_len = getattr(hf_cfg, "max_position_embeddings", res.DEFAULT_CONTEXT_CAP)
        self.max_model_len = cfg.max_model_len or min(model_len, res.DEFAULT_CONTEXT_CAP)
        if self.max_model_len > model_len:
            raise InvalidInputError(f"max_model_len={self.max_model_len} exceeds the model's "
                                    f"context of {model_len} tokens")
        cfg.check_model_len(self.max_model_len)   # the token budget vs max_model_len, early
        bytes_per_token = kv_bytes_per_token(ModelShape.from_hf_config(hf_cfg),
                                             DTYPE_BYTES[cfg.dtype])
        self.num_blocks = cfg.num_blocks or res.auto_num_blocks(
            cfg.kv_cache_memory or res.default_kv_cache_memory(), bytes_per_token, cfg.block_size,
            cfg.max_num_seqs * cdiv(self.max_model_len, cfg.block_size))
        self.runner = ModelRunner(self.loaded, self.num_blocks, cfg.block_size,
                                  cfg.attention_backend, cfg.seed, cfg.linear_backend)
        if self.runner.backend == "numba-cpu":
            import numba
            numba.set_num_threads(min(res.cpu_count(), numba.config.NUMBA_NUM_THREADS))
        self.runner.warm_up()   # compile kernels now, not inside the first request's TTFT
        self.kv: KVManager = make_kv_manager(cfg, self.num_blocks, self.max_model_len)
        self.scheduler = Scheduler(cfg, self.kv, self.max_model_len)
        self.clock: Clock = make_clock(cfg.clock, hf_config=hf_cfg, sim_model=cfg.sim_model,
                                       model_name=self.loaded.name)
        self.output = OutputProcessor(self.tokenizer)
        self.bus = EventBus()
        self.publish_seconds = 0.0            # spent building and publishing step records
        self._pending: list = []              # heap of (arrival, seq, Request) not yet arrived
        self._ids = itertools.count()
        self._seq = itertools.count()
        self._num_steps = 0
        self._peak = PeakTracker()
        self._stop = threading.Event()

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

    @property
    def model(self):
        """The model as the engine runs it (``inferlab.model.llama.LlamaForward``: its
        weights, its ``linear``, its shapes), for benchmarks that time its parts."""
        return self.runner.model

    def has_unfinished_requests(self) -> bool:
        return bool(self._pending) or self.scheduler.has_unfinished()

    # --- requests -----------------------------------------------------------------
    @atomic
    def add_request(self, prompt, params: SamplingParams | None = None, *,
                    request_id: str | None = None, arrival_time: float | None = None,
                    priority: int = 0) -> str:
        """Queue a prompt (string, token ids or chat messages); returns its request id.

        ``priority`` (scheduling_policy="priority" only): lower runs first, as in vLLM."""
        params = SamplingParams() if params is None else params
        if not isinstance(params, SamplingParams):
            raise InvalidTypeError(f"params must be SamplingParams, got {type(params).__name__}")
        check_priority(priority, self.config.scheduling_policy)
        ids, text = to_token_ids(prompt, self.tokenizer, self.vocab_size)
        if len(ids) >= self.max_model_len:
            raise CapacityError(f"prompt has {len(ids)} tokens; max_model_len is "
                                f"{self.max_model_len}, which must leave room for at least one "
                                "new token (shorten the prompt or raise max_model_len)")
        self.scheduler.check_fits_budget(len(ids))
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
        if self._known(request_id):
            raise InvalidInputError(f"request_id {request_id!r} is already in use")
        now = self.clock.now()
        arrival = now if arrival_time is None else float(arrival_time)
        req = Request(request_id, ids, params, prompt_text=text, eos_token_id=self.eos_token_id,
                      arrival_time=arrival, priority=priority)
        self.output.add(req)
        if arrival > now:
            heapq.heappush(self._pending, (arrival, next(self._seq), req))
        else:
            self.scheduler.add(req)
        return request_id

    def _known(self, request_id: str) -> bool:
        return request_id in self.scheduler.requests or any(
            r.request_id == request_id for _, _, r in self._pending)

    @atomic
    def abort(self, request_id: str) -> bool:
        """Stop a request now and free its KV blocks. False if it was unknown or finished."""
        for i, (_, _, r) in enumerate(self._pending):
            if r.request_id == request_id:
                self._pending.pop(i)
                heapq.heapify(self._pending)
                self.output.drop(request_id)
                return True
        req = self.scheduler.requests.get(request_id)
        if req is None:
            return False
        self.scheduler.finish(req, RequestStatus.FINISHED_ABORTED)
        req.times.finish = self.clock.now()
        self.runner.forget(request_id)
        self.output.drop(request_id)
        return True

    @atomic
    def abort_all(self) -> int:
        """Abort every queued, future and running request; returns how many were aborted."""
        ids = list(self.scheduler.requests) + [r.request_id for _, _, r in self._pending]
        return sum(self.abort(rid) for rid in ids)

    @atomic
    def reset_prefix_cache(self) -> bool:
        """Drop every cached prefix block (vLLM's name); True when done.

        As in vLLM, refused while any request holds KV blocks: it returns False, warns with
        how many requests are running, and changes nothing (abort or finish them first).
        The dropped blocks appear as one "evicted" KV event in the next step's record."""
        if self.kv.reset_prefix_cache():
            return True
        import warnings
        warnings.warn(f"inferlab: reset_prefix_cache() refused: {len(self.scheduler.running)} "
                      f"running request(s) hold {self.kv.usage().blocks_used} KV blocks; nothing "
                      "was dropped (let them finish or abort them, then reset)",
                      RuntimeWarning, stacklevel=2)
        return False

    def request_stop(self) -> None:
        """Ask the engine to abort everything at the start of its next step.

        Safe to call from another thread (a notebook's Stop button while a run goes on in the
        background): the abort happens between steps, in the thread that runs them."""
        self._stop.set()

    def _admit_arrivals(self) -> None:
        if self._pending and not self.scheduler.has_unfinished():
            self.clock.skip_to(self._pending[0][0])      # idle: jump to the next arrival
        now = self.clock.now()
        while self._pending and self._pending[0][0] <= now:
            self.scheduler.add(heapq.heappop(self._pending)[2])

    # --- the step ----------------------------------------------------------------------
    @atomic     # a Ctrl-C / Kernel -> Interrupt lands as the step returns, never inside it
    def step(self) -> list[RequestOutput]:
        """Run one engine step; returns outputs of the requests that progressed or finished."""
        if self._stop.is_set():
            self._stop.clear()
            self.abort_all()
        self._admit_arrivals()
        t_start = self.clock.now()
        sched = self._schedule(t_start)
        if sched.is_empty:
            self._publish(sched, t_start, t_start, 0.0, 0.0, [])   # e.g. report an abort
            return []
        (sampled, logprobs), wall, sim = self._execute(sched)
        now = self.clock.now()
        outputs, emitted = self._postprocess(sched, sampled, logprobs, now)
        self._num_steps += 1
        self._publish(sched, t_start, now, wall, sim, emitted)
        return outputs

    def _schedule(self, t_start: float) -> SchedulerOutput:
        sched = self.scheduler.schedule()
        if sched.is_empty and self.scheduler.has_unfinished():
            raise RuntimeError("inferlab: the scheduler could not schedule any waiting request "
                               f"({len(self.scheduler.waiting)} waiting); this is a bug")
        for c in sched.chunks:
            times = self.scheduler.requests[c.request_id].times
            if times.first_scheduled is None:
                times.first_scheduled = t_start
        return sched

    def _execute(self, sched: SchedulerOutput) -> tuple[tuple[dict, dict], float, float]:
        """One forward pass: ((sampled tokens, logprobs if asked), wall s, clock s)."""
        wall0 = time.perf_counter()
        sampled = self.runner.execute(sched, self.scheduler.requests)
        wall = time.perf_counter() - wall0
        sim = self.clock.advance_step([(c.num_tokens, c.start + c.num_tokens)
                                       for c in sched.chunks], wall)
        return sampled, wall, sim

    def _postprocess(self, sched, sampled, logprobs, now) -> tuple[list[RequestOutput], list]:
        outputs, emitted = [], []
        for req in self.scheduler.update(sched, sampled, logprobs):
            delta, stop_hit = self.output.new_token(req, now)
            if stop_hit and not req.finished:
                self.scheduler.finish(req, RequestStatus.FINISHED_STOPPED)
            if req.finished:
                req.times.finish = now
                self.runner.forget(req.request_id)
            emitted.append(self.output.emitted(req, delta))
            outputs.append(self.output.output(req, delta))
        return outputs, emitted

    def _publish(self, sched, t_start, t_end, wall, sim, emitted) -> None:
        t0 = time.perf_counter()
        usage = self.kv.usage()
        s = self.scheduler
        self._peak.observe(usage, len(s.running))
        request_events, kv_events = s.drain_events(), self.kv.drain_events()
        if not len(self.bus) or (sched.is_empty and not request_events and not kv_events):
            return
        live = [r.request_id for r in s.running]
        rec = StepRecord(
            step=max(self._num_steps - 1, 0), t_start=t_start, t_end=t_end,
            wall_duration=wall, sim_duration=None if self.clock.name == "wall" else sim,
            clock=self.clock.name, batch=sched.chunks, num_batched_tokens=sched.num_batched_tokens,
            token_budget=s.token_budget, emitted=emitted, request_events=request_events,
            kv_events=kv_events, kv_blocks_used=usage.blocks_used,
            kv_blocks_total=usage.blocks_total, kv_tokens_used=usage.tokens_used,
            kv_slots_allocated=usage.slots_allocated, num_running=len(s.running),
            num_waiting=len(s.waiting) + len(self._pending), block_size=self.kv.block_size,
            block_tables={r: list(self.kv.block_table(r)) for r in live},
            stored_tokens={r: self.kv.stored_tokens(r) for r in live})
        self.bus.publish(rec)
        self.publish_seconds += time.perf_counter() - t0

    # --- conveniences ------------------------------------------------------------------
    def subscribe(self, callback):
        """Call ``callback(StepRecord)`` after every step; returns an unsubscribe function."""
        return self.bus.subscribe(callback)

    def generate(self, prompts, params=None, use_tqdm: bool = True,
                 priority: int | list[int] = 0) -> list[RequestOutput]:
        """Run prompts to completion together; outputs in the order of ``prompts``.
        ``priority``: one for all prompts or a list with one per prompt (as ``params``)."""
        prompts, plist = pair_prompts(prompts, params)
        ids = []
        try:
            with hold_interrupts():          # a Ctrl-C while adding lands once ids are known
                for p, sp, prio in zip(prompts, plist, priorities_for(priority, len(prompts))):
                    ids.append(self.add_request(p, sp, priority=prio))
            return self._run_until_done(ids, use_tqdm)
        except BaseException:
            with hold_interrupts():          # bad input or Ctrl-C: leave nothing behind,
                for rid in ids:              # and show the views where it stopped
                    self.abort(rid)
                self._publish(SchedulerOutput(), self.now, self.now, 0.0, 0.0, [])
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
        ids = []
        try:
            with hold_interrupts():          # a Ctrl-C while adding lands once rid is known
                ids.append(self.add_request(prompt, params))
            while True:
                for out in self.step():
                    if out.request_id == ids[0]:
                        yield out
                        if out.finished:
                            return
        finally:
            if ids and self._known(ids[0]):  # stopped early (Ctrl-C, break, close): abort it
                self.abort(ids[0])           # and show the views where it stopped
                self._publish(SchedulerOutput(), self.now, self.now, 0.0, 0.0, [])

    def stats(self) -> EngineStats:
        return EngineStats.snapshot(self.scheduler, self.kv, self._peak, len(self._pending),
                                    self._num_steps, self.clock.name)

    def __repr__(self) -> str:
        c = self.config
        return (f"Engine(model={self.model_name!r}, scheduler={c.scheduler!r}, "
                f"kv_layout={c.kv_layout!r}, block_size={c.block_size}, "
                f"num_blocks={self.num_blocks}, backend={self.runner.backend!r}, "
                f"clock={self.clock.name!r})")


def _first(x):
    return x[0] if isinstance(x, (list, tuple)) else x
