"""VllmConnector: a running vLLM server seen through the lab's own records.

    conn = VllmConnector("http://127.0.0.1:8000", kv=["ipc:///tmp/.../kv"],
                         replay=["ipc:///tmp/.../kv-replay"], steps=["ipc:///tmp/.../steps"])
    conn.connect()                       # or: srv.connector().connect() (VllmServer)
    trace = Trace.record(conn)           # the same Trace as for an Engine
    view = SchedulerTimeline(conn)       # TokenStream(conn), VllmPrefixCache(conn)
    conn.generate([ids1, ids2], max_tokens=16)      # through /v1/completions, streamed

It has the engine's observing surface (``subscribe``, ``config``, ``model_name``,
``clock_name``, ``num_blocks``) and publishes one ``StepRecord`` per vLLM engine step on an
``EventBus``, built by ``StepAssembler`` from three sources: the KV cache events (``KVSubscriber``,
one endpoint per data-parallel rank), inferlab's per-step reports (``ReportSubscriber``, from
the plugin in the server) and our requests' token streams (``RequestStreams``), all ``feeds/``.
A background thread reads the sockets and publishes; requests run in threads of their own.
Nothing it receives can raise into the notebook: bad input becomes a warning (``conn.warnings``,
also a Python warning the first time each kind happens), and the records so far stay.
"""
from __future__ import annotations

import threading
import time
import warnings
from dataclasses import dataclass

import zmq

from ...core.events import EventBus
from ...errors import InferlabError
from ..feeds.assembler import StepAssembler
from ..feeds.hash_tree import HashTree
from ..feeds.kv_stream import KVSubscriber
from ..feeds.prefix_tree import KV_IDS
from ..feeds.reports import ReportSubscriber, info_from_metrics
from ..feeds.request_streams import RequestStreams, VllmResult
from ..wire import step_reports
from ..wire.kv_events import BadEvent, UnknownEvent
from ..wire.sse import StreamError, get_json, post_json

CLOCK = "wall (vLLM)"
SILENT_S = 5.0
MAX_WARNINGS = 50


class ConnectError(InferlabError, RuntimeError):
    """The server or an endpoint cannot be reached or used."""


@dataclass
class ConnectorConfig:
    """What we know of the server (from its heartbeat); kept in a Trace's meta."""

    url: str
    model: str
    vllm_version: str = "?"
    block_size: int = 0
    num_blocks: int = 0
    max_num_seqs: int = 0
    max_num_batched_tokens: int = 0
    max_model_len: int = 0
    enable_prefix_caching: bool = False
    dp_ranks: int = 1
    scheduler: str = "vLLM"
    kv_layout: str = "vllm-prefix-cache"
    kv_ids: str = KV_IDS


class VllmConnector:
    clock_name = CLOCK

    def __init__(self, url: str, kv=(), replay=(), steps=(), *, model: str | None = None,
                 server=None, topic: str = "kv", bind_kv: bool = False):
        self.url = url.rstrip("/")
        self.kv_endpoints, self.replay_endpoints = _list(kv), _list(replay)
        self.steps_endpoints = _list(steps)
        self.server, self.topic, self.bind_kv = server, topic, bind_kv
        self._model = model
        self.warnings: list[str] = []
        self._warned: dict[str, int] = {}
        self._listeners: list = []
        self.bus = EventBus()
        self.tree = HashTree(max(1, len(self.kv_endpoints)))
        self._lock = threading.RLock()
        self.assembler = StepAssembler(CLOCK, warn=self._warn, cached_guess=self._cached_guess)
        self.counts = {"kv_unknown": 0, "kv_bad": 0}
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.streams: RequestStreams | None = None
        self._ctx = None

    # --- life ------------------------------------------------------------------------------
    def connect(self, timeout: float = 15.0) -> "VllmConnector":
        if self._thread is not None:
            return self
        try:
            models = get_json(self.url, "/v1/models")
        except StreamError as e:
            raise ConnectError(f"{e} (is it running? `inferlab vllm serve` starts one)") \
                from None
        names = [m.get("id") for m in models.get("data", []) if isinstance(m, dict)]
        if self._model is None:
            if not names:
                raise ConnectError(f"the server at {self.url} serves no model")
            self._model = names[0]
        self.streams = RequestStreams(self.url, self._model, self._queued, self._token,
                                      self._done)
        self._ctx = zmq.Context()
        try:
            self.kv = KVSubscriber(self._ctx, self.kv_endpoints, self.replay_endpoints,
                                   self.topic, warn=self._warn, bind=self.bind_kv)
            self.reports = ReportSubscriber(self._ctx, self.steps_endpoints, warn=self._warn)
        except zmq.ZMQError as e:
            self._ctx.destroy(0)
            eps = self.kv_endpoints + self.steps_endpoints
            raise ConnectError(f"cannot use the ZMQ endpoints {eps}: {e}") from None
        self._stop.clear()
        self._thread = threading.Thread(target=self._pump, daemon=True, name="inferlab-vllm")
        self._thread.start()
        end = time.monotonic() + timeout
        while self.steps_endpoints and self.assembler.info is None and time.monotonic() < end:
            time.sleep(0.05)
        if self.steps_endpoints and self.assembler.info is None:
            self._warn("no_reports", f"no step report from {self.steps_endpoints} within "
                       f"{timeout:.0f} s: is inferlab's plugin in the server's venv? Steps will "
                       "be inferred from token arrivals")
        if self.assembler.info is None:
            info = info_from_metrics(self.url, self.model_name)
            if info is not None:
                with self._lock:
                    self.assembler.on_engine(info)
        time.sleep(0.3)                          # ZMQ slow joiner: let the SUBs settle
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._ctx is not None:
            self.kv.close()
            self.reports.close()
            self._ctx.term()
            self._ctx = None

    def __enter__(self):
        return self.connect()

    def __exit__(self, *exc):
        self.close()

    # --- the engine's observing surface ------------------------------------------------
    def subscribe(self, fn):
        return self.bus.subscribe(fn)

    @property
    def model_name(self) -> str:
        return self._model or "?"

    @property
    def config(self) -> ConnectorConfig:
        i = self.assembler.info
        if i is None:
            return ConnectorConfig(self.url, self.model_name, dp_ranks=len(self.kv_endpoints),
                                   block_size=self.assembler.default_block_size)
        return ConnectorConfig(self.url, self.model_name, i.vllm_version, i.block_size,
                               i.num_blocks, i.max_num_seqs, i.max_num_batched_tokens,
                               i.max_model_len, i.prefix_caching, max(1, len(self.kv_endpoints)))

    @property
    def num_blocks(self) -> int:
        i = self.assembler.info
        return i.num_blocks if i and i.num_blocks else 1

    @property
    def block_size(self) -> int:
        i = self.assembler.info
        return i.block_size if i and i.block_size else self.assembler.default_block_size

    def record(self, **meta):
        """``Trace.record(self)`` that also keeps this connector's warnings in its meta."""
        from ...observe.trace import Trace
        return Trace.record(self, vllm_warnings=self.warnings, **meta)

    # --- requests ------------------------------------------------------------------------
    def submit(self, prompt, max_tokens: int = 16, *, request_id: str | None = None,
               temperature: float = 0.0, ignore_eos: bool = False, **body) -> str:
        """Send one request (token ids, or text tokenized by the server's /tokenize)."""
        if self.streams is None:
            raise ConnectError("connect() first")
        text = None
        if isinstance(prompt, str):
            text = prompt
            try:
                prompt = post_json(self.url, "/tokenize", {"model": self._model,
                                                           "prompt": prompt})["tokens"]
            except (StreamError, KeyError, TypeError) as e:
                raise ConnectError(f"cannot tokenize the prompt on the server: {e}") from None
        ids = [int(t) for t in prompt]
        return self.streams.submit(ids, request_id, text, {
            "max_tokens": max_tokens, "temperature": temperature, "ignore_eos": ignore_eos,
            **body})

    def generate(self, prompts, max_tokens: int = 16, timeout: float | None = 600.0,
                 **kw) -> list[VllmResult]:
        """Send every prompt at once and wait for all; their results in order."""
        rids = [self.submit(p, max_tokens, **kw) for p in prompts]
        if not self.streams.wait(rids, timeout):
            raise ConnectError(f"requests still running after {timeout} s")
        return [self.streams.results[r] for r in rids]

    def wait(self, rids=None, timeout: float | None = None, settle: float = 0.6) -> bool:
        """Wait for requests, then ``settle`` seconds for their last steps to publish."""
        ok = self.streams.wait(rids, timeout)
        time.sleep(settle)
        return ok

    @property
    def results(self) -> dict[str, VllmResult]:
        return self.streams.results if self.streams else {}

    def _cached_guess(self, rid, block_size, live):
        res = self.results.get(rid)
        return None if res is None else self.tree.cached_prefix(res.prompt_token_ids,
                                                                block_size, live)

    def _queued(self, rid, info):
        with self._lock:
            self.assembler.on_queued(rid, info)

    def _token(self, tok):
        with self._lock:
            self.assembler.on_token(tok)

    def _done(self, rid, kind, detail, t):
        with self._lock:
            self.assembler.on_done(rid, kind, detail, t)

    # --- the pump: sockets in, records out ----------------------------------------------
    def _pump(self) -> None:
        poller = zmq.Poller()
        for s in self.kv.subs + self.reports.subs:
            poller.register(s, zmq.POLLIN)
        while not self._stop.is_set():
            try:
                ready = dict(poller.poll(20))
                now = time.time()
                for i, s in enumerate(self.kv.subs):
                    if s in ready:
                        for rank, batch in self.kv.receive(i):
                            self._on_kv(rank, batch, now)
                for i, s in enumerate(self.reports.subs):
                    if s in ready:
                        self._on_steps(i, now)
                with self._lock:
                    records = self.assembler.ready(now)
                for rec in records:
                    self.bus.publish(rec)
                self._check_alive(now)
            except Exception as e:  # noqa: BLE001 - the pump must outlive any bad input
                self._warn("internal", f"the connector skipped a message it could not handle: "
                           f"{type(e).__name__}: {e}")

    def _on_kv(self, rank, batch, now) -> None:
        out = []
        for ev in batch.events:
            if isinstance(ev, UnknownEvent):
                self.counts["kv_unknown"] += 1
                self._warn(f"unknown:{ev.type}", f"KV events: unknown event type {ev.type!r} "
                           "skipped (from a newer vLLM?)")
            elif isinstance(ev, BadEvent):
                self.counts["kv_bad"] += 1
                self._warn("bad_event", f"KV events: a malformed event was skipped "
                                        f"({ev.problem})")
            else:
                out.extend(self.tree.apply(rank, ev))
        with self._lock:
            self.assembler.on_kv(batch.ts, out, now)

    def _on_steps(self, i, now) -> None:
        for msg in self.reports.receive(i, now):
            with self._lock:
                if isinstance(msg, step_reports.EngineInfo):
                    self.assembler.on_engine(msg)
                else:
                    self.assembler.on_report(msg, now)

    def _check_alive(self, now) -> None:
        srv = self.server
        if srv is not None and srv.proc is not None and not srv.alive:
            self._warn("server_died", f"the vLLM server exited (code {srv.returncode}); "
                       f"its log ends:\n{srv.log_tail(15)}")
        elif self.reports.heard and now - self.reports.heard > SILENT_S:
            self._warn("silent", f"no word from the server for {now - self.reports.heard:.0f} s "
                                 "(its heartbeat comes every second): is it still running?")

    def _warn(self, kind: str, msg: str) -> None:
        n = self._warned.get(kind, 0)
        self._warned[kind] = n + 1
        if n == 0:
            self._keep(msg)
            warnings.warn(f"inferlab.connect: {msg}", RuntimeWarning, stacklevel=2)
        elif kind in ("gap", "reports_lost", "malformed", "out_of_order", "bad_event"):
            self._keep(msg)                  # each gap / bad message is news of its own

    def _keep(self, msg: str) -> None:
        if len(self.warnings) < MAX_WARNINGS:
            self.warnings.append(msg)
        elif len(self.warnings) == MAX_WARNINGS:
            self.warnings.append("... (more warnings: see conn.stats())")
        for fn in list(self._listeners):
            try:
                fn(msg)
            except Exception:  # noqa: BLE001 - a view must not break the connector
                self._listeners.remove(fn)

    def on_warning(self, fn):
        """Call ``fn(message)`` on every new warning (views show them); returns an unsubscriber."""
        self._listeners.append(fn)
        return lambda: fn in self._listeners and self._listeners.remove(fn)

    def stats(self) -> dict:
        reports = getattr(self, "reports", None)
        kv = getattr(self, "kv", None)
        return {**self.counts, **(reports.counts if reports else {}),
                **{f"kv_{k}": v for k, v in (kv.counts if kv else {}).items()},
                "blocks_stored": self.tree.num_stored, "blocks_cached": self.tree.num_cached(),
                "steps_published": self.assembler.step_no,
                "cached_split_unknown": self.assembler.ambiguous_cached}

    def __repr__(self):
        state = "connected" if self._thread is not None else "not connected"
        return (f"VllmConnector({self.url}, model={self.model_name!r}, {state}, "
                f"{self.assembler.step_no} steps, {len(self.warnings)} warnings)")


def _list(v) -> list[str]:
    if not v:
        return []
    return [v] if isinstance(v, str) else list(v)
