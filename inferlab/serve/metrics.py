"""GET /metrics: the served engine in Prometheus' format, under vLLM's metric names.

A Grafana dashboard made for vLLM reads the lab's server unchanged: each ``vllm:`` metric
here has vLLM's name, labels (``model_name``, ``engine``), meaning and default histogram
buckets (vllm/v1/metrics/loggers.py, buckets.py). What the lab knows and vLLM does not export
(KV waste, how long blocks are held, block events by kind) is under ``inferlab:``. The table
of vLLM's names served and not served, and why, is in docs/reference.md ("/metrics").

Nothing is measured again: every value comes from the engine's own step records, read by a
subscriber on the engine's bus (so it runs in the server's engine thread, after each step),
and every per-request latency is ``RequestMetrics.from_times``, the engine's one definition.
Times are on the engine's clock (the wall clock unless the engine was built with a simulated
one; ``inferlab:engine_info`` names it). A scrape (an HTTP thread) and a step's update hold
the same lock, so one scrape shows one step: its counters and gauges agree with each other and
with ``engine.stats()`` after that step. Each server has its own registry, never
prometheus_client's global one, so several servers live in one process.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from prometheus_client import (CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge,
                               GCCollector, Histogram, PlatformCollector, ProcessCollector,
                               generate_latest)

from ..core.outputs import RequestMetrics

# vLLM's default buckets (vllm/v1/metrics/buckets.py), so its dashboards' quantiles line up
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
               7.5, 10.0, 20.0, 40.0, 80.0)
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                   60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
ITERATION_TOKENS_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
PREEMPTION_BUCKETS = (1, 2, 3, 4, 5, 10, 20)
RESIDENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20,
                     30, 60, 120, 300, 600, 1200, 1800)
FINISH_REASONS = ("stop", "length", "abort")
KV_EVENT_KINDS = ("allocated", "shared", "cached", "freed", "evicted")
PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")


def token_buckets(max_model_len: int) -> list[int]:
    """vLLM's request-token buckets: 1, 2, 5, 10, 20, 50 ... up to max_model_len."""
    out, scale = [], 1
    while True:
        for m in (1, 2, 5):
            if m * scale > max_model_len:
                return out
            out.append(m * scale)
        scale *= 10


@dataclass(slots=True)
class _Live:
    """One request between its "queued" event and its end, as the records told it."""

    arrival: float
    prompt_len: int
    first_scheduled: float | None = None
    num_cached: int = 0
    num_preemptions: int = 0
    admitted: bool = False
    token_times: list[float] = field(default_factory=list)


class ServerMetrics:
    """Prometheus metrics of one engine, fed by its step records (``attach`` subscribes)."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, engine, model_name: str, engine_index: int = 0):
        self.engine = engine
        self.registry = CollectorRegistry(auto_describe=True)
        for collector in (ProcessCollector, PlatformCollector, GCCollector):
            collector(registry=self.registry)   # process_*, python_*: as vLLM's registry has
        self._lock = threading.Lock()
        self._live: dict[str, _Live] = {}
        self._held_since: dict[int, float] = {}     # block id -> when requests took it
        self._prefix_caching = bool(getattr(engine.kv, "enable_prefix_caching", False))
        self._unsubscribe = None
        names, values = ("model_name", "engine"), (model_name, str(engine_index))

        def make(kind, name, doc, extra=(), **kw):
            m = kind(name, doc, names + tuple(extra), registry=self.registry, **kw)
            return m if extra else m.labels(*values)

        def hist(name, doc, buckets):
            return make(Histogram, name, doc, buckets=buckets)

        # --- vLLM's names --------------------------------------------------------------
        self.running = make(Gauge, "vllm:num_requests_running",
                            "Number of requests in model execution batches.")
        self.waiting = make(Gauge, "vllm:num_requests_waiting",
                            "Number of requests waiting to be processed.")
        self.kv_usage = make(Gauge, "vllm:kv_cache_usage_perc",
                             "KV-cache usage. 1 means 100 percent usage.")
        self.prefix_queries = make(Counter, "vllm:prefix_cache_queries",
                                   "Prefix cache queries, in terms of number of queried tokens.")
        self.prefix_hits = make(Counter, "vllm:prefix_cache_hits",
                                "Prefix cache hits, in terms of number of cached tokens.")
        self.preemptions = make(Counter, "vllm:num_preemptions",
                                "Cumulative number of preemption from the engine.")
        self.prompt_tokens = make(Counter, "vllm:prompt_tokens",
                                  "Number of prefill tokens processed.")
        by_source = make(Counter, "vllm:prompt_tokens_by_source",
                         "Number of prompt tokens by source.", ["source"])
        self.prompt_by_source = {s: by_source.labels(*values, s) for s in PROMPT_SOURCES}
        self.prompt_cached = make(Counter, "vllm:prompt_tokens_cached",
                                  "Number of cached prompt tokens (local + external).")
        self.generation_tokens = make(Counter, "vllm:generation_tokens",
                                      "Number of generation tokens processed.")
        success = make(Counter, "vllm:request_success", "Count of successfully processed "
                       "requests (here also those aborted by their client).", ["finished_reason"])
        self.success = {r: success.labels(*values, r) for r in FINISH_REASONS}
        tokens = token_buckets(engine.max_model_len)
        self.req_prompt = hist("vllm:request_prompt_tokens",
                               "Number of prefill tokens processed.", tokens)
        self.req_generation = hist("vllm:request_generation_tokens",
                                   "Number of generation tokens processed.", tokens)
        self.req_kv_computed = hist("vllm:request_prefill_kv_computed_tokens",
                                    "Histogram of new KV tokens computed during prefill "
                                    "(excluding cached tokens).", tokens)
        self.iteration_tokens = hist("vllm:iteration_tokens_total",
                                     "Histogram of number of tokens per engine_step.",
                                     ITERATION_TOKENS_BUCKETS)
        self.ttft = hist("vllm:time_to_first_token_seconds",
                         "Histogram of time to first token in seconds.", TTFT_BUCKETS)
        self.itl = hist("vllm:inter_token_latency_seconds",
                        "Histogram of inter-token latency in seconds.", ITL_BUCKETS)
        self.tpot = hist("vllm:request_time_per_output_token_seconds",
                         "Histogram of time_per_output_token_seconds per request.", ITL_BUCKETS)
        phase = "Histogram of time spent in {} phase for request."
        self.e2e = hist("vllm:e2e_request_latency_seconds",
                        "Histogram of e2e request latency in seconds.", LATENCY_BUCKETS)
        self.queue = hist("vllm:request_queue_time_seconds", phase.format("WAITING"),
                          LATENCY_BUCKETS)
        self.inference = hist("vllm:request_inference_time_seconds", phase.format("RUNNING"),
                              LATENCY_BUCKETS)
        self.prefill = hist("vllm:request_prefill_time_seconds", phase.format("PREFILL"),
                            LATENCY_BUCKETS)
        self.decode = hist("vllm:request_decode_time_seconds", phase.format("DECODE"),
                           LATENCY_BUCKETS)
        self.req_preemptions = hist("vllm:request_num_preemptions", "Histogram of the number "
                                    "of times a request was preempted.", PREEMPTION_BUCKETS)
        # --- the lab's own ---------------------------------------------------------------
        self.records = make(Counter, "inferlab:step_records", "Step records the engine "
                            "published (a step that ran a batch, or one that told an abort).")
        self.blocks_used = make(Gauge, "inferlab:kv_blocks_used",
                                "KV blocks held by requests (vllm:kv_cache_usage_perc x total).")
        self.blocks_total = make(Gauge, "inferlab:kv_blocks_total", "KV blocks in the cache.")
        self.slots = make(Gauge, "inferlab:kv_token_slots_allocated",
                          "Token slots in the KV blocks (or reservations) requests hold.")
        self.tokens_used = make(Gauge, "inferlab:kv_tokens_used",
                                "Token slots holding a computed key/value (shared ones once).")
        self.waste = make(Gauge, "inferlab:kv_waste_perc", "KV waste: 1 - tokens used / token "
                          "slots allocated (0 when nothing is allocated). 1 means all wasted.")
        self.hold = hist("inferlab:kv_block_hold_seconds", "Histogram of how long requests "
                         "held a KV block: from its allocation (or a prefix hit taking it off "
                         "the free queue) until its last holder let it go.", RESIDENCY_BUCKETS)
        events = make(Counter, "inferlab:kv_block_events", "KV blocks by event: allocated, "
                      "shared (prefix hit), cached (prefix stored), freed, evicted.", ["kind"])
        self.block_events = {k: events.labels(*values, k) for k in KV_EVENT_KINDS}
        cfg = engine.config
        make(Gauge, "inferlab:engine_info", "The served engine's settings (value 1).",
             ["scheduler", "kv_layout", "block_size", "num_blocks", "enable_prefix_caching",
              "enable_chunked_prefill", "clock"]).labels(
            *values, cfg.scheduler, engine.kv.layout, str(engine.kv.block_size),
            str(engine.num_blocks), str(self._prefix_caching).lower(),
            str(bool(cfg.enable_chunked_prefill)).lower(), engine.clock_name).set(1)
        self.blocks_total.set(engine.num_blocks)

    # --- wiring -----------------------------------------------------------------------
    def attach(self) -> None:
        """Subscribe to the engine's step records (before its serving thread starts)."""
        if self._unsubscribe is None:
            self._unsubscribe = self.engine.subscribe(self)

    def detach(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def render(self) -> bytes:
        """The text a Prometheus scrape gets: everything as of one step."""
        with self._lock:
            return generate_latest(self.registry)

    def __call__(self, rec) -> None:
        with self._lock:
            self._observe(rec)

    # --- one step record --------------------------------------------------------------
    def _observe(self, rec) -> None:
        self.records.inc()
        self.running.set(rec.num_running)
        self.waiting.set(rec.num_waiting)
        self.kv_usage.set(rec.kv_blocks_used / rec.kv_blocks_total if rec.kv_blocks_total else 0)
        self.blocks_used.set(rec.kv_blocks_used)
        self.blocks_total.set(rec.kv_blocks_total)
        self.slots.set(rec.kv_slots_allocated)
        self.tokens_used.set(rec.kv_tokens_used)
        self.waste.set(1.0 - rec.kv_tokens_used / rec.kv_slots_allocated
                       if rec.kv_slots_allocated else 0.0)
        if rec.batch:
            self.iteration_tokens.observe(rec.num_batched_tokens)
        chunks = {c.request_id: c for c in rec.batch}
        ends = []
        for ev in rec.request_events:        # in the order the scheduler told them
            if ev.kind == "queued" and ev.info is not None:
                self._live[ev.request_id] = _Live(ev.info.arrival, ev.info.prompt_len)
            elif ev.kind == "admitted":
                self._admitted(self._live.get(ev.request_id), chunks.get(ev.request_id))
            elif ev.kind == "preempted":
                self.preemptions.inc()
                if (live := self._live.get(ev.request_id)) is not None:
                    live.num_preemptions += 1
            elif ev.kind in ("finished", "aborted"):
                ends.append(ev)
        for c in rec.batch:
            live = self._live.get(c.request_id)
            if live is not None and live.first_scheduled is None:
                live.first_scheduled = rec.t_start      # as the engine sets it
        for tok in rec.emitted:
            self._token(self._live.get(tok.request_id), rec.t_end)
        for ev in ends:                      # after the step's tokens, as the engine does
            self._finished(ev, rec.t_end)
        self._blocks(rec)

    def _admitted(self, live: _Live | None, chunk) -> None:
        if live is None or live.admitted:    # a preempted request coming back: no new query
            return
        live.admitted = True
        live.num_cached = chunk.num_cached if chunk is not None else 0
        if self._prefix_caching:
            self.prefix_queries.inc(live.prompt_len)
            self.prefix_hits.inc(live.num_cached)

    def _token(self, live: _Live | None, t: float) -> None:
        self.generation_tokens.inc()
        if live is None:
            return
        if not live.token_times:             # the prefill is done: its tokens count now
            self.ttft.observe(t - live.arrival)
            self.prompt_tokens.inc(live.prompt_len)
            self.prompt_cached.inc(live.num_cached)
            self.prompt_by_source["local_compute"].inc(live.prompt_len - live.num_cached)
            self.prompt_by_source["local_cache_hit"].inc(live.num_cached)
        else:
            self.itl.observe(t - live.token_times[-1])
        live.token_times.append(t)

    def _finished(self, ev, t: float) -> None:
        live = self._live.pop(ev.request_id, None)
        reason = "abort" if ev.kind == "aborted" else (ev.detail or "stop")
        if reason in self.success:
            self.success[reason].inc()
        if live is None or ev.kind == "aborted":
            return                           # as vLLM: a client's abort has no latencies
        m = RequestMetrics.from_times(live.arrival, live.first_scheduled, live.token_times, t,
                                      num_preemptions=live.num_preemptions,
                                      num_cached_tokens=live.num_cached,
                                      num_prompt_tokens=live.prompt_len)
        self.e2e.observe(m.e2e)
        self.req_prompt.observe(m.num_prompt_tokens)
        self.req_generation.observe(m.num_output_tokens)
        self.req_kv_computed.observe(m.num_prompt_tokens - m.num_cached_tokens)
        self.req_preemptions.observe(m.num_preemptions)
        if m.queue_time is not None:
            self.queue.observe(m.queue_time)
        if m.first_token_time is not None:   # vLLM's phases: scheduled, first, last token
            last = live.token_times[-1]
            self.prefill.observe(m.first_token_time - live.first_scheduled)
            self.decode.observe(last - m.first_token_time)
            self.inference.observe(last - live.first_scheduled)
            self.tpot.observe(m.tpot or 0.0)  # vLLM: 0 for a one-token answer

    def _blocks(self, rec) -> None:
        for ev in rec.kv_events:
            self.block_events[ev.kind].inc(len(ev.block_ids))
            if ev.kind == "allocated":
                for b in ev.block_ids:
                    self._held_since[b] = rec.t_start
            elif ev.kind == "shared":        # a cached block taken again, or one more holder
                for b in ev.block_ids:
                    self._held_since.setdefault(b, rec.t_start)
            elif ev.kind == "freed":         # its last holder let it go
                for b in ev.block_ids:
                    t0 = self._held_since.pop(b, None)
                    if t0 is not None:
                        self.hold.observe(rec.t_end - t0)
