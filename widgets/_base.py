"""What every view shares: live attach with coalesced updates, trace replay, the scrubber,
binary arrays, and a static image beside the widget for GitHub and nbviewer.

Live: the engine's hook only appends the StepRecord to a Trace (and wakes a flusher thread
if it sleeps); the flusher folds new records into the view at most ``max_rate`` times a
second. The engine never waits on a widget, and a closed front end just stops receiving.
All state the browser draws from is in traits (no custom messages), so a reloaded page
renders the current state and goes on updating. A view that is closed (``close()``, or its
comm closed by the front end) unsubscribes from the engine, stops the Trace it made, and its
flusher thread ends: it costs the engine nothing more.
"""
from __future__ import annotations

import base64
import pathlib
import threading
import time
import uuid

import anywidget
import numpy as np
import traitlets as t

from inferlab.lab import palette
from inferlab.lab.figures import static_images
from inferlab.observe.trace import Trace

HERE = pathlib.Path(__file__).parent
# add a PNG of view.figure() to each displayed view (off with INFERLAB_STATIC_IMAGES=0, as on
# Binder: lab/figures.py static_images)
STATIC_IMAGES = static_images()


def asset(*names: str) -> str:
    return "\n".join((HERE / n).read_text(encoding="utf-8") for n in names)


def pack(values, dtype) -> bytes:
    """A list of numbers as little-endian bytes (a typed array in the browser)."""
    return np.asarray(values, dtype=dtype).tobytes()


class SavedDisplay:
    """A widget whose saved output can be brought up to date: it is shown with a display id,
    so that the output a notebook keeps (the repr and the PNG that GitHub shows) can be
    replaced with the current state when a live run ends (``refresh_display``)."""
    _display_id: str | None = None

    def _ipython_display_(self):
        from IPython.display import display
        if self._display_id is None:
            self._display_id = uuid.uuid4().hex
        data, meta = self._bundle()
        display(data, metadata=meta, raw=True, display_id=self._display_id)

    def _bundle(self) -> tuple[dict, dict]:
        out = self._repr_mimebundle_()
        return out if isinstance(out, tuple) else (out, {})

    def refresh_display(self) -> None:
        """Bring the output where this was shown up to its current state (a view's
        ``detach()`` does it when its live run ends, so a view shown before its run is saved
        with the run)."""
        if self._display_id is None or self.comm is None:
            return
        from IPython.display import update_display
        data, meta = self._bundle()
        update_display(data, metadata=meta, raw=True, display_id=self._display_id)


class View(SavedDisplay, anywidget.AnyWidget):
    cursor = t.Int(-1).tag(sync=True)           # step shown; -1 follows the latest
    num_steps = t.Int(0).tag(sync=True)
    step_times = t.Bytes(b"").tag(sync=True)    # float64: end of each step, seconds from t0
    live = t.Bool(False).tag(sync=True)
    clock = t.Unicode("wall").tag(sync=True)
    title = t.Unicode("").tag(sync=True)
    max_rate = 20.0                            # updates per second, at most
    kind = "view"

    def __init_subclass__(cls, **kwargs):
        """Every view's stylesheet starts with the palette as CSS variables (--il-*), so the
        JS and CSS take their colours from inferlab.lab.palette, never from a copy."""
        css = cls.__dict__.get("_css")
        if isinstance(css, str):
            cls._css = palette.css_variables() + css
        super().__init_subclass__(**kwargs)

    def __init__(self, source=None, *, title: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.title = title or self.kind
        self._lock = threading.RLock()
        self._trace: Trace | None = None
        self._done = 0
        self._t0 = None
        self._step_t: list[float] = []
        self._unsub = None
        self._owned: Trace | None = None     # the Trace attach() made (stopped on detach)
        self._flusher: threading.Thread | None = None
        self._stop = threading.Event()
        self.num_pushes = 0
        self.errors: list[str] = []
        self._reset()
        self.observe(self._on_cursor, "cursor")
        self.observe(lambda ch: self._watch_comm(ch["new"]), "comm")
        self._watch_comm(self.comm)
        if isinstance(source, Trace):
            self.load_trace(source)
        elif source is not None:
            self.attach(source)

    # --- sources -------------------------------------------------------------------------
    @property
    def trace(self) -> Trace | None:
        return self._trace

    def load_trace(self, trace: Trace) -> "View":
        """Show a recorded trace; the scrubber moves through its steps."""
        self.detach()
        with self._lock:
            self._start(trace)
            self._flush()
            self.live = False
        return self

    def attach(self, engine, trace: Trace | None = None) -> "View":
        """Follow ``engine`` live (records into ``trace``, or a new one: ``view.trace``)."""
        self.detach()
        if trace is None:
            trace = self._owned = Trace.record(engine)
        with self._lock:
            self._start(trace)
            self.live = True
        self._unsub = engine.subscribe(self._poke)
        return self

    def detach(self) -> "View":
        if self._unsub is not None:
            self._unsub()
            self._unsub = None
        if self._owned is not None:
            self._owned.stop()
            self._owned = None
        self._stop.set()
        f = self._flusher
        if f is not None and f is not threading.current_thread():
            f.join(timeout=2)
        self._flusher = None
        if self._trace is not None:
            self.flush()
        was_live, self.live = self.live, False
        if was_live:
            self.refresh_display()
        return self

    def _start(self, trace):
        self._trace, self._done, self._step_t = trace, 0, []
        self._t0 = None
        self.clock = str(trace.meta.get("clock", "wall"))
        self._reset()

    # --- coalesced updates ------------------------------------------------------------
    def _poke(self, rec) -> None:
        """The engine hook: O(1), never blocks (the Trace already holds the record)."""
        f = self._flusher
        if f is None or not f.is_alive():
            self._stop.clear()
            self._flusher = threading.Thread(target=self._run, daemon=True,
                                             name=f"inferlab-{self.kind}-flusher")
            self._flusher.start()

    def _run(self) -> None:
        idle = 0
        while not self._stop.wait(1.0 / self.max_rate):
            idle = 0 if self.flush() else idle + 1
            if idle > 2 * self.max_rate:        # asleep after 2 s; the next step wakes it
                break

    def flush(self) -> int:
        """Fold records that arrived since the last update into the view; returns how many."""
        with self._lock:
            return self._flush()

    def _flush(self) -> int:
        trace = self._trace
        if trace is None:
            return 0
        new = trace.records[self._done:]
        if not new and self.num_pushes:
            return 0
        if self._t0 is None and trace.records:
            self._t0 = trace.t0
        try:
            self._step_t.extend(r.t_end - self._t0 for r in new)
            self._ingest(new)
            with self.hold_sync():
                self.num_steps = len(self._step_t)
                self.step_times = pack(self._step_t, "<f8")
                self._sync()
        except Exception as e:  # noqa: BLE001 - a broken view must not break the run
            self.errors.append(f"{type(e).__name__}: {e}")
        self._done += len(new)
        self.num_pushes += 1
        return len(new)

    @property
    def t0(self) -> float:
        return self._t0 or 0.0

    def _on_cursor(self, change) -> None:
        pass

    def shown_step(self) -> int:
        """The step the scrubber points at (the latest when following)."""
        n = len(self._step_t)
        return n - 1 if self.cursor < 0 or self.cursor >= n else self.cursor

    def shown_time(self) -> float | None:
        """Absolute engine time of the shown step's end (None when nothing is recorded)."""
        if not self._step_t:
            return None
        return self._step_t[self.shown_step()] + self.t0

    # --- to implement ----------------------------------------------------------------
    def _reset(self) -> None: ...
    def _ingest(self, records) -> None: ...
    def _sync(self) -> None: ...

    def figure(self):
        raise NotImplementedError

    # --- output ---------------------------------------------------------------------
    def __repr__(self) -> str:   # no memory address: notebook outputs stay comparable
        return f"{type(self).__name__}({self.num_steps} steps, clock={self.clock!r})"

    def close(self):
        self._display_id = None          # a closed view leaves its last picture as it was
        self.detach()
        super().close()

    def _watch_comm(self, comm) -> None:
        """The front end closing this view's comm ends it as close() does."""
        if comm is not None and hasattr(comm, "on_close"):
            comm.on_close(lambda msg: self.detach())

    def _repr_mimebundle_(self, **kwargs):
        out = super()._repr_mimebundle_(**kwargs)
        data, meta = out if isinstance(out, tuple) else (out, {})
        data = dict(data)
        data["text/plain"] = repr(self)
        if STATIC_IMAGES and self.num_steps:
            try:
                png = png_of(self.figure())
                data["image/png"] = base64.b64encode(png).decode("ascii")
            except Exception as e:  # noqa: BLE001 - no browser for kaleido: widget only
                from inferlab.lab.figures import export_failed
                self.errors.append(export_failed(f"{type(self).__name__} static image", e))
        return data, meta

    def snapshot(self):
        """The view as a picture, e.g. after a live run: a static PNG (IPython Image); with
        static images off (``INFERLAB_STATIC_IMAGES=0``, Binder) its plotly figure, which the
        reader's browser draws, so no headless Chrome starts in the kernel."""
        fig = self.figure()
        if not static_images():
            return fig
        from IPython.display import Image
        return Image(png_of(fig))


def png_of(fig, width: int = 900, height: int = 420) -> bytes:
    """A view's picture as PNG bytes at device scale 2 (sharp on a HiDPI screen and in
    print), at the figure's own size where it has one (a timeline grows with its requests)."""
    from inferlab.lab.figures import compact_png, to_image
    return compact_png(to_image(fig, "png", width=fig.layout.width or width,
                                height=fig.layout.height or height, scale=2.0))


def wait_until(pred, timeout: float = 5.0, every: float = 0.01) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(every)
    return pred()
