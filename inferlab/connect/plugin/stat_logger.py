"""inferlab's stat-logger plugin for vLLM: one small report per engine step, out over ZMQ.

Runs INSIDE a vLLM server, in vLLM's venv (it imports vllm; the lab's venv never imports
this module). vLLM finds it through its own extension point, the entry-point group
``vllm.stat_logger_plugins`` (pyproject.toml registers ``inferlab``), and loads it in the
API-server process of ``vllm serve``. It does nothing unless the server was started with
``INFERLAB_VLLM_STEPS_ENDPOINT`` set (``inferlab vllm serve`` sets it), so installing inferlab
into a vLLM venv changes nothing else.

Per step vLLM calls ``record(scheduler_stats, iteration_stats, engine_idx=...)``; we read a
few fields (``StepReport`` in ``wire.step_reports``) and publish them as msgpack on a PUB socket
bound at that endpoint, never blocking (a slow or absent subscriber loses reports, and sees the
gap in ``seq``). ``EngineInfo`` goes out at start and every ``HEARTBEAT_S`` seconds. The fields
read are vLLM internals checked against ``step_reports.PINNED_VLLM``; on another version the
plugin still runs, reads what it finds (missing fields read as absent) and says the version in
its info.
"""
from __future__ import annotations

import logging
import os
import threading
import time

from vllm.v1.metrics.loggers import AggregateStatLoggerBase

from ..wire import step_reports

log = logging.getLogger("vllm.inferlab")


def _get(obj, *path, default=None):
    for name in path:
        obj = getattr(obj, name, None)
        if obj is None:
            return default
    return obj


def step_report(engine: int, seq: int, sched, it) -> step_reports.StepReport:
    """A StepReport from vLLM's SchedulerStats (``sched``) and IterationStats (``it``)."""
    pc = _get(sched, "prefix_cache_stats")
    det = _get(sched, "iteration_details")
    pts = _get(it, "prompt_token_stats")
    finished = [step_reports.Finished(
        request_id=str(f.request_id), finish_reason=str(f.finish_reason),
        num_prompt_tokens=int(f.num_prompt_tokens), num_generation_tokens=int(
            f.num_generation_tokens), num_cached_tokens=int(_get(f, "num_cached_tokens",
                                                                  default=0)),
        e2e=float(f.e2e_latency), queued=float(f.queued_time), prefill=float(f.prefill_time),
        decode=float(f.decode_time)) for f in (_get(it, "finished_requests") or [])]
    return step_reports.StepReport(
        engine=engine, seq=seq, ts=time.time(),
        num_running=int(_get(sched, "num_running_reqs", default=0)),
        num_waiting=int(_get(sched, "num_waiting_reqs", default=0)),
        kv_usage=float(_get(sched, "kv_cache_usage", default=0.0)),
        prefix_requests=int(_get(pc, "requests", default=0)),
        prefix_queries=int(_get(pc, "queries", default=0)),
        prefix_hits=int(_get(pc, "hits", default=0)),
        prefix_reset=bool(_get(pc, "reset", default=False)),
        ctx_requests=_get(det, "num_ctx_requests"), ctx_tokens=_get(det, "num_ctx_tokens"),
        gen_requests=_get(det, "num_generation_requests"),
        gen_tokens=_get(det, "num_generation_tokens"), elapsed_ms=_get(det, "elapsed_ms"),
        new_tokens=int(_get(it, "num_generation_tokens", default=0)),
        prompt_tokens=int(_get(pts, "total", default=0)),
        prompt_computed=int(_get(pts, "computed", default=0)),
        prompt_cached=int(_get(pts, "cached_tokens", default=0)),
        num_preempted=int(_get(it, "num_preempted_reqs", default=0)),
        finished=finished)


def engine_info(vllm_config, engines, seq: int) -> step_reports.EngineInfo:
    import vllm
    cc, sc, mc = (_get(vllm_config, n) for n in ("cache_config", "scheduler_config",
                                                  "model_config"))
    names = _get(mc, "served_model_name")
    name = names[0] if isinstance(names, (list, tuple)) and names else names
    return step_reports.EngineInfo(
        seq=seq, ts=time.time(), vllm_version=str(getattr(vllm, "__version__", "?")),
        model=str(name or _get(mc, "model", default="")),
        block_size=int(_get(cc, "block_size", default=0)),
        num_blocks=int(_get(cc, "num_gpu_blocks", default=0)),
        max_num_seqs=int(_get(sc, "max_num_seqs", default=0)),
        max_num_batched_tokens=int(_get(sc, "max_num_batched_tokens", default=0)),
        max_model_len=int(_get(mc, "max_model_len", default=0)),
        prefix_caching=bool(_get(cc, "enable_prefix_caching", default=False)),
        chunked_prefill=bool(_get(sc, "enable_chunked_prefill", default=False)),
        engines=[int(e) for e in engines],
        iteration_details=bool(_get(vllm_config, "observability_config",
                                    "enable_logging_iteration_details", default=False)),
        pid=os.getpid())


class InferlabStepLogger(AggregateStatLoggerBase):
    """One instance per API-server process, for all its data-parallel engines."""

    def __init__(self, vllm_config, engine_indexes=None):
        self.vllm_config = vllm_config
        self.engines = list(engine_indexes or [0])
        self.endpoint = os.environ.get(step_reports.ENV_ENDPOINT, "")
        self._sock = None
        self._lock = threading.Lock()
        self._seq = 0
        self._failed = False
        if not self.endpoint:
            return
        try:
            import zmq
            self._ctx = zmq.Context()
            sock = self._ctx.socket(zmq.PUB)
            sock.setsockopt(zmq.SNDHWM, 10_000)
            sock.setsockopt(zmq.LINGER, 0)
            sock.bind(self.endpoint)
            self._sock, self._noblock = sock, zmq.NOBLOCK
        except Exception as e:  # noqa: BLE001 - a plugin must never stop the server
            log.warning("inferlab step reports off: cannot bind %s (%s)", self.endpoint, e)
            return
        log.info("inferlab step reports on %s (checked against vLLM %s)", self.endpoint,
                 step_reports.PINNED_VLLM)
        threading.Thread(target=self._heartbeat, daemon=True, name="inferlab-steps").start()

    def _send(self, msg) -> None:
        if self._sock is None:
            return
        with self._lock:
            try:
                self._sock.send_multipart((step_reports.TOPIC, step_reports.encode(msg)),
                                          self._noblock)
            except Exception as e:  # noqa: BLE001 - full queue or closed socket: drop it
                if not self._failed:
                    self._failed = True
                    log.warning("inferlab step report dropped: %s", e)

    def _next(self) -> int:
        with self._lock:
            self._seq += 1
            return self._seq - 1

    def _heartbeat(self) -> None:
        while self._sock is not None:
            self.log_engine_initialized()
            time.sleep(step_reports.HEARTBEAT_S)

    def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx=0):
        if self._sock is None or scheduler_stats is None:
            return
        try:
            msg = step_report(int(engine_idx or 0), self._next(), scheduler_stats,
                              iteration_stats)
        except Exception as e:  # noqa: BLE001
            if not self._failed:
                self._failed = True
                log.warning("inferlab: could not read vLLM's stats (vLLM %s? checked on %s): %s",
                            _vllm_version(), step_reports.PINNED_VLLM, e)
            return
        self._send(msg)

    def log_engine_initialized(self):
        if self._sock is None:
            return
        try:
            self._send(engine_info(self.vllm_config, self.engines, self._next()))
        except Exception as e:  # noqa: BLE001
            log.warning("inferlab: could not describe the engine: %s", e)

    def log(self):
        pass


def _vllm_version() -> str:
    import vllm
    return str(getattr(vllm, "__version__", "?"))
