"""Lab: engine settings and a workload as controls, a run button, and the live views.

SmolLM2-135M-Instruct (real weights) by default, answering real chat requests (bundled with
the lab, sim/chat_requests.py) until it stops on its own. Every run ends with a summary row in
the runs table under the controls (``lab.runs``: ``to_frame()``, ``to_csv()``); pick two runs
and Compare shows their timelines and KV maps side by side with the change in every number.

A run goes in a background thread (the notebook stays responsive) and can be stopped: the
stop button makes the run loop abort every request at the next step boundary. So does
Kernel -> Interrupt while a run goes on (see ``_stop_on_kernel_interrupt``); the views keep
the run's last step, with the aborted requests marked. ``record_to="run.trace.jsonl"``
writes each run's trace to that file as it runs (see ``Trace.record``). ``lab.sweep(grid)``
runs every combination of a few knobs the same way (``inferlab.lab.sweep``), a row per point;
``lab.last_sweep`` is its SweepResult (``widgets.SweepView`` draws its frontier).
"""
from __future__ import annotations

import base64
import threading
import time
import weakref

import ipywidgets as w

from inferlab.lab.runs import WORKLOADS, RunsTable, lab_workload, play, summary
from inferlab.observe.trace import Trace

from inferlab.widgets._base import STATIC_IMAGES, SavedDisplay, png_of
from inferlab.widgets.kv_map import KVBlockMap
from inferlab.widgets.timeline import SchedulerTimeline
from inferlab.widgets.token_stream import TokenStream


_RUNNING: "weakref.WeakSet[Lab]" = weakref.WeakSet()
# one model load at a time: transformers' lazy imports are not thread-safe on first use (two
# Labs started together in a fresh kernel got "cannot import name 'LlamaConfig'")
_LOADING = threading.Lock()


def _interrupt_handler(prev):
    def on_sigint(signum, frame):
        """Only sets flags (a signal handler must not send widget messages)."""
        labs = [lab for lab in list(_RUNNING) if lab.running]
        for lab in labs:
            lab._interrupted = True
            lab._stop.set()
            if lab.engine is not None:
                lab.engine.request_stop()
        if not labs and callable(prev):
            prev(signum, frame)
    on_sigint.inferlab_lab = True
    return on_sigint


def _stop_on_kernel_interrupt() -> None:
    """Make Kernel -> Interrupt stop background Lab runs. An idle ipykernel ignores SIGINT:
    before each message it saves the handler in place and installs Python's (so a running cell
    gets KeyboardInterrupt), and puts the saved one back after. Called while a message is
    handled (a cell, a button click), this replaces the saved one, so that while the kernel is
    idle a SIGINT stops the running Labs (and otherwise does what it did before)."""
    try:
        from IPython import get_ipython
        kernel = getattr(get_ipython(), "kernel", None)
    except ImportError:
        return
    saved = getattr(kernel, "saved_sigint_handler", None)
    if saved is not None and not getattr(saved, "inferlab_lab", False):
        kernel.saved_sigint_handler = _interrupt_handler(saved)


class Lab(SavedDisplay, w.VBox):
    def __init__(self, model: str | None = None, *, record_to=None, **defaults):
        self.model = model
        self.record_to = record_to
        s = w.Layout(width="240px")
        st = {"description_width": "110px"}
        self.controls = {
            "scheduler": w.Dropdown(options=["continuous", "static"], description="scheduler", layout=s, style=st),
            "kv_layout": w.Dropdown(options=["paged", "contiguous"], description="KV layout", layout=s, style=st),
            "block_size": w.Dropdown(options=[4, 8, 16, 32, 64], value=16, description="block size", layout=s, style=st),
            "num_blocks": w.IntSlider(value=128, min=16, max=1024, step=16, description="KV blocks", layout=s, style=st),
            "max_num_seqs": w.IntSlider(value=8, min=1, max=64, description="max seqs", layout=s, style=st),
            "max_num_batched_tokens": w.IntSlider(value=256, min=32, max=4096, step=32, description="token budget", layout=s, style=st),
            "enable_chunked_prefill": w.Checkbox(value=True, description="chunked prefill", layout=s, style=st),
            "enable_prefix_caching": w.Checkbox(value=True, description="prefix caching", layout=s, style=st),
            "clock": w.Dropdown(options=["wall", "H100", "A100", "L4"], description="clock", layout=s, style=st),
        }
        self.workload_kind = w.Dropdown(options=WORKLOADS, description="workload", layout=s, style=st)
        self.num_requests = w.IntSlider(value=12, min=1, max=200, description="requests", layout=s, style=st)
        self.max_tokens = w.IntSlider(value=64, min=4, max=512, step=4, description="max tokens", layout=s, style=st)
        self.rate = w.FloatSlider(value=0.0, min=0.0, max=200.0, step=1.0, description="arrivals/s (0=all)", layout=s, style=st)
        for k, c in self.controls.items():
            c.add_class(f"il-lab-{k.replace('_', '-')}")
        for k, v in defaults.items():
            (self.controls.get(k) or getattr(self, k)).value = v
        self.run_button = w.Button(description="Run", button_style="primary", icon="play")
        self.stop_button = w.Button(description="Stop", button_style="warning", icon="stop", disabled=True)
        self.status = w.HTML("ready")
        self.run_button.add_class("il-lab-run")
        self.stop_button.add_class("il-lab-stop")
        self.status.add_class("il-lab-status")
        self.run_button.on_click(lambda _: self.start())
        self.stop_button.on_click(lambda _: self.stop())
        self.timeline, self.kv_map, self.tokens = SchedulerTimeline(), KVBlockMap(), TokenStream()
        self.views = [self.timeline, self.kv_map, self.tokens]
        self.trace: Trace | None = None
        self.last_sweep = None                    # the last sweep's SweepResult (lab.sweep)
        self.engine = None
        self.thread: threading.Thread | None = None
        self.timing: dict[str, float] = {}
        self._stop = threading.Event()
        self._interrupted = False
        ctl = list(self.controls.values()) + [self.workload_kind, self.num_requests, self.rate,
                                              self.max_tokens]
        grid = w.GridBox(ctl, layout=w.Layout(grid_template_columns="repeat(3, 250px)"))
        tabs = w.Tab([self.timeline, self.kv_map, self.tokens])
        for i, name in enumerate(["Scheduler timeline", "KV blocks", "Token stream"]):
            tabs.set_title(i, name)
        self.runs = RunsTable()
        self._traces: dict[int, Trace] = {}
        self.runs_view = w.HTML(self.runs.html())
        self.runs_view.add_class("il-lab-runs")
        cmp_style = {"description_width": "95px"}     # "compare run" in full, not cut
        self.compare_a = w.Dropdown(options=[], description="compare run", layout=w.Layout(width="185px"), style=cmp_style)
        self.compare_b = w.Dropdown(options=[], description="with run", layout=w.Layout(width="185px"), style=cmp_style)
        self.compare_button = w.Button(description="Compare", icon="columns", disabled=True)
        self.compare_button.add_class("il-lab-compare")
        self.compare_button.on_click(lambda _: self.compare(self.compare_a.value, self.compare_b.value))
        self.comparison = w.VBox([])
        # the sweep: a grid of knobs as JSON, a progress bar, then the frontier (SweepView)
        self.sweep_grid = w.Text(value='{"max_num_seqs": [2, 4, 8]}', description="sweep grid",
                                 layout=w.Layout(width="420px"), style=cmp_style)
        self.sweep_button = w.Button(description="Sweep", icon="th")
        self.sweep_button.add_class("il-lab-sweep")
        self.sweep_button.on_click(lambda _: self._sweep_clicked())
        self.progress = w.IntProgress(min=0, max=1, layout=w.Layout(width="200px",
                                                                    visibility="hidden"))
        self.frontier = w.VBox([])
        super().__init__([grid, w.HBox([self.run_button, self.stop_button, self.status]),
                          w.HBox([self.sweep_grid, self.sweep_button, self.progress]),
                          self.runs_view, w.HBox([self.compare_a, self.compare_b, self.compare_button]),
                          self.comparison, self.frontier, tabs])
        self.add_class("il-lab")

    def config(self) -> dict:
        return {k: c.value for k, c in self.controls.items()}

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def start(self) -> threading.Thread | None:
        if self.running:
            return None
        return self._begin(self._run, (), "inferlab-lab-run")

    def _begin(self, target, args, name: str) -> threading.Thread:
        """Start a run or a sweep in the background: a fresh stop flag, Run off, Stop on."""
        self._stop.clear()
        self._interrupted = False
        self.engine = self.trace = None
        _RUNNING.add(self)
        _stop_on_kernel_interrupt()
        self.run_button.disabled, self.stop_button.disabled = True, False
        self.thread = threading.Thread(target=target, args=args, daemon=True, name=name)
        self.thread.start()
        return self.thread

    def stop(self) -> None:
        self._stop.set()
        if self.engine is not None:
            self.engine.request_stop()     # honoured between steps, in the run's thread
        if self.thread is not None and self.thread.is_alive():
            self.status.value = "stopping…"

    def _run(self) -> None:
        from inferlab.engine import Engine
        # perf_counter seconds: the run's start, the engine's last step, "done" (Run -> done)
        self.timing = {"start": time.perf_counter()}
        try:
            self.status.value = "loading model…"
            # the last run's engine goes first: two KV caches at once would not fit Binder
            self.engine = None
            with _LOADING:
                eng = self.engine = Engine(self.model, **self.config())
            if self._stop.is_set():        # Stop pressed while the model was loading
                eng.request_stop()
            wl = lab_workload(self.workload_kind.value, self.num_requests.value,
                              self.rate.value, self.max_tokens.value, eng.tokenizer)

            def attach(trace):
                self.trace = trace
                for v in self.views:
                    v.attach(eng, trace=trace)
                self.status.value = f"running {wl.description} on {eng.model_name}…"
            outs, _ = play(eng, wl, record_to=self.record_to, on_trace=attach)
            self.timing["engine_done"] = time.perf_counter()
            self._end_run()
            word = ("interrupted (Kernel → Interrupt)" if self._interrupted else
                    "stopped" if self._stop.is_set() else "done")
            run = self._add_run(eng, wl, outs)
            self.timing["done"] = time.perf_counter()
            self.status.value = (f"{word}: run {run}, {len(outs)}/{len(wl)} requests finished in "
                                 f"{len(self.trace)} steps on {eng.model_name} "
                                 f"({eng.clock_name} clock); its summary is row {run} below")
        except Exception as e:  # noqa: BLE001 - show it, keep the lab usable
            self.status.value = f"error: {type(e).__name__}: {e}"
        finally:
            self._end_run()
            self.run_button.disabled, self.stop_button.disabled = False, True

    def _add_run(self, eng, wl, outs) -> int:
        """The run's summary row in the runs table; its trace kept for Compare."""
        row = summary([o for o in outs if o.finished], eng.stats(), self.config(),
                      model=eng.model_name, workload=wl.description, clock=eng.clock_name)
        return self._add_row(row, self.trace)

    def _add_row(self, row: dict, trace) -> int:
        """A row in the runs table; its trace (or its file's path) kept for Compare."""
        run = self.runs.add(row)
        self._traces[run] = trace
        self.runs_view.value = self.runs.html()
        runs = [r["run"] for r in self.runs.rows]
        self.compare_a.options, self.compare_b.options = runs, runs
        if len(runs) >= 2:
            self.compare_a.value, self.compare_b.value = runs[-2], runs[-1]
        self.compare_button.disabled = len(runs) < 2
        return run

    def compare(self, a: int, b: int) -> None:
        """Runs ``a`` and ``b`` side by side: the change in every number, their timelines and
        KV maps (replayed from their traces)."""
        deltas = w.HTML(self.runs.deltas_html(a, b))
        deltas.add_class("il-lab-deltas")
        sides = []
        for run in (a, b):
            trace = self._traces[run]
            if isinstance(trace, str):                # a sweep point's file
                trace = Trace.load(trace)
            sides.append(w.VBox([w.HTML(f"<b>run {run}</b>"), SchedulerTimeline(trace),
                                 KVBlockMap(trace)], layout=w.Layout(width="50%")))
        self.comparison.children = [deltas, w.HBox(sides)]

    def sweep(self, grid, workload=None, *, repeats: int = 1, out_dir=None, **kw):
        """Run every combination of ``grid``'s knobs (``inferlab.lab.sweep.Sweep``) in the
        background on this Lab's model: the controls' knobs and clock as the base, its
        workload controls unless ``workload`` is given. Status shows the point and the time
        left; Stop ends it (the finished points stay). Each point adds its row to the runs
        table (Compare replays its trace file); ``lab.last_sweep`` is the SweepResult."""
        if self.running:
            return None
        from inferlab.lab.sweep import Sweep
        if workload is None:
            spec = (self.workload_kind.value, self.num_requests.value, self.rate.value,
                    self.max_tokens.value)
            workload = lambda tok: lab_workload(*spec, tok)           # noqa: E731
        cfg = self.config()
        sw = Sweep(grid, workload=workload, model=self.model, repeats=repeats,
                   clock=cfg.pop("clock"), out_dir=out_dir, base=cfg, load_lock=_LOADING, **kw)
        return self._begin(self._sweep, (sw,), "inferlab-lab-sweep")

    def _sweep_clicked(self) -> None:
        """The Sweep button: the grid box's JSON (knob -> list of values), or its error."""
        import json
        try:
            grid = json.loads(self.sweep_grid.value)
            if not isinstance(grid, (dict, list)) or not grid:
                raise ValueError("give a JSON object of knob -> list of values")
            self.sweep(grid)
        except Exception as e:  # noqa: BLE001 - a bad grid is said, the Lab stays usable
            self.status.value = f"sweep grid: {type(e).__name__}: {e}"

    def _sweep(self, sw) -> None:
        self.progress.layout.visibility = "visible"
        self.progress.value, self.progress.max = 0, max(len(sw), 1)

        def tell(p):
            self.progress.max, self.progress.value = p["total"], p["done"]
            if p["point"] is not None:
                left = "" if p["eta_s"] is None else f", about {p['eta_s']:.0f} s left"
                knobs = ", ".join(f"{k}={v}" for k, v in p["knobs"].items())
                self.status.value = (f"sweep: point {p['point'] + 1} of {len(sw)} ({knobs}), "
                                     f"run {p['done'] + 1} of {p['total']}{left}")
        try:
            res = self.last_sweep = sw.run(
                progress=tell, stop=self._stop,
                on_point=lambda row, run_row: run_row and self._add_row(run_row,
                                                                         row["trace_path"]))
            bad = [r for r in res.rows if r["error"]]
            self.status.value = (f"{'stopped' if res.meta['stopped'] else 'done'}: sweep of "
                                 f"{len(res)} points, {len(bad)} failed"
                                 + (f" (point {bad[0]['point']}: {bad[0]['error']})" if bad
                                    else "") + f"; frontier: points {res.frontier()}")
            if any(not r["error"] for r in res.rows):   # click a point: its views beside it
                from inferlab.widgets.sweep_view import SweepView
                self.frontier.children = [SweepView.from_result(res)]
        except Exception as e:  # noqa: BLE001 - show it, keep the lab usable
            self.status.value = f"error: {type(e).__name__}: {e}"
        finally:
            self.progress.value = self.progress.max
            self.run_button.disabled, self.stop_button.disabled = False, True

    def _end_run(self) -> None:
        """Views show the last step; the trace stops recording (its file gets its end)."""
        for v in self.views:
            v.detach()
        if self.trace is not None:
            self.trace.stop()

    def _repr_mimebundle_(self, **kwargs):
        data = super()._repr_mimebundle_(**kwargs)
        data, meta = data if isinstance(data, tuple) else (data, {})
        data = dict(data)
        data["text/plain"] = f"Lab(model={self.model!r}, {len(self.runs)} runs)"
        if STATIC_IMAGES and self.timeline.num_steps:
            try:
                png = png_of(self.timeline.figure())
                data["image/png"] = base64.b64encode(png).decode("ascii")
            except Exception:  # noqa: BLE001
                pass
        return (data, meta) if meta else data
