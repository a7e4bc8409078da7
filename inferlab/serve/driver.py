"""The one thread that owns the engine while a server runs.

The engine is not thread-safe, so only this thread calls it. HTTP handlers, on uvicorn's
event loop, never touch the engine: ``submit`` and ``close`` put a command on a thread-safe
queue. The thread loops:

    take every command that arrived  -> add_request / abort          (between two steps)
    engine.step()                    -> one batch for every active request of every client
    hand out the outputs             -> one loop.call_soon_threadsafe per step, which puts
                                        each output on its request's asyncio.Queue

so many HTTP clients share one engine loop: continuous batching, as with ``generate``. The
engine publishes each step to its subscribers as always, so views attached to it keep
updating. Idle, the thread sleeps on the command queue.

A step that raises does not end the loop: the requests it was running get a 500 and are
aborted (their KV blocks freed); everyone else goes on. ``stop`` aborts what is left, answers
it with a 503, and leaves the engine idle, holding no blocks, usable again.
"""
from __future__ import annotations

import asyncio
import logging
import queue
import threading

from .errors import APIError, engine_error
from .timing import now

log = logging.getLogger("inferlab.serve")


class Job:
    """One HTTP request: its engine requests (one per choice) and the queue they feed.

    Items on ``queue``: ("started",) once every choice is in the engine, ("out", index,
    RequestOutput, step) per step, ("error", APIError) when it was refused or failed.
    ``times``: its ``timing.RequestTimes`` when the server times requests, else None."""

    def __init__(self, prompts: list, params: list, loop: asyncio.AbstractEventLoop,
                 param: str | None = None, times=None):
        self.prompts, self.params, self.loop = prompts, params, loop
        self.param = param                     # the body's field a refusal names
        self.times = times
        self.step = 0                          # the driver's step of the last output taken
        self.queue: asyncio.Queue = asyncio.Queue()
        self.request_ids: list[str] = []       # driver thread only, as ``live``
        self.live: set[int] = set()            # choices not finished yet
        self.released = False                  # event-loop side: close() was called

    async def started(self) -> None:
        item = await self.queue.get()
        if item[0] == "error":
            raise item[1]

    async def outputs(self):
        """Yield (choice index, RequestOutput delta) until every choice has finished."""
        remaining = len(self.prompts)
        while remaining:
            item = await self.queue.get()
            if item[0] == "error":
                raise item[1]
            self.step = item[3]
            yield item[1], item[2]
            remaining -= item[2].finished


class EngineDriver:
    def __init__(self, engine, max_pending: int = 1024, timing=None):
        self.engine = engine
        self.max_pending = max_pending
        self.timing = timing                   # a timing.ServeTiming, or None (not timed)
        self._stepped = False                  # the last cycle ran a step (timing only)
        self.num_steps = 0
        self.num_step_errors = 0
        self._cmds: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._open = 0                         # jobs submitted and not closed
        self._stopping = False
        self._stopped = False                  # driver thread only, as the three below
        self._jobs: set[Job] = set()
        self._owner: dict[str, tuple[Job, int]] = {}
        self._outbox: list[tuple[Job, tuple]] = []
        self._aborted = False                  # aborts not yet published by a step
        self._thread = threading.Thread(target=self._run, name="inferlab-serve-engine",
                                        daemon=True)

    # --- the event loop's side -----------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    @property
    def num_open(self) -> int:
        return self._open

    def submit(self, prompts: list, params: list, param: str | None = None,
               times=None) -> Job:
        """Queue one request's choices (call from the event loop); 503 when stopping or full.
        ``param``: the body's field an engine refusal names ("prompt", "messages");
        ``times``: its ``timing.RequestTimes`` (the server times requests)."""
        with self._lock:
            if self._stopping:
                raise APIError(503, "the server is stopping", "server_error",
                               code="server_stopping")
            if self._open >= self.max_pending:
                raise APIError(503, f"the server already holds {self.max_pending} requests "
                               "(max_pending); try again later", "server_error",
                               code="server_overloaded")
            self._open += 1
        job = Job(prompts, params, asyncio.get_running_loop(), param, times)
        if times is not None:
            times.submitted = now()
        self._cmds.put(("add", job))
        return job

    def close(self, job: Job) -> None:
        """The handler is done with ``job`` (answered, failed, or its client went away):
        abort whatever of it still runs. Safe to call more than once."""
        if job.released:
            return
        job.released = True
        with self._lock:
            self._open -= 1
        self._cmds.put(("cancel", job))

    def stop(self, timeout: float = 30.0) -> None:
        """Abort every request still in the engine (their clients get a 503), then end the
        thread. Blocks until the engine is idle again."""
        with self._lock:
            self._stopping = True
        self._cmds.put(("stop", None))
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    # --- the driver thread -------------------------------------------------------------
    def _run(self) -> None:
        while not self._stopped:
            try:
                self._cycle()
            except Exception as e:           # noqa: BLE001 - a bug here must not strand
                log.exception("inferlab serve: the engine loop failed")     # the clients
                self._fail(set(self._jobs), engine_error(e))
            self._flush()
        self._fail(set(self._jobs), APIError(503, "the server stopped before this request "
                                             "finished", "server_error", code="server_stopped"))
        self._flush()
        if not self.engine.has_unfinished_requests():
            self._publish_idle()

    def _cycle(self) -> None:
        """Take the commands that arrived, then run one engine step if anything is active."""
        eng = self.engine
        self._take_commands(block=not eng.has_unfinished_requests())
        if self._aborted and not eng.has_unfinished_requests():
            self._publish_idle()             # so views see an abort now, not at the next step
        if self._stopped or not eng.has_unfinished_requests():
            return
        t0 = now() if self.timing is not None else 0.0
        try:
            outs = eng.step()
        except Exception as e:               # noqa: BLE001 - fail its requests, go on
            self._step_failed(e)
        else:
            self.num_steps += 1
            if self.timing is not None:
                self.timing.step_done(self.num_steps, t0, now())
                self._stepped = True
            self._deliver(outs)
        if self._jobs and not eng.has_unfinished_requests():
            # aborted behind our back (eng.request_stop() / abort_all())
            self._fail(set(self._jobs), APIError(500, "the engine aborted this request",
                                                 "server_error", code="aborted"))

    def _publish_idle(self) -> None:
        """An engine step with nothing to run: it publishes the aborts queued since the last
        step to the engine's subscribers (the views), as ``Engine.stream`` does."""
        self._aborted = False
        try:
            self.engine.step()
        except Exception:            # noqa: BLE001 - the bus reports its hooks' problems
            log.exception("inferlab serve: publishing an idle step failed")

    def _take_commands(self, block: bool) -> None:
        try:
            cmd = self._cmds.get() if block else self._cmds.get_nowait()
        except queue.Empty:
            return
        while True:
            kind, job = cmd
            if kind == "add":
                self._add(job)
            elif kind == "cancel":
                self._abort(job)
            else:
                self._stopped = True
            try:
                cmd = self._cmds.get_nowait()
            except queue.Empty:
                return

    def _add(self, job: Job) -> None:
        if self._stopped:
            self._post(job, ("error", APIError(503, "the server is stopping", "server_error",
                                               code="server_stopping")))
            return
        if job.released:                 # its client left before it got here
            return
        try:
            for i, (prompt, params) in enumerate(zip(job.prompts, job.params)):
                rid = self.engine.add_request(prompt, params)
                job.request_ids.append(rid)
                job.live.add(i)
                self._owner[rid] = (job, i)
        except Exception as e:           # noqa: BLE001 - bad input: a 4xx for this one
            self._abort(job)
            self._post(job, ("error", engine_error(e, job.param or (
                "messages" if isinstance(job.prompts[0], list) and job.prompts[0]
                and isinstance(job.prompts[0][0], dict) else "prompt"))))
            return
        if job.times is not None:
            job.times.added = now()
        self._jobs.add(job)
        self._post(job, ("started",))

    def _abort(self, job: Job) -> None:
        """Abort the job's unfinished engine requests (their KV blocks are freed)."""
        for i in sorted(job.live):
            rid = job.request_ids[i]
            self._owner.pop(rid, None)
            self._aborted = True
            try:
                self.engine.abort(rid)
            except Exception:            # noqa: BLE001 - keep aborting the others
                log.exception("inferlab serve: abort(%s) failed", rid)
        job.live.clear()
        self._jobs.discard(job)

    def _fail(self, jobs, err: APIError) -> None:
        for job in jobs:
            self._abort(job)
            self._post(job, ("error", err))

    def _step_failed(self, exc: Exception) -> None:
        self.num_step_errors += 1
        log.error("inferlab serve: an engine step raised; aborting the requests it ran",
                  exc_info=exc)
        running = [r.request_id for r in self.engine.scheduler.running]
        hit = {self._owner[r][0] for r in running if r in self._owner} or set(self._jobs)
        self._fail(hit, APIError(500, f"the engine failed in a step ({type(exc).__name__}: "
                                 f"{exc}); this request was aborted, the server goes on",
                                 "server_error", code="engine_error"))
        if self.engine.has_unfinished_requests() and not self._jobs:
            self.engine.abort_all()      # not ours, and it would fail again: do not spin

    def _deliver(self, outs) -> None:
        for out in outs:
            owner = self._owner.get(out.request_id)
            if owner is None:            # not a server request
                continue
            job, i = owner
            self._post(job, ("out", i, out, self.num_steps))
            if out.finished:
                del self._owner[out.request_id]
                job.live.discard(i)
                if not job.live:
                    self._jobs.discard(job)

    def _post(self, job: Job, item: tuple) -> None:
        self._outbox.append((job, item))

    def _flush(self) -> None:
        """Everything this step produced, to the event loop(s) in one call each."""
        if not self._outbox:
            return
        by_loop: dict = {}
        for job, item in self._outbox:
            by_loop.setdefault(job.loop, []).append((job.queue, item))
        self._outbox = []
        if self._stepped:                    # handed over from now (timing only)
            self._stepped = False
            self.timing.flushed(self.num_steps)
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_put_all, items)
            except RuntimeError:         # that loop has closed: nobody is waiting
                pass


def _put_all(items) -> None:
    for q, item in items:
        q.put_nowait(item)
