"""Aggregate metrics of a run: throughput, latency percentiles, goodput under SLOs.

Everything is computed from the per-request engine-clock times in each RequestOutput, so
the same function summarizes a wall-clock run and a simulated-GPU run; ``clock`` says which.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from ..core.outputs import RequestMetrics
from ..errors import InvalidInputError, check_type

NAN = float("nan")


@dataclass(slots=True, frozen=True)
class SLO:
    """Latency limits (seconds) a request must all meet to count towards goodput.

    ``None`` means no limit on that metric. A request with a single output token has no
    TPOT and meets any TPOT limit.
    """

    ttft: float | None = None
    tpot: float | None = None
    e2e: float | None = None

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if v is not None:
                check_type(f"SLO.{f.name}", v, (int, float), "seconds (a float > 0) or None")
                if not v > 0:
                    raise InvalidInputError(f"SLO.{f.name} must be > 0 seconds or None, got {v}")

    def met_by(self, m) -> bool:
        """Whether one request's RequestMetrics meets every given limit."""
        for name in ("ttft", "tpot", "e2e"):
            limit, value = getattr(self, name), getattr(m, name)
            if limit is not None and value is not None and value > limit:
                return False
            if limit is not None and value is None and name != "tpot":
                return False   # never got a first token / never finished
        return True


@dataclass(slots=True, frozen=True)
class LatencyStats:
    """mean, median, p90, p99 of one latency (seconds); NaN when there are no samples."""

    mean: float = NAN
    median: float = NAN
    p90: float = NAN
    p99: float = NAN
    count: int = 0

    @classmethod
    def of(cls, values) -> "LatencyStats":
        xs = np.asarray([v for v in values if v is not None], dtype=float)
        if xs.size == 0:
            return cls()
        p50, p90, p99 = np.percentile(xs, [50, 90, 99])
        return cls(float(xs.mean()), float(p50), float(p90), float(p99), int(xs.size))


LATENCIES = ("ttft", "tpot", "itl", "e2e", "queue_time")


@dataclass(slots=True)
class RunMetrics:
    num_requests: int
    duration: float                  # seconds on the engine clock
    request_throughput: float        # finished requests / s
    output_throughput: float         # generated tokens / s
    total_token_throughput: float    # (prompt + generated) tokens / s
    num_prompt_tokens: int
    num_output_tokens: int
    num_cached_tokens: int           # prompt tokens served from the prefix cache
    num_preemptions: int
    ttft: LatencyStats
    tpot: LatencyStats
    itl: LatencyStats                # pooled over every inter-token gap of every request
    e2e: LatencyStats
    queue_time: LatencyStats
    slo: SLO | None = None
    goodput: float = NAN             # requests / s meeting every SLO limit (NaN without SLO)
    slo_attainment: float = NAN      # fraction of requests meeting the SLO
    clock: str = ""                  # which clock made the times: "wall", "H100 (simulated, ...)"
    num_unfinished: int = 0

    def to_dict(self) -> dict:
        """Flat dict: latencies become ``ttft_mean``, ``ttft_p99`` ... (for tables, JSON)."""
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, LatencyStats):
                for stat in ("mean", "median", "p90", "p99"):
                    out[f"{f.name}_{stat}"] = getattr(v, stat)
            elif isinstance(v, SLO):
                out.update({f"slo_{k}": getattr(v, k) for k in ("ttft", "tpot", "e2e")})
            elif v is not None:
                out[f.name] = v
        return out

    def __str__(self) -> str:
        ms = lambda s: f"{s.mean * 1e3:.1f} / {s.median * 1e3:.1f} / {s.p99 * 1e3:.1f} ms"
        lines = [f"{self.num_requests} requests in {self.duration:.3f} s "
                 f"({self.clock or 'clock ?'})",
                 f"throughput: {self.request_throughput:.2f} req/s, {self.output_throughput:.1f} "
                 f"output tok/s, {self.total_token_throughput:.1f} tok/s",
                 *(f"{name} mean/median/p99: {ms(getattr(self, name))}"
                   for name in ("ttft", "tpot", "itl", "e2e"))]
        if self.slo is not None:
            lines.append(f"goodput: {self.goodput:.2f} req/s "
                         f"({self.slo_attainment:.0%} meet {self.slo})")
        return "\n".join(lines)


def summarize(outputs, *, duration: float | None = None, slo: SLO | None = None,
              clock: str = "") -> RunMetrics:
    """Aggregate metrics over finished RequestOutputs.

    ``duration`` defaults to first arrival -> last finish on the engine clock. Unfinished
    outputs are left out and counted in ``num_unfinished``.
    """
    outputs = list(outputs)
    if slo is not None:
        check_type("slo", slo, SLO, "an SLO(ttft=..., tpot=..., e2e=...) or None")
    if duration is not None:
        check_type("duration", duration, (int, float), "seconds (a float > 0) or None")
        if not duration > 0:
            raise InvalidInputError(f"duration must be > 0 seconds or None, got {duration}")
    done = [o for o in outputs if o.finished and o.metrics.finish_time is not None]
    ms = [o.metrics for o in done]
    if duration is None:
        duration = (max(m.finish_time for m in ms) - min(m.arrival_time for m in ms)) if ms else 0.0
    rate = (lambda x: x / duration) if duration > 0 else (lambda x: NAN)
    n_prompt = sum(m.num_prompt_tokens for m in ms)
    n_out = sum(m.num_output_tokens for m in ms)
    good = sum(1 for m in ms if slo.met_by(m)) if slo is not None else None
    return RunMetrics(
        num_requests=len(ms), duration=float(duration),
        request_throughput=rate(len(ms)), output_throughput=rate(n_out),
        total_token_throughput=rate(n_prompt + n_out),
        num_prompt_tokens=n_prompt, num_output_tokens=n_out,
        num_cached_tokens=sum(m.num_cached_tokens for m in ms),
        num_preemptions=sum(m.num_preemptions for m in ms),
        ttft=LatencyStats.of(m.ttft for m in ms),
        tpot=LatencyStats.of(m.tpot for m in ms),
        itl=LatencyStats.of(x for m in ms for x in m.itl),
        e2e=LatencyStats.of(m.e2e for m in ms),
        queue_time=LatencyStats.of(m.queue_time for m in ms),
        slo=slo,
        goodput=NAN if good is None else rate(good),
        slo_attainment=NAN if good is None or not ms else good / len(ms),
        clock=clock, num_unfinished=len(outputs) - len(done))


def request_metrics(records, requests: dict | None = None) -> dict[str, RequestMetrics]:
    """Per-request latencies from step records alone (a saved trace, or a live feed from vLLM),
    by the same definitions as ``RequestOutput.metrics``. ``requests`` maps a request id to
    its ``arrival`` (and ``prompt_len``); a request without one arrives when first seen."""
    requests = requests or {}
    seen: dict[str, dict] = {}

    def entry(rid: str, t: float) -> dict:
        if rid not in seen:
            info = requests.get(rid) or {}
            arrival = info.get("arrival")
            seen[rid] = {"arrival": t if arrival is None else arrival, "scheduled": None,
                         "tokens": [], "finish": None, "preempted": 0, "cached": None,
                         "prompt_len": info.get("prompt_len", 0)}
        return seen[rid]

    for rec in records:
        for ev in rec.request_events:
            d = entry(ev.request_id, rec.t_start)
            if ev.kind == "preempted":
                d["preempted"] += 1
            elif ev.kind in ("finished", "aborted", "rejected"):
                d["finish"] = rec.t_end
        for c in rec.batch:
            d = entry(c.request_id, rec.t_start)
            if d["scheduled"] is None:
                d["scheduled"], d["cached"] = rec.t_start, c.num_cached
        for e in rec.emitted:
            entry(e.request_id, rec.t_start)["tokens"].append(rec.t_end)
    return {rid: RequestMetrics.from_times(
                d["arrival"], d["scheduled"], d["tokens"], d["finish"],
                num_preemptions=d["preempted"], num_cached_tokens=d["cached"] or 0,
                num_prompt_tokens=d["prompt_len"])
            for rid, d in seen.items()}
