"""Sweep: every combination of a few engine knobs, each run on the real model, one row each.

    from inferlab.lab.sweep import Sweep
    sw = Sweep({"max_num_seqs": [2, 8], "enable_chunked_prefill": [True, False]},
               workload="chat", num_requests=12, rate=4.0, repeats=3, out_dir="sweep")
    res = sw.run()                  # a progress bar with ETA; run(stop=event) stops early
    res.rows[0]                     # {"point", "knobs", "metrics", "trace_path", "error", ...}
    res.frontier()                  # the Pareto-optimal points: tok/s per user vs tok/s
    res.to_json("sweep.json")       # with the command, CPU, flags, date and load

``grid``: a dict of lists (every combination, in order) or a list of dicts (those points,
the shape of vLLM's ``--serve-params``). Knob names are the engine's keywords (``KNOBS``;
``chunked_prefill``, ``prefix_caching`` and ``kv_blocks`` are accepted for short); the KV
budget is ``kv_cache_memory`` (bytes) or ``num_blocks``, one replacing the other.

Each point builds its own engine (the weights are shared: ``load_model`` caches them) and
plays the workload as the Lab's Run does (``runs.play``), its trace written to
``out_dir/point-NN.trace.jsonl`` (default: a new temporary directory) as it runs (only a
few steps stay in memory; the engine is dropped before the next point: a Binder pod has
2 GB). A point that fails (a KV budget too
small for a prompt: the engine says so) becomes a row with ``error`` set; the sweep goes on.

On the wall clock the points follow the lab's protocol (``lab/protocol.py``): repeats
interleaved across points (A B C A B C), each number the median with its range, the whole
sweep inside a busy check whose warning (and that of repeats that disagree) lands in
``meta["warning"]``; each trace file holds the point's last whole repeat (a run that Stop
cut short leaves no file). On a simulated clock
(``clock="H100"``, pricing ``sim_model``, default ``llama-3-8b`` as the tour does) the
numbers are deterministic, so each point runs once, and every row is a projection labelled
with the cost model's published error (``sim/published.py``).
"""
from __future__ import annotations

import contextlib
import gc
import os
import tempfile
import threading
import time
from dataclasses import dataclass

from inferlab.errors import InvalidInputError
from inferlab.lab import protocol
from inferlab.lab.runs import play, summary
from inferlab.lab.sweep_grid import (ALIASES, KNOBS, KV_BUDGET, SIM_MODEL,  # noqa: F401 (API)
                                     WORKLOAD_NAMES, grid_points, knob_name, resolve_workload)
from inferlab.lab.sweep_result import SweepResult, point_metrics, row, run_numbers

TRACE_KEEP = 8               # steps a point's file-backed trace keeps in memory


@dataclass
class _Run:
    """One run of one point: its numbers, wall seconds, the runs-table row; or why not."""
    numbers: dict | None = None
    seconds: float = 0.0
    summary: dict | None = None
    clock: str = ""
    error: str | None = None
    stopped: bool = False
    steps: int = 0


class Sweep:
    def __init__(self, grid, workload="chat", model: str | None = None, repeats: int = 1,
                 clock: str = "wall", out_dir=None, *, sim_model: str | None = None,
                 num_requests: int = 12, max_tokens: int | None = None, rate: float = 0.0,
                 seed: int = 0, base: dict | None = None, load_lock=None,
                 command: str | None = None):
        """``base``: engine knobs held fixed at every point (a point's own replace them);
        ``num_requests``, ``max_tokens``, ``rate`` (Poisson arrivals per second, 0 = all at
        once), ``seed``: for the Lab's workloads; ``load_lock``: held while an engine loads
        (the Lab's, one model load at a time)."""
        self.points = grid_points(grid)
        if not isinstance(repeats, int) or repeats < 1:
            raise InvalidInputError(f"repeats must be an int >= 1, got {repeats!r}")
        self.base = {knob_name(k): v for k, v in (base or {}).items()}
        self.grid, self.workload, self.model, self.repeats = grid, workload, model, repeats
        self.clock = clock
        from inferlab.sim.clock import check_clock, is_this_cpu
        check_clock(clock)                   # a clock no profile knows: said now
        # a GPU prices sim_model (default: the chapters' llama-3-8b); this CPU, the real model
        self.sim_model = None if clock == "wall" else (
            sim_model or (None if is_this_cpu(clock) else SIM_MODEL))
        self.out_dir = os.fspath(out_dir) if out_dir is not None else None   # None: a temp dir
        self.num_requests, self.max_tokens, self.rate, self.seed = \
            num_requests, max_tokens, rate, seed
        self.load_lock = load_lock if load_lock is not None else contextlib.nullcontext()
        self.command = command or (f"inferlab.lab.sweep.Sweep({grid!r}, workload={workload!r}, "
                                   f"model={model!r}, repeats={repeats}, clock={clock!r})")
        self._wl = None

    def __len__(self) -> int:
        return len(self.points)

    def engine_kwargs(self, point: int) -> dict:
        """The engine's keywords at ``point``: the base, then the point's knobs (a KV budget
        given one way replaces the base's given the other way), then the clock."""
        knobs = self.points[point]
        kw = {k: v for k, v in self.base.items()
              if not (k in KV_BUDGET and any(b in knobs for b in KV_BUDGET))}
        kw.update(knobs, clock=self.clock)
        if self.sim_model is not None:
            kw["sim_model"] = self.sim_model
        return kw

    def trace_path(self, point: int) -> str:
        return os.path.join(self.out_dir, f"point-{point:02d}.trace.jsonl")

    def clock_label(self, engine_clock: str | None = None) -> str:
        """'wall', or the simulated clock's name with the cost model's published error."""
        if self.clock == "wall":
            return "wall"
        from inferlab.sim.published import label_note
        name = engine_clock or f"{self.clock} (simulated, {self.sim_model or 'own'} shape)"
        try:
            note = label_note(self.clock)
        except InvalidInputError:            # "this-cpu": no published measurement
            note = f"no published measurement checks the cost model of {self.clock}"
        return f"{name}; a projection: {note}"

    # --- one run -------------------------------------------------------------------------
    def _run_point(self, point: int, stop: threading.Event) -> _Run:
        from inferlab.engine import Engine
        kw = self.engine_kwargs(point)
        path = self.trace_path(point)
        part = path + ".part"                # renamed to ``path`` once the run is whole
        out, eng, steps = _Run(), None, [0]

        def hook(rec):                       # Stop: abort at the next step boundary
            steps[0] += 1
            if stop.is_set():
                eng.request_stop()
        try:
            with self.load_lock:
                eng = Engine(self.model, **kw)
            out.clock = eng.clock_name
            if self._wl is None:
                self._wl = resolve_workload(self.workload, eng.tokenizer,
                                            num_requests=self.num_requests,
                                            max_tokens=self.max_tokens, rate=self.rate,
                                            seed=self.seed)
            eng.subscribe(hook)
            if stop.is_set():
                out.stopped = True
                return out
            t0 = time.perf_counter()
            outs, trace = play(eng, self._wl, record_to=part, keep=TRACE_KEEP,
                               sweep_point=point)
            out.seconds = time.perf_counter() - t0
            trace.stop()
            out.stopped = stop.is_set()
            if not out.stopped:
                os.replace(part, path)
                out.numbers = run_numbers(outs, eng.clock_name)
                out.summary = summary(outs, eng.stats(), kw, model=eng.model_name,
                                      workload=self._wl.description, clock=eng.clock_name)
        except Exception as e:  # noqa: BLE001 - a point that fails is a row, not a crash
            out.error = f"{type(e).__name__}: {e}"
        finally:
            out.steps = steps[0]
            if os.path.exists(part):         # stopped: dropped; failed: kept if it ran a step
                if out.error is not None and out.steps:
                    os.replace(part, path)
                else:
                    os.remove(part)
            eng = None
            gc.collect()                     # the engine's KV cache goes before the next one
        return out

    # --- the sweep -----------------------------------------------------------------------
    def run(self, progress=None, stop: threading.Event | None = None,
            on_point=None) -> SweepResult:
        """Run every point (``repeats`` times on the wall clock, interleaved). ``progress``:
        None for a progress bar with ETA (tqdm), False for none, or a callable given a dict
        (done, total, point, knobs, repeat, elapsed_s, eta_s) before each run and once at
        the end. ``stop``: a threading.Event; once set, the running point is aborted and
        the result holds the points finished so far. ``on_point(row, runs_row)``: called as
        each point's row is final (``runs_row``: its last run as a runs-table row, or None)."""
        stop = stop if stop is not None else threading.Event()
        wall = self.clock == "wall"
        reps = self.repeats if wall else 1
        n = len(self.points)
        done_runs: dict[int, list[_Run]] = {i: [] for i in range(n)}
        errors: dict[int, _Run] = {}
        emitted: set[int] = set()
        total, done, t_start = n * reps, 0, time.perf_counter()
        stopped_at = None                    # the run Stop cut short: point, repeat, steps
        bar = None
        if progress is None:
            from tqdm.auto import tqdm
            bar = tqdm(total=total, desc="sweep", unit="run")

        def tell(point, repeat):
            if callable(progress):
                el = time.perf_counter() - t_start
                progress({"done": done, "total": total, "point": point, "repeat": repeat,
                          "knobs": None if point is None else self.points[point],
                          "elapsed_s": el,
                          "eta_s": el / done * (total - done) if done else None})

        def final_row(i):
            rs = done_runs[i]
            if i in errors:
                e = errors[i]
                return row(i, self.points[i], metrics=None, error=e.error,
                           trace_path=self.trace_path(i) if e.steps else None,
                           clock=self.clock_label(e.clock or None), projection=not wall)
            return row(i, self.points[i], metrics=point_metrics([r.numbers for r in rs]),
                       trace_path=self.trace_path(i), error=None,
                       clock=self.clock_label(rs[-1].clock), projection=not wall)

        def emit(i):
            if i not in emitted and on_point is not None:
                last = done_runs[i][-1].summary if done_runs[i] else None
                on_point(final_row(i), last)
            emitted.add(i)

        if self.out_dir is None:
            self.out_dir = tempfile.mkdtemp(prefix="inferlab-sweep-")
        os.makedirs(self.out_dir, exist_ok=True)
        check = protocol.BusyCheck() if wall else contextlib.nullcontext()
        try:
            with check:
                for rep, i in ((r, i) for r in range(reps) for i in range(n)):
                    if stop.is_set():
                        break
                    if i in errors:
                        continue
                    tell(i, rep)
                    r = self._run_point(i, stop)
                    if r.stopped:
                        stopped_at = {"point": i, "repeat": rep, "steps": r.steps}
                        break
                    if r.error is not None:
                        errors[i] = r
                        total -= reps - 1 - rep          # its later repeats are not run
                        if bar is not None:
                            bar.total = total
                    else:
                        done_runs[i].append(r)
                    done += 1
                    if bar is not None:
                        bar.update(1)
                    if r.error is not None or rep == reps - 1:
                        emit(i)
        finally:
            if bar is not None:
                bar.close()
        finished = [i for i in range(n) if done_runs[i] or i in errors]
        for i in finished:
            emit(i)
        tell(None, None)
        return SweepResult([final_row(i) for i in finished],
                           self._meta(check, done_runs, errors, stopped_at, reps,
                                      stop.is_set()))

    def _meta(self, check, done_runs, errors, stopped_at, reps, stopped) -> dict:
        times = {f"point {i}": [r.seconds for r in rs] for i, rs in done_runs.items() if rs}
        wall = self.clock == "wall"
        warning = None
        if wall:
            warning = protocol.warning_from([
                w and w.removeprefix(protocol.BUSY)
                for w in (getattr(check, "warning", None), protocol.repeat_warning(times))])
        meta = {**protocol.result_meta(self.command), "clock": self.clock_label(),
                "projection": not wall, "sim_model": self.sim_model,
                "label": (f"wall clock, this machine: median and range of {reps} repeats "
                          "interleaved across the points (A B C A B C ...)") if wall else
                protocol.label(self.clock_label()),
                "repeats": reps, "warning": warning,
                "readings": {**getattr(check, "readings", {}), "run_seconds": times},
                "model": self.model, "workload": getattr(self._wl, "description", None),
                "base": self.base, "out_dir": os.path.abspath(self.out_dir),
                "stopped": stopped, "stopped_at": stopped_at,
                "points": [{"point": i, "runs": len(rs),
                            "users": [r.numbers["users"] for r in rs],
                            "requests": [r.numbers["requests"] for r in rs]}
                           for i, rs in done_runs.items() if rs]}
        if not wall:
            from inferlab.sim.published import error_summary
            try:
                meta["projection_error"] = error_summary(self.clock)
            except InvalidInputError:        # "this-cpu": no published measurement
                meta["projection_error"] = {"median": None, "worst": None, "n": 0}
        return meta
