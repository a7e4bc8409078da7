"""Chapter 13, the network: a real client, the lab's OpenAI server, and a loopback proxy.

The time a user waits for the first word is the engine's TTFT plus what lies between them.
This module measures it on this machine's wall clock, end to end:

* the engine (SmolLM2) behind the lab's OpenAI server (``inferlab.serve``), on 127.0.0.1;
* a client that streams ``/v1/completions`` over one kept-alive HTTP connection and notes when
  the first token's chunk arrives (its TTFT, as the user sees it);
* the engine's own TTFT for the same request, from its step records (arrival to the step that
  emitted the first token);
* for the far arms, a loopback TCP proxy between them that holds every byte for half a round
  trip in each direction (``DelayProxy``): the network it adds is constructed (an
  illustration of a given distance); the client's wait through it is measured.

The arms run interleaved (direct, 50 ms, 150 ms, direct ...) under the lab's busy check, so
what HTTP and streaming cost (client TTFT direct minus engine TTFT) and what the proxy adds
(client TTFT through it minus direct) both come from the same repeats. A new connection's
handshakes are not simulated: every arm keeps its connection open, as a chat client does.
"""
from __future__ import annotations

import asyncio
import http.client
import json
import threading
import time

from .. import protocol
from . import _kit

RTTS = (0.05, 0.15)                # seconds of round trip the proxy adds: a continent, an ocean
PROMPT = "Say hello to the reader in one short sentence."


class DelayProxy:
    """A TCP proxy on 127.0.0.1 that forwards to ``port`` and delays the bytes of each
    direction by ``rtt / 2`` (order kept), in a thread of its own::

        with DelayProxy(target_port, rtt=0.15) as proxy:
            http.client.HTTPConnection("127.0.0.1", proxy.port)
    """

    def __init__(self, port: int, rtt: float):
        self.target, self.delay, self.port = port, rtt / 2, None
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="inferlab-delay-proxy",
                                        daemon=True)

    def __enter__(self) -> "DelayProxy":
        self._thread.start()
        if not self._ready.wait(10) or self.port is None:
            raise RuntimeError("the delay proxy did not start")
        return self

    def __exit__(self, *exc) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _run(self) -> None:
        self._loop.run_until_complete(self._main())
        self._loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        await self._stop.wait()
        server.close()
        rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in rest:
            task.cancel()
        await asyncio.gather(*rest, return_exceptions=True)

    async def _serve(self, c_reader, c_writer) -> None:
        s_reader, s_writer = await asyncio.open_connection("127.0.0.1", self.target)
        try:
            await asyncio.gather(self._pipe(c_reader, s_writer), self._pipe(s_reader, c_writer))
        except (OSError, asyncio.CancelledError):
            pass                          # a side closed, or the proxy stops
        finally:
            for w in (c_writer, s_writer):
                w.close()

    async def _pipe(self, reader, writer) -> None:
        """Forward ``reader`` to ``writer``, each chunk ``delay`` seconds after it came in."""
        queue: asyncio.Queue = asyncio.Queue()

        async def send():
            while (item := await queue.get()) is not None:
                due, data = item
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
                writer.write(data)
                await writer.drain()
        sender = asyncio.ensure_future(send())
        try:
            while data := await reader.read(65536):
                queue.put_nowait((time.perf_counter() + self.delay, data))
            queue.put_nowait(None)
            await sender
        finally:
            sender.cancel()


def client_ttft(conn: http.client.HTTPConnection, model: str, max_tokens: int = 2) -> float:
    """Stream one completion over ``conn`` (kept alive) and return the seconds from sending
    the request to the first token's chunk; the rest of the stream is read to its end."""
    body = json.dumps({"model": model, "prompt": PROMPT, "max_tokens": max_tokens,
                       "temperature": 0, "stream": True})
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"the server answered {resp.status}: {resp.read()[:300]!r}")
    first = None
    for line in resp:
        if line.startswith(b"data: ") and first is None and line.strip() != b"data: [DONE]":
            first = time.perf_counter() - t0
    if first is None:
        raise RuntimeError("the stream ended without a token")
    return first


def measure_network(model, repeats: int, rtts=RTTS) -> dict:
    """Client TTFT direct and through the delay proxy at each ``rtts`` round trip, and the
    engine's own TTFT for the same requests, interleaved on this machine's wall clock."""
    import inferlab.serve
    eng = _kit.engine(model, enable_prefix_caching=False)
    _kit.warm_up(eng)
    arrival: dict[str, float] = {}
    engine_ttft: list[float] = []

    def on_step(rec) -> None:
        for ev in rec.request_events:
            if ev.kind == "queued" and ev.info is not None:
                arrival[ev.request_id] = ev.info.arrival
        for tok in rec.emitted:
            if tok.index == 0 and tok.request_id in arrival:
                engine_ttft.append(rec.t_end - arrival.pop(tok.request_id))
    unsubscribe = eng.subscribe(on_step)
    srv = inferlab.serve.start(eng, port=0)
    names = {"direct": 0.0, **{f"{rtt * 1e3:.0f} ms RTT": rtt for rtt in rtts}}
    proxies, conns = [], {}
    try:
        for name, rtt in names.items():
            port = srv.port
            if rtt:
                proxies.append(DelayProxy(srv.port, rtt).__enter__())
                port = proxies[-1].port
            conns[name] = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            client_ttft(conns[name], srv.model_name)             # connect and warm the arm

        def arm(name):
            engine_ttft.clear()
            seen = client_ttft(conns[name], srv.model_name)
            engine = engine_ttft[0] if engine_ttft else float("nan")
            return {"client": seen, "engine": engine, "between": seen - engine}
        res = protocol.compare({n: (lambda n=n: arm(n)) for n in names}, repeats)
    finally:
        for c in conns.values():
            c.close()
        for p in proxies:
            p.__exit__(None, None, None)
        srv.stop()
        unsubscribe()
    rows = [{"arm": n, "rtt": rtt,
             "client": res.spread(n, lambda r: r["client"]).as_dict(),
             "engine": res.spread(n, lambda r: r["engine"]).as_dict(),
             "between": res.spread(n, lambda r: r["between"]).as_dict()}
            for n, rtt in names.items()]
    return {**res.meta(), "model": eng.model_name, "rows": rows, "prompt": PROMPT}


def network_lines(net: dict) -> list[str]:
    """The measured network rows as the chapter summary prints them."""
    direct = net["rows"][0]
    lines = [f"{net['label']} ({net['model']}), a real client streaming from the lab's OpenAI "
             f"server on 127.0.0.1: engine TTFT {protocol.Spread(**direct['engine']).ms(1)}, "
             f"client TTFT {protocol.Spread(**direct['client']).ms(1)} direct (HTTP and "
             f"streaming: {protocol.Spread(**direct['between']).ms(1)} between them)"]
    for r in net["rows"][1:]:
        lines.append(f"  through a proxy adding {r['rtt'] * 1e3:.0f} ms of round trip: client "
                     f"TTFT {protocol.Spread(**r['client']).ms(1)}, of it "
                     f"{protocol.Spread(**r['between']).ms(1)} outside the engine")
    return lines + ([net["warning"]] if net.get("warning") else [])
