"""The tour, recorded once and replayed where compute is slow (``replay``'s flag).

    eng, BatchingComparison, Lab = replay_tour.tour(num_blocks=128)

Live (the default) that is ``il.Engine(num_blocks=128)`` and the widgets' own classes. With
``INFERLAB_REPLAY=1`` (or ``replay=True``) it is a ``ReplayEngine`` and two classes of the same
name and use that play back the run ``inferlab record --id tour`` recorded
(``docs/results/chapters/tour.json.gz``): ``eng.generate`` publishes the recorded steps to
whatever subscribed (``TokenStream(eng)``, ``SchedulerTimeline(eng)``, ``KVBlockMap(eng)``
fill in as live, their scrubbers move through the run) and returns the recorded outputs;
``BatchingComparison.run`` shows the recorded sides; ``Lab.start`` adds the next recorded run
to the table (its views, Compare). No weights are loaded and no forward pass runs; only the
tokenizer is read (from the bundled GGUF) when a cell asks for ``eng.tokenizer``.

Recording is the tour itself: ``record()`` executes notebooks/00_tour.ipynb at full size with
``INFERLAB_REPLAY=record``, where ``tour`` hands out the live engine and views wrapped to keep
every call (its arguments, its trace, its outputs) in the record, with the command, CPU, flags,
date and load (``protocol.result_meta``). The tour and its record cannot drift apart: a call
that differs from the recorded one is said to differ.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import pathlib
import threading
import types

from inferlab.core.outputs import RequestMetrics, RequestOutput
from inferlab.observe.trace import Trace
from inferlab.widgets import BatchingComparison, Lab

from . import protocol, record_file, replay

NAME = "tour"
COMMAND = "inferlab record --id tour"
PATH = record_file.ROOT / f"{NAME}{record_file.SUFFIX}"
NOTEBOOK = pathlib.Path(__file__).resolve().parents[2] / "notebooks" / "00_tour.ipynb"
OUT_ENV = "INFERLAB_REPLAY_OUT"       # where the recording kernel writes (record() sets it)
KINDS = ("generate", "comparison", "lab")


def tour(replay_run: bool | None = None, **engine_kwargs):
    """(engine, BatchingComparison, Lab) for the tour: live, recording or replaying (see the
    module). ``replay_run``: True or False decides here; None leaves it to ``replay``'s flag."""
    from inferlab.engine import Engine
    mode = replay.mode() if replay_run is None else ("replay" if replay_run else None)
    if mode == "replay":
        rec = load()
        replay.tell_once(rec, "the tour's engine calls, comparison and Lab runs")
        return ReplayEngine(rec), ReplayComparison, ReplayLab
    if mode == "record":
        return RecordingEngine(Engine(**engine_kwargs)), RecordingComparison, RecordingLab
    return Engine(**engine_kwargs), BatchingComparison, Lab


def load(path=None) -> dict:
    return record_file.read(replay.record_path(NAME, pathlib.Path(path).parent if path else None))


# --- recording ---------------------------------------------------------------------------------
_calls: dict[str, list] = {k: [] for k in KINDS}
_meta: dict = {}


def _keep(kind: str, call: dict) -> None:
    """Add a call to the record and write it whole (each call: a failed tour leaves the calls
    before it, in a file ``record()`` does not commit)."""
    from .chapters import smoke
    if not _meta:                                  # the run's meta: when it began
        _meta.update(protocol.result_meta(COMMAND))
    _calls[kind].append(call)
    record_file.write(os.environ.get(OUT_ENV) or PATH,
                      {"record": 1, "chapter": NAME, "smoke": smoke(), **_meta, "data": _calls})


def call_key(*args, **kwargs) -> str:
    """A call's arguments as text: what a replayed call is checked against."""
    return repr((args, sorted(kwargs.items())))


class RecordingEngine:
    """The live engine; each ``generate`` is kept (its arguments, steps and outputs)."""

    def __init__(self, engine):
        self.engine = engine

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def __repr__(self):
        return repr(self.engine)

    def generate(self, prompts, params=None, use_tqdm: bool = True, **kw):
        with Trace.record(self.engine) as trace:
            outs = self.engine.generate(prompts, params, use_tqdm=use_tqdm, **kw)
        _keep("generate", {"key": call_key(prompts, params, **kw), "trace": trace,
                           "outputs": [dataclasses.asdict(o) for o in outs]})
        return outs


class RecordingComparison(BatchingComparison):
    @classmethod
    def run(cls, workload, *configs, model=None, background: bool = False, **common):
        view = super().run(workload, *configs, model=model, background=False, **common)
        _keep("comparison", {"key": call_key(workload.name, configs, model=model, **common),
                             "title": view.title, "labels": list(view.traces),
                             "traces": list(view.traces.values())})
        return view


class RecordingLab(Lab):
    def start(self):
        inner = super().start()
        if inner is None:
            return None

        def keep():
            inner.join()
            row = {k: v for k, v in self.runs.rows[-1].items() if k != "run"}
            _keep("lab", {"key": call_key(**_lab_knobs(self)), "row": row, "trace": self.trace,
                          "status": self.status.value})
        thread = threading.Thread(target=keep, daemon=True, name="inferlab-lab-record")
        thread.start()
        return thread


def _lab_knobs(lab) -> dict:
    return {**lab.config(), "workload": lab.workload_kind.value, "rate": lab.rate.value,
            "num_requests": lab.num_requests.value, "max_tokens": lab.max_tokens.value}


def record(notebook=None, out=None, timeout: int = 1800) -> pathlib.Path:
    """Execute the tour at full size in recording mode and write its record (``out``, by
    default docs/results/chapters/tour.json.gz) once every cell has run."""
    import nbclient
    import nbformat
    out = pathlib.Path(out or PATH)
    tmp = out.with_suffix(f".{os.getpid()}.recording")
    env = {replay.ENV: "record", OUT_ENV: os.fspath(tmp.resolve()), "INFERLAB_SMOKE": "0",
           "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)                       # the kernel inherits this environment
    nb_path = pathlib.Path(notebook or NOTEBOOK)
    try:
        nb = nbformat.read(nb_path, as_version=4)
        nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                resources={"metadata": {"path": os.fspath(nb_path.parent)}}
                                ).execute()
        os.replace(tmp, out)
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
        tmp.unlink(missing_ok=True)
    return out


# --- replaying ---------------------------------------------------------------------------------
_said: set[str] = set()


def _next(rec: dict, kind: str, done: int, key: str) -> dict:
    """The recorded call with these arguments (a cell run again replays its own call), else
    the ``done``-th of its kind: the tour at another size (smoke) than the recorded run."""
    from .chapters import smoke
    calls = rec["data"][kind]
    same = [c for c in calls if c["key"] == key]
    if same:
        return same[0]
    if done >= len(calls):
        raise LookupError(f"the recorded tour holds {len(calls)} {kind} call(s) and this is "
                          f"call {done + 1}: record the tour again (`{COMMAND}`) or run live")
    if rec["smoke"] == smoke():
        print(f"note: this {kind} call differs from the recorded one; replaying the recorded "
              f"call {done + 1} (record the tour again: `{COMMAND}`)", flush=True)
    elif "sizes" not in _said:                     # a smoke run's sizes differ by design
        _said.add("sizes")
        size = "smoke" if rec["smoke"] else "full"
        print(f"note: the recorded run is the tour at its {size} size; each call replays the "
              f"recorded call of that size", flush=True)
    return calls[done]


def _output(d: dict) -> RequestOutput:
    return RequestOutput(**{**d, "metrics": RequestMetrics(**d["metrics"])})


class ReplayEngine:
    """The recorded tour's engine: its steps to subscribers, its outputs; no model."""

    def __init__(self, rec: dict):
        self.record = rec
        meta = rec["data"]["generate"][0]["trace"].meta
        self.model_name, self.clock_name = meta["model"], meta["clock"]
        self.num_blocks = meta["num_blocks"]
        self.config = types.SimpleNamespace(**meta["config"])
        self.runner = types.SimpleNamespace(kv_bytes_per_token=meta.get("kv_bytes_per_token"))
        self._subscribers: list = []
        self._done = 0

    @functools.cached_property
    def tokenizer(self):
        """SmolLM2's tokenizer, read from the bundled GGUF (no weights)."""
        from inferlab.model.loader import default_tokenizer
        return default_tokenizer()

    def subscribe(self, callback):
        self._subscribers.append(callback)
        return lambda: callback in self._subscribers and self._subscribers.remove(callback)

    def generate(self, prompts, params=None, use_tqdm: bool = True, **kw):
        call = _next(self.record, "generate", self._done, call_key(prompts, params, **kw))
        self._done += 1
        for step in call["trace"].records:
            for hook in list(self._subscribers):
                try:
                    hook(step)
                except Exception as e:  # noqa: BLE001 - a hook never stops the run
                    print(f"a view failed on a replayed step: {type(e).__name__}: {e}")
        return [_output(d) for d in call["outputs"]]

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        raise AttributeError(f"a replayed engine runs nothing: only the tour's recorded calls "
                             f"(generate) replay, not eng.{name}; unset {replay.ENV} (or "
                             f"REPLAY = False) to run the model live")

    def __repr__(self):
        return (f"ReplayEngine({self.model_name!r}, {len(self.record['data']['generate'])} "
                f"recorded generate calls, recorded on {replay.where(self.record)})")


class ReplayComparison(BatchingComparison):
    replayed = 0

    @classmethod
    def run(cls, workload, *configs, model=None, background: bool = False, **common):
        rec = load()
        call = _next(rec, "comparison", ReplayComparison.replayed,
                     call_key(workload.name, configs, model=model, **common))
        ReplayComparison.replayed += 1
        return cls(*call["traces"], labels=call["labels"], title=call["title"])


class ReplayLab(Lab):
    """The Lab whose Run adds the next recorded run (knobs, numbers, trace) to its table."""

    def start(self):
        if self.running:
            return None
        self.thread = threading.Thread(target=self._replay_next, daemon=True,
                                       name="inferlab-lab-replay")
        self.thread.start()
        return self.thread

    def _replay_next(self) -> None:
        rec = load()
        try:
            call = _next(rec, "lab", len(self.runs), call_key(**_lab_knobs(self)))
        except LookupError as e:
            self.status.value = f"replay: {e}"
            return
        self.trace = call["trace"]
        for v in self.views:
            v.load_trace(self.trace)
        run = self._add_row(call["row"], self.trace)    # its trace: what Compare replays
        self.status.value = (f"replayed run {run}, recorded on {replay.where(rec)}: "
                             + call["status"])
