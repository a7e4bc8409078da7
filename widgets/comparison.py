"""BatchingComparison: the same workload under two engine configs, side by side: the seats
of the batch over time per config on one time axis, the latency distributions and the
throughput ratio, as one drawing (inferlab.lab.drawings.comparison), live as the configs run
and cut at the scrubber's time; a table of the headline numbers under it.

    cmp = BatchingComparison.run(workload, ("static", dict(scheduler="static")),
                                 ("continuous", dict(scheduler="continuous")))   # SmolLM2
    cmp = BatchingComparison(trace_a, trace_b, labels=["static", "continuous"])
"""
from __future__ import annotations

import threading

import numpy as np
import traitlets as t

from inferlab.observe.metrics import request_metrics
from inferlab.observe.trace import Trace

from inferlab.widgets._base import asset, pack
from inferlab.widgets._plot import PlotView

SCRUB_POINTS = 200


def side_summary(trace: Trace) -> dict:
    """The headline numbers of one run (the table under the figure): duration, output
    tokens, finished requests, throughput, mean TTFT and p90 end-to-end latency (seconds)."""
    lb = trace.lanes()
    per = request_metrics(trace.records, trace.requests)
    tokens = sum(m.num_output_tokens for m in per.values())
    ttft = [per[r].ttft for r in lb.order if per[r].ttft is not None]
    e2e = sorted(per[r].e2e for r in lb.order if r in lb.finish and per[r].e2e is not None)
    dur = trace.records[-1].t_end - trace.t0 if trace.records else 0.0
    return {"duration": dur, "output_tokens": tokens, "finished": len(e2e),
            "throughput": tokens / dur if dur > 0 else 0.0,
            "ttft_mean": float(np.mean(ttft)) if ttft else None,
            "e2e_p90": e2e[min(len(e2e) - 1, int(0.9 * len(e2e)))] if e2e else None,
            "clock": trace.meta.get("clock", "")}


class BatchingComparison(PlotView):
    _esm = asset("common.js", "comparison.js")
    _css = asset("common.css", "comparison.css")
    kind = "Batching comparison"
    sides = t.List(t.Dict()).tag(sync=True)      # label + side_summary() per config (table)

    def __init__(self, *traces: Trace, labels=None, title: str | None = None, **kwargs):
        self._sides: list[list] = []             # [label, Trace]
        super().__init__(title=title, **kwargs)
        labels = list(labels or [])
        for i, tr in enumerate(traces):
            self.add(tr, labels[i] if i < len(labels) else f"config {i + 1}")
        self._flush()

    def add(self, trace: Trace, label: str) -> Trace:
        with self._lock:
            self._sides.append([label, trace])
            self.clock = str(trace.meta.get("clock", "wall"))
        return trace

    @property
    def traces(self) -> dict[str, Trace]:
        """Each side's trace by its label (what a record keeps to draw this view again)."""
        return {label: trace for label, trace in self._sides}

    def follow(self, engine, label: str) -> Trace:
        """Add a side recorded live from ``engine``."""
        trace = self.add(Trace.record(engine), label)
        engine.subscribe(self._poke)
        self.live = True
        return trace

    def _flush(self) -> int:
        n = sum(len(tr.records) for _, tr in self._sides)
        if n == self._done and self.num_pushes:
            return 0
        try:
            sides = [{"label": lab, **side_summary(tr)} for lab, tr in self._sides]
            tmax = max([s["duration"] for s in sides] + [0.0])
            self._step_t = list(np.linspace(0, tmax, SCRUB_POINTS)) if tmax > 0 else []
            with self.hold_sync():
                self.sides = sides
                self.num_steps = len(self._step_t)
                self.step_times = pack(self._step_t, "<f8")
            self._changed()
        except Exception as e:  # noqa: BLE001
            self.errors.append(f"{type(e).__name__}: {e}")
        delta, self._done = n - self._done, n
        self.num_pushes += 1
        return max(delta, 1)

    def _on_cursor(self, change) -> None:
        self._changed()          # its sides, not one trace: the drawing cuts at the time

    @classmethod
    def run(cls, workload, *configs, model=None, background: bool = False, **common):
        """Run ``workload`` once per (label, engine kwargs) config, live into a new view."""
        from inferlab.engine import Engine
        from inferlab.sim.workloads import run_workload
        view = cls(title=f"{cls.kind}: {workload.name}")

        def go():
            for label, kw in configs:
                eng = Engine(model, **{**common, **kw})
                trace = view.follow(eng, label)
                run_workload(eng, workload, progress=False)
                trace.stop()
                view.flush()
                del eng     # its KV cache goes before the next engine takes one (2 GB Binder)
            view.live = False
        if background:
            view.thread = threading.Thread(target=go, daemon=True, name="inferlab-compare")
            view.thread.start()
        else:
            go()
        return view

    def _spec(self, dark: bool | None = None) -> dict:
        """Seats x time per config and the latency distributions
        (inferlab.lab.drawings.comparison), cut at the scrubber's time, in the page's theme
        unless ``dark`` says."""
        from inferlab.lab.drawings.comparison import spec
        with self._lock:
            sides = [(label, tr) for label, tr in self._sides]
            upto = self._step_t[self.shown_step()] if self.cursor >= 0 and self._step_t else None
            return spec(sides, title=self.title, clock=self.clock, dark=self._is_dark(dark),
                        upto=upto)

    def __repr__(self):
        return f"BatchingComparison({[lab for lab, _ in self._sides]}, clock={self.clock!r})"
