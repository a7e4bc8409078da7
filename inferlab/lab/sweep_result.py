"""What a sweep measured: one row per grid point, the numbers of one run, and the frontier.

A row (``Sweep.run`` makes them; the frontier view draws them; keep the shape)::

    {"point": 0,                                  # its place in the grid (= its index in rows)
     "knobs": {"max_num_seqs": 8, ...},           # the engine's own keyword names
     "metrics": {"output_tok_s": float, "output_tok_s_per_user": float,
                 "ttft_p50_ms": float, "ttft_p99_ms": float,
                 "itl_p50_ms": float, "itl_p99_ms": float,
                 "spread": {"output_tok_s": [min, max], "output_tok_s_per_user": [min, max]}},
     "trace_path": "out/point-00.trace.jsonl",    # or None
     "error": None,                               # or "CapacityError: ..." (then metrics None)
     "clock": "wall",                             # or "H100 (simulated, ...); a projection: ..."
     "projection": False}                         # True on a simulated clock

Each number is the median over the point's repeats (the spread is their range); a number
that a run cannot define (no inter-token gap when every answer is one token) is None.

**Output tokens/s per user** is what ``vllm bench sweep plot_pareto`` puts on its x axis
(vllm/benchmarks/sweep/plot_pareto.py, ``_prepare_records``): the run's output token
throughput divided by its number of users, where vLLM takes the user count from
``--user-count-var`` (default ``max_concurrency``, the client's cap on requests in flight),
else ``request_rate``, else ``max_concurrent_requests``: the peak number of requests in
flight at once (sent, not yet finished; vllm/benchmarks/serve.py). The lab's workloads have
no client cap on requests in flight, so the lab divides by that peak, measured exactly from
every finished request's arrival and finish times on the engine clock (vLLM counts it in
one-second buckets, which would count every request of a simulated-GPU run shorter than a
second as concurrent). With all requests arriving at once the peak is the number of
requests at every point; give the workload arrivals (a rate) for a frontier that bends.
The y axis, vLLM's tokens/s/GPU, is the output throughput itself (one device).
"""
from __future__ import annotations

import json
import math
import os
import statistics
from dataclasses import dataclass, field

from inferlab.observe.metrics import summarize

FORMAT = "inferlab-sweep"
VERSION = 1
METRICS = ("output_tok_s", "output_tok_s_per_user", "ttft_p50_ms", "ttft_p99_ms",
           "itl_p50_ms", "itl_p99_ms")
SPREAD = ("output_tok_s", "output_tok_s_per_user")


def peak_in_flight(outputs) -> int:
    """The most finished requests in flight at once (arrived, not yet finished): vLLM's
    ``max_concurrent_requests``, exact rather than in one-second buckets. A request that
    finishes at the instant another arrives does not overlap it."""
    return peak_overlap([(o.metrics.arrival_time, o.metrics.finish_time) for o in outputs
                         if o.finished and o.metrics.finish_time is not None])


def peak_overlap(spans) -> int:
    """The most (start, end) spans open at once; one ending at the instant another starts
    does not overlap it. The lab's runs (``peak_in_flight``) and vLLM's client's (its
    requests' send times and latencies, ``inferlab.lab.sweep_vllm``) count users by it."""
    events = []
    for start, end in spans:
        events += [(start, 1), (end, -1)]
    peak = cur = 0
    for _, d in sorted(events):              # at one instant, a finish (-1) before an arrival
        cur += d
        peak = max(peak, cur)
    return peak


def _num(v) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def run_numbers(outputs, clock: str = "") -> dict:
    """One run's numbers (the row's metrics before the median), and its user count."""
    done = [o for o in outputs if o.finished]
    m = summarize(done, clock=clock)
    users = peak_in_flight(done)
    tok_s = _num(m.output_throughput)
    ms = lambda v: None if _num(v) is None else v * 1e3          # noqa: E731
    return {"output_tok_s": tok_s,
            "output_tok_s_per_user": tok_s / users if tok_s is not None and users else None,
            "ttft_p50_ms": ms(m.ttft.median), "ttft_p99_ms": ms(m.ttft.p99),
            "itl_p50_ms": ms(m.itl.median), "itl_p99_ms": ms(m.itl.p99),
            "users": users, "requests": m.num_requests}


def point_metrics(runs: list[dict]) -> dict:
    """The row's metrics from one or more runs' ``run_numbers``: medians and ranges."""
    def med(k):
        xs = [r[k] for r in runs if r[k] is not None]
        return statistics.median(xs) if xs else None

    def rng(k):
        xs = [r[k] for r in runs if r[k] is not None]
        return [min(xs), max(xs)] if xs else None
    return {**{k: med(k) for k in METRICS}, "spread": {k: rng(k) for k in SPREAD}}


def row(point: int, knobs: dict, *, metrics: dict | None, trace_path: str | None,
        error: str | None, clock: str, projection: bool) -> dict:
    return {"point": point, "knobs": dict(knobs), "metrics": metrics, "trace_path": trace_path,
            "error": error, "clock": clock, "projection": projection}


def pareto(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both axes (more of each is better):
    a point is dropped when another is at least as good on both and better on one. In
    order of the first axis."""
    keep = [i for i, (x, y) in enumerate(points)
            if not any(x2 >= x and y2 >= y and (x2 > x or y2 > y) for x2, y2 in points)]
    return sorted(keep, key=lambda i: (points[i][0], -points[i][1]))


@dataclass
class SweepResult:
    """The rows of a sweep (see the module docstring) and its meta: the command, date, CPU,
    flags, cores and load (``protocol.result_meta``), the clock's label, the repeats, the
    busy-machine warning, each point's user counts."""
    rows: list[dict]
    meta: dict = field(default_factory=dict)

    def ok(self) -> list[int]:
        """Indices of the rows that ran (no error, both frontier numbers known)."""
        return [i for i, r in enumerate(self.rows) if r["error"] is None and r["metrics"]
                and r["metrics"]["output_tok_s"] is not None
                and r["metrics"]["output_tok_s_per_user"] is not None]

    def frontier(self) -> list[int]:
        """Indices (into ``rows``) of the Pareto-optimal successful points on output tokens/s
        per user (x, as vLLM's plot_pareto) and output tokens/s (y), in order of x."""
        ok = self.ok()
        pts = [(self.rows[i]["metrics"]["output_tok_s_per_user"],
                self.rows[i]["metrics"]["output_tok_s"]) for i in ok]
        return [ok[j] for j in pareto(pts)]

    def __len__(self) -> int:
        return len(self.rows)

    def to_json(self, path) -> str:
        """Write the result file: the meta at the top (as every docs/results file), the rows
        under ``results``. Returns the absolute path."""
        path = os.path.abspath(os.fspath(path))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        doc = {**self.meta, "format": FORMAT, "version": VERSION,
               "results": {"rows": self.rows}}
        with open(path, "w", encoding="utf-8") as f:
            f.write(json.dumps(doc, indent=1, default=str) + "\n")
        return path

    @classmethod
    def from_json(cls, path) -> "SweepResult":
        from inferlab.errors import InvalidInputError
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise InvalidInputError(f"{path}: not a sweep result file (no format {FORMAT!r})")
        if doc.get("version") != VERSION:
            raise InvalidInputError(f"{path}: sweep result version {doc.get('version')!r}; "
                                    f"this inferlab reads version {VERSION}")
        rows = doc["results"]["rows"]
        meta = {k: v for k, v in doc.items() if k not in ("format", "version", "results")}
        return cls(rows, meta)

    def __repr__(self) -> str:
        bad = sum(r["error"] is not None for r in self.rows)
        return (f"SweepResult({len(self.rows)} points, {bad} failed, frontier "
                f"{self.frontier()}, clock={self.meta.get('clock')!r})")
