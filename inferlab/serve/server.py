"""Start and stop the server: in the background for a notebook, in the foreground for the CLI.

    srv = inferlab.serve.start(eng, port=0)     # uvicorn in a thread; the kernel stays free
    srv.url                                      # http://127.0.0.1:PORT/v1
    srv.stop()                                   # aborts what is left; the engine is idle

Safe by default: it binds 127.0.0.1; binding any other address needs an API key (clients
send it as ``Authorization: Bearer KEY``), and without one ``start`` refuses before opening
a socket. The socket is bound here, in the caller's thread, so ``port=0`` gives a free port
that ``url`` already knows and a busy port fails at once.
"""
from __future__ import annotations

import ipaddress
import logging
import socket
import threading
import time
import weakref

from ..errors import InvalidInputError
from .driver import EngineDriver
from .record import RequestRecorder
from .timing import ServeTiming

log = logging.getLogger("inferlab.serve")
_SERVED: weakref.WeakSet = weakref.WeakSet()     # engines a running server owns
_SERVED_LOCK = threading.Lock()


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False                 # a host name: it may resolve to anything


def check_exposure(host: str, api_key: str | None) -> None:
    """Refuse to listen beyond this machine without an API key."""
    if api_key is not None and not (isinstance(api_key, str) and api_key.strip()):
        raise InvalidInputError("api_key must be a non-empty string (or None on 127.0.0.1)")
    if not is_loopback(host) and api_key is None:
        raise InvalidInputError(
            f"refusing to serve on {host!r} without an API key: anyone who can reach that "
            "address could use the engine. Give api_key=... (CLI: --api-key KEY or "
            "INFERLAB_API_KEY), or serve on 127.0.0.1 (the default)")


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, and TCP_NODELAY (inherited by accepted sockets): asyncio sets no-delay
    # only on sockets whose proto says TCP, and without it Nagle held every response and SSE
    # chunk for the client's delayed ACK, ~40 ms a request (found fuzzing: GET /health 43 ms)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as e:
        sock.close()
        raise InvalidInputError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock.set_inheritable(True)
    return sock


class Server:
    """An OpenAI-compatible server over one engine (see :func:`start`)."""

    def __init__(self, engine, *, host: str = "127.0.0.1", port: int = 8000,
                 api_key: str | None = None, model_name: str | None = None,
                 max_pending: int = 1024, max_body_bytes: int | None = None,
                 log_level: str = "warning", record_requests=None, timing=None):
        check_exposure(host, api_key)
        try:
            import uvicorn

            from .app import MAX_BODY_BYTES, create_app
            from .metrics import ServerMetrics
        except ImportError as e:
            raise ImportError(f"inferlab serve needs fastapi and uvicorn ({e}); "
                              "pip install fastapi uvicorn") from None
        self.engine = engine
        self.model_name = model_name or engine.model_name
        self.api_key = api_key
        # --timing: where each streamed request's time went, one JSON line each (timing.py)
        self.timing = None if timing is None else ServeTiming(str(timing))
        self.driver = EngineDriver(engine, max_pending=max_pending, timing=self.timing)
        # --record-requests: each accepted request appended to a request log (record.py)
        self.recorder = None if record_requests is None else RequestRecorder(record_requests)
        # GET /metrics: vLLM's Prometheus names, fed by the engine's step records (metrics.py)
        self.metrics = ServerMetrics(engine, self.model_name)
        self.app = create_app(self.driver, self.model_name, api_key=api_key,
                              max_body_bytes=max_body_bytes or MAX_BODY_BYTES,
                              recorder=self.recorder, metrics=self.metrics)
        try:
            self._sock = _bind(host, port)
        except InvalidInputError:
            if self.recorder is not None:
                self.recorder.close()
            if self.timing is not None:
                self.timing.close()
            raise
        self.host, self.port = host, self._sock.getsockname()[1]
        self._uvicorn = uvicorn.Server(uvicorn.Config(
            self.app, log_level=log_level, access_log=False, lifespan="off",
            timeout_graceful_shutdown=5, timeout_keep_alive=5))
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        """The OpenAI base URL (what ``openai.OpenAI(base_url=...)`` takes)."""
        host = f"[{self.host.strip('[]')}]" if ":" in self.host else self.host
        return f"http://{'127.0.0.1' if host in ('0.0.0.0', '[::]') else host}:{self.port}/v1"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _claim(self) -> None:
        with _SERVED_LOCK:
            if self.engine in _SERVED:
                raise InvalidInputError("this engine is already being served (one thread must "
                                        "own it); stop that server first, or serve another "
                                        "engine")
            _SERVED.add(self.engine)

    def start(self, timeout: float = 30.0) -> "Server":
        """Serve from a background thread; returns once it accepts connections."""
        self._claim()
        self._start_recording()
        self.driver.start()
        self._thread = threading.Thread(target=self._serve, name="inferlab-serve-http",
                                        daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._uvicorn.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"inferlab serve: uvicorn did not start ({self._error!r})")
            time.sleep(0.01)
        return self

    def _start_recording(self) -> None:
        self.metrics.attach()                # before the engine thread's first step
        if self.timing is not None:
            self.timing.attach(self.engine)
        if self.recorder is not None:
            self.recorder.start()            # arrival_s counts from here

    def _serve(self) -> None:
        try:
            self._uvicorn.run(sockets=[self._sock])
        except BaseException as e:   # noqa: BLE001 - reported by start()/stop()
            self._error = e
            log.exception("inferlab serve: uvicorn stopped")

    def serve_forever(self) -> None:
        """Serve in this thread (the CLI) until Ctrl-C / SIGTERM; then stop."""
        self._claim()
        self._start_recording()
        self.driver.start()
        try:
            self._uvicorn.run(sockets=[self._sock])
        finally:
            self.stop()

    def stop(self, timeout: float = 30.0) -> None:
        """Abort every request still running (its client gets a 503 or an error event), stop
        listening, and leave the engine idle with no KV blocks held; it can generate again."""
        self.driver.stop(timeout)
        self._uvicorn.should_exit = True
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        self._sock.close()
        if self.recorder is not None:
            self.recorder.close()
        if not self.driver.alive:
            self.metrics.detach()
            if self.timing is not None:
                self.timing.close()
            with _SERVED_LOCK:
                _SERVED.discard(self.engine)

    def __enter__(self) -> "Server":
        return self if self.running else self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return (f"<inferlab.serve.Server {state} at {self.url} model={self.model_name!r} "
                f"auth={'on' if self.api_key else 'off'}>")


def start(engine, *, host: str = "127.0.0.1", port: int = 0, api_key: str | None = None,
          model_name: str | None = None, record_requests=None, **kw) -> Server:
    """Serve ``engine`` over the OpenAI API from a background thread and return the server
    (``.url``, ``.stop()``). ``port=0`` picks a free port. While it runs, the server's thread
    is the only one that may call the engine; views attached to the engine keep updating.
    ``record_requests=PATH`` appends each accepted request to a request log (JSON Lines, the
    format ``inferlab.sim.request_log.workload_from_log`` replays; see ``record``)."""
    return Server(engine, host=host, port=port, api_key=api_key, model_name=model_name,
                  record_requests=record_requests, **kw).start()
