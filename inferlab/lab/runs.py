"""The analyst's what-if loop: one summary row per run, a table of runs, two runs side by side.

A row holds what a knob changes (throughput, TTFT and inter-token latency p50/p99, peak KV
use and waste, preemptions, recomputed tokens) beside the knobs themselves, so that a run
with ``block_size=64`` reads against the run with 16 above it. ``RunsTable`` is what the Lab
shows under its controls; ``to_frame()`` gives a pandas DataFrame, ``to_csv(path)`` a file,
``deltas(a, b)`` the change from run ``a`` to run ``b`` in every number.
"""
from __future__ import annotations

import csv
import html
import io
import math
from dataclasses import dataclass, field

from inferlab.observe.metrics import summarize

# (key, column title, format) of the numbers in a row, in display order
NUMBERS = [
    ("output_tok_s", "output tok/s", "{:.1f}"),
    ("ttft_p50_ms", "TTFT p50 (ms)", "{:.0f}"), ("ttft_p99_ms", "TTFT p99 (ms)", "{:.0f}"),
    ("itl_p50_ms", "ITL p50 (ms)", "{:.1f}"), ("itl_p99_ms", "ITL p99 (ms)", "{:.1f}"),
    ("peak_kv_blocks", "peak KV blocks", "{:.0f}"), ("peak_kv_use", "peak KV use", "{:.0%}"),
    ("peak_kv_waste", "peak KV waste", "{:.1%}"), ("preemptions", "preemptions", "{:.0f}"),
    ("recomputed_tokens", "recomputed tokens", "{:.0f}"),
    ("prefix_hit_tokens", "prefix-cache hit tokens", "{:.0f}"),
    ("steps", "steps", "{:.0f}"), ("requests", "requests", "{:.0f}"),
    ("output_tokens", "output tokens", "{:.0f}"),
]
# compact, theme-aware (JupyterLab's CSS variables with fallbacks), numbers right-aligned
STYLE = ("<style>.il-runs,.il-runs-deltas{border-collapse:collapse;font-size:12px;"
         "font-variant-numeric:tabular-nums;margin:4px 0}"
         ".il-runs th,.il-runs-deltas th{font-weight:600;text-align:right;vertical-align:bottom;"
         "padding:2px 8px;max-width:90px;line-height:1.2;"
         "border-bottom:1px solid var(--jp-border-color1,#999)}"
         ".il-runs td,.il-runs-deltas td{text-align:right;padding:1px 8px;line-height:1.3}"
         ".il-runs td:first-child,.il-runs-deltas td:first-child{text-align:left}</style>")
KNOBS = ("scheduler", "kv_layout", "block_size", "num_blocks", "max_num_seqs",
         "max_num_batched_tokens", "enable_chunked_prefill", "enable_prefix_caching", "clock",
         "kv_cache_memory", "dtype")
# the Lab's workloads (its "workload" control), built by ``lab_workload``
WORKLOADS = ("chat requests", "random tokens: synthetic", "random tokens: chat sessions",
             "random tokens: agent loops")


def lab_workload(kind: str, n: int, rate: float, max_tokens: int, tokenizer, seed: int = 0):
    """One of the Lab's ``WORKLOADS``: ``n`` requests (sessions and loops: ``n // 3``),
    arriving as a Poisson process at ``rate`` per second (0: all at once), answers capped at
    ``max_tokens`` (random tokens: at 24). What the Lab's Run and its sweep play."""
    from inferlab.errors import InvalidInputError
    from inferlab.sim import workloads as wl
    if kind not in WORKLOADS:
        raise InvalidInputError(f"unknown workload {kind!r}; the Lab's: {WORKLOADS}")
    arrival = wl.Poisson(rate) if rate > 0 else None
    if kind == "chat requests":            # real requests, answers end at EOS (capped)
        from inferlab.sim.chat_requests import chat_requests
        return chat_requests(tokenizer, n, max_tokens=max_tokens, arrival=arrival, seed=seed)
    cap = min(max_tokens, 24)
    if kind == "random tokens: chat sessions":
        return wl.chat_sessions(max(1, n // 3), turns=3, system_prompt_len=32, output_len=cap,
                                think_time=0.05, arrival=arrival, seed=seed)
    if kind == "random tokens: agent loops":
        return wl.agent_loops(max(1, n // 3), tool_calls=2, tools_prompt_len=48, output_len=cap,
                              tool_latency=0.05, arrival=arrival, seed=seed)
    return wl.synthetic(n, prompt_len=wl.Uniform(8, 48), output_len=wl.Uniform(4, max(4, cap)),
                        arrival=arrival, seed=seed)


def play(engine, workload, *, record_to=None, on_trace=None, keep: int | None = None, **meta):
    """One run as the Lab runs it: a Trace recording ``engine`` (to the file ``record_to`` as
    it runs, keeping only its last ``keep`` steps in memory), ``on_trace(trace)`` (the Lab
    attaches its views there), then every request of ``workload`` at its arrival time
    (``run_workload``). Returns (the finished outputs, the trace); the caller stops the
    trace (``trace.stop()``), except when the run raises: then it is stopped here."""
    from inferlab.observe.trace import Trace
    from inferlab.sim.workloads import run_workload
    kw = {} if keep is None else {"keep": keep}
    trace = Trace.record(engine, path=record_to, workload=workload.description, **kw, **meta)
    try:
        if on_trace is not None:
            on_trace(trace)
        return run_workload(engine, workload, progress=False), trace
    except BaseException:
        trace.stop()
        raise


def summary(outputs, stats, knobs: dict, *, model: str, workload: str, clock: str) -> dict:
    """One run's row: its numbers (from the finished outputs and the engine's stats), the
    knobs it ran with, the model, the workload and the clock."""
    m = summarize(outputs, clock=clock)
    ms = lambda v: v * 1e3                                          # noqa: E731
    return {
        "model": model, "workload": workload, "clock": clock,
        **{k: knobs.get(k) for k in KNOBS},
        "output_tok_s": m.output_throughput,
        "ttft_p50_ms": ms(m.ttft.median), "ttft_p99_ms": ms(m.ttft.p99),
        "itl_p50_ms": ms(m.itl.median), "itl_p99_ms": ms(m.itl.p99),
        "peak_kv_blocks": stats.peak_kv_blocks_used,
        "peak_kv_use": stats.peak_kv_blocks_used / max(stats.kv_blocks_total, 1),
        "peak_kv_waste": stats.peak_kv_waste, "preemptions": stats.num_preemptions,
        "recomputed_tokens": stats.num_recomputed_tokens,
        "prefix_hit_tokens": stats.prefix_cache_hits, "steps": stats.num_steps,
        "requests": m.num_requests, "output_tokens": m.num_output_tokens,
    }


def _fmt(key: str, v) -> str:
    fmt = dict((k, f) for k, _, f in NUMBERS).get(key)
    if isinstance(v, float) and math.isnan(v):
        return "–"
    return fmt.format(v) if fmt and isinstance(v, (int, float)) else str(v)


@dataclass
class RunsTable:
    rows: list[dict] = field(default_factory=list)

    def add(self, row: dict) -> int:
        """Append a run's row; returns its number (1, 2, ...)."""
        self.rows.append({"run": len(self.rows) + 1, **row})
        return len(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def changed_knobs(self) -> list[str]:
        """The knobs that differ between runs (the table shows those, not all)."""
        return [k for k in ("model", "workload", *KNOBS)
                if len({str(r.get(k)) for r in self.rows}) > 1]

    def columns(self) -> list[str]:
        return ["run", *self.changed_knobs(), *(k for k, _, _ in NUMBERS)]

    def to_frame(self):
        """The runs as a pandas DataFrame (every knob and number, one row per run)."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("runs.to_frame() needs pandas (pip install pandas, or "
                              "'inferlab[lab]'); runs.to_csv() and runs.rows need nothing") from None
        return pd.DataFrame(self.rows).set_index("run") if self.rows else pd.DataFrame()

    def to_csv(self, path: str | None = None) -> str:
        keys = list(self.rows[0]) if self.rows else ["run"]
        buf = io.StringIO()
        w = csv.DictWriter(buf, keys, lineterminator="\n")
        w.writeheader()
        w.writerows(self.rows)
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(buf.getvalue())
        return buf.getvalue()

    def row(self, run: int) -> dict:
        for r in self.rows:
            if r["run"] == run:
                return r
        raise KeyError(f"no run {run}; runs: {[r['run'] for r in self.rows]}")

    def deltas(self, a: int, b: int) -> list[tuple[str, str, str, str]]:
        """(what, run a, run b, change) for every knob that differs and every number."""
        ra, rb = self.row(a), self.row(b)
        out = [(k, str(ra.get(k)), str(rb.get(k)), "changed")
               for k in ("model", "workload", *KNOBS) if str(ra.get(k)) != str(rb.get(k))]
        for k, title, _ in NUMBERS:
            x, y = ra.get(k), rb.get(k)
            if isinstance(x, (int, float)) and isinstance(y, (int, float)) and x and \
                    not math.isnan(x) and not math.isnan(y):
                change = f"{y / x:.2f}x"
            else:
                change = "–"
            out.append((title, _fmt(k, x), _fmt(k, y), change))
        return out

    def html(self) -> str:
        """The table as the Lab shows it (the knobs that differ, then the numbers)."""
        if not self.rows:
            return "<i>no runs yet: press Run; each run adds a row here</i>"
        titles = dict((k, t) for k, t, _ in NUMBERS)
        cols = self.columns()
        # a knob's name may break after its underscores (max_num_batched_tokens ran into the
        # next column's header)
        head = "".join("<th>" + html.escape(titles.get(c, c)).replace("_", "_<wbr>") + "</th>"
                       for c in cols)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(c, r.get(c)))}</td>"
                                        for c in cols) + "</tr>" for r in self.rows)
        return (f'{STYLE}<table class="il-runs"><thead><tr>{head}</tr></thead>'
                f"<tbody>{body}</tbody></table>")

    def deltas_html(self, a: int, b: int) -> str:
        rows = "".join(f"<tr><td>{html.escape(w)}</td><td>{html.escape(x)}</td>"
                       f"<td>{html.escape(y)}</td><td>{html.escape(c)}</td></tr>"
                       for w, x, y, c in self.deltas(a, b))
        return (f'{STYLE}<table class="il-runs-deltas"><thead><tr><th></th><th>run {a}</th>'
                f"<th>run {b}</th><th>run {b} / run {a}</th></tr></thead><tbody>{rows}"
                "</tbody></table>")
