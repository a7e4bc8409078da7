"""Run one workload through several engine configurations and tabulate the difference.

Each config gets a fresh engine and the very same requests, so a change in the table is
caused by the change in the config (scheduler, KV layout, chunking, prefix caching ...).
"""
from __future__ import annotations

import dataclasses
import html
import math

from inferlab.errors import InvalidInputError, InvalidTypeError
from inferlab.observe.metrics import SLO, RunMetrics, summarize
from inferlab.sim.workloads import Workload, run_workload

_ms = lambda v: f"{v * 1e3:.1f} ms"
_pct = lambda v: f"{v:.1%}"
_int = lambda v: f"{v:,.0f}"
# (row key, label, formatter) of the table, in display order; rows absent from every
# config (e.g. goodput without an SLO, stats an engine does not report) are left out.
COLUMNS = [
    ("request_throughput", "requests/s", lambda v: f"{v:.2f}"),
    ("output_throughput", "output tok/s", lambda v: f"{v:.1f}"),
    ("total_token_throughput", "total tok/s", lambda v: f"{v:.1f}"),
    ("goodput", "goodput (req/s in SLO)", lambda v: f"{v:.2f}"),
    ("ttft_mean", "TTFT mean", _ms), ("ttft_p99", "TTFT p99", _ms),
    ("tpot_mean", "TPOT mean", _ms), ("itl_p99", "ITL p99", _ms),
    ("e2e_mean", "E2E mean", _ms), ("e2e_p99", "E2E p99", _ms),
    ("duration", "duration", lambda v: f"{v:.3f} s"),
    ("num_steps", "engine steps", _int),
    ("peak_kv_waste", "peak KV waste", _pct),
    ("max_concurrent_requests", "max concurrent requests", _int),
    ("num_preemptions", "preemptions", _int),
    ("prefix_cache_hits", "prefix-cache hit tokens", _int),
]


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)


@dataclasses.dataclass(slots=True)
class CompareResult:
    workload: str
    labels: list[str]
    rows: list[dict]                 # one per config: summarize() fields + engine stats
    ratios: list[dict]               # each numeric field / the first config's
    metrics: list[RunMetrics]
    configs: list[dict]

    def ratio(self, key: str, label: str) -> float:
        return self.ratios[self.labels.index(label)][key]

    def _table(self):
        """[(label, [cell text per config])] for the columns present."""
        out = []
        for key, name, fmt in COLUMNS:
            if not any(_num(r.get(key)) for r in self.rows):
                continue
            cells = []
            for i, row in enumerate(self.rows):
                v, q = row.get(key), self.ratios[i].get(key)
                text = fmt(v) if _num(v) else "—"
                cells.append(text + (f" ({q:.2f}x)" if i and _num(q) else ""))
            out.append((name, cells))
        return out

    def __str__(self) -> str:
        clocks = sorted({r.get("clock", "") for r in self.rows})
        header = ["metric", *self.labels]
        body = [[name, *cells] for name, cells in self._table()]
        widths = [max(len(line[j]) for line in [header, *body]) for j in range(len(header))]
        fmt = lambda line: "  ".join(c.ljust(w) if j == 0 else c.rjust(w)
                                     for j, (c, w) in enumerate(zip(line, widths)))
        lines = [f"compare on {self.workload!r} (clock: {', '.join(clocks)}; "
                 f"ratios vs {self.labels[0]!r})", fmt(header),
                 "  ".join("-" * w for w in widths), *map(fmt, body)]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        e = html.escape
        clocks = sorted({r.get("clock", "") for r in self.rows})
        head = "".join(f"<th style='text-align:right'>{e(l)}</th>" for l in self.labels)
        body = "".join(
            f"<tr><td style='text-align:left'>{e(name)}</td>"
            + "".join(f"<td style='text-align:right'>{e(c)}</td>" for c in cells) + "</tr>"
            for name, cells in self._table())
        return (f"<div class='inferlab-compare'><table><caption style='text-align:left'>"
                f"{e(self.workload)} — clock: {e(', '.join(clocks))}; ratios vs "
                f"{e(self.labels[0])}</caption><thead><tr><th>metric</th>{head}</tr></thead>"
                f"<tbody>{body}</tbody></table></div>")


def _labelled(configs) -> tuple[list[str], list[dict]]:
    if not isinstance(configs, (list, tuple)) or not configs:
        raise InvalidInputError("configs must be a non-empty list of dicts of Engine options "
                                "or (label, dict) pairs")
    labels, dicts = [], []
    for i, c in enumerate(configs):
        label = None
        if isinstance(c, tuple) and len(c) == 2 and isinstance(c[0], str):
            label, c = c
        if not isinstance(c, dict):
            raise InvalidTypeError(f"configs[{i}] must be a dict of Engine options or a "
                                   f"(label, dict) pair, got {type(c).__name__}")
        labels.append(label)
        dicts.append(dict(c))
    # Unnamed configs are labelled by the options that differ between the configs; an
    # option a config leaves out shows the engine's default.
    from inferlab.core.config import EngineConfig
    base = EngineConfig()                 # its defaults (dtype: INFERLAB_DTYPE, else float32)
    defaults = {f.name: getattr(base, f.name) for f in dataclasses.fields(EngineConfig)}
    keys = sorted({k for d in dicts for k in d})
    missing = object()
    value = lambda d, k: d.get(k, defaults.get(k, missing))
    varying = [k for k in keys if len({repr(value(d, k)) for d in dicts}) > 1]
    for i, d in enumerate(dicts):
        if labels[i] is None:
            parts = [f"{k}={value(d, k)}" for k in varying if value(d, k) is not missing]
            labels[i] = ", ".join(parts) or f"config {i}"
    labels = [f"{l} #{i}" if labels.count(l) > 1 else l for i, l in enumerate(labels)]
    return labels, dicts


def _stats_dict(engine) -> dict:
    stats = engine.stats()
    if dataclasses.is_dataclass(stats):
        return {f.name: getattr(stats, f.name) for f in dataclasses.fields(stats)}
    return dict(stats)


def compare(workload: Workload, configs, *, engine_factory=None, slo: SLO | None = None,
            progress: bool = False) -> CompareResult:
    """Run ``workload`` once per config (a dict of Engine kwargs, or a (label, dict) pair) on
    a fresh engine; return a table of throughput, latency and KV metrics with ratios against
    the first config."""
    if not isinstance(workload, Workload):
        raise InvalidTypeError(f"workload must be a Workload, got {type(workload).__name__}")
    labels, dicts = _labelled(configs)
    if engine_factory is None:
        from inferlab.engine import Engine   # lazily: the engine pulls in torch
        engine_factory = Engine
    rows, metrics = [], []
    for cfg in dicts:
        engine = engine_factory(**cfg)
        outs = run_workload(engine, workload, progress=progress)
        m = summarize(outs, slo=slo, clock=engine.clock_name)
        rows.append({**_stats_dict(engine), **m.to_dict()})
        metrics.append(m)
        del engine, outs
    first = rows[0]
    ratios = [{k: (v / first[k] if _num(v) and _num(first.get(k)) and first[k] else math.nan)
               for k, v in row.items() if _num(v)} for row in rows]
    return CompareResult(workload.name, labels, rows, ratios, metrics, dicts)
