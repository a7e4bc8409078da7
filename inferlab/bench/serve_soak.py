"""`inferlab bench serve-soak`: a bounded load test of ``inferlab serve`` on 127.0.0.1.

    inferlab bench serve-soak                         SmolLM2, 20 clients, 5 minutes
    inferlab bench serve-soak --model tiny --clients 8 --duration 30 --out soak.json

``clients`` asyncio clients (httpx) loop over mixed requests until ``duration_s`` has passed
or ``max_requests`` were sent, whichever comes first, each request with its own timeout:
chat and completions, streamed or whole, n of 1 to 3, stop strings, greedy or seeded
sampling; ``abandon_share`` of the streams are closed after their first chunks (the server
must abort them). It reports the requests completed, abandoned and errored (by status), the
latency p50/p99 of the completed ones, the server's RSS once warmed up and at the end, the KV
blocks and requests the engine still holds afterwards, and whether every greedy answer
equals the engine's own answer to the same prompt (``check_greedy``, after the server
stopped). Nothing here judges a duration: the numbers are reported, never asserted.
"""
from __future__ import annotations

import asyncio
import gc
import json
import os
import random
import statistics
import time
from dataclasses import asdict, dataclass

PROMPTS = ["The capital of France is", "Write a haiku about the sea.",
           "List three colours of the rainbow:", "Explain what a KV cache is in one sentence.",
           "Once upon a time, in a small village,", "What is 12 times 12?",
           "Give me a tip for learning Python.", "The three laws of motion are"]
STOPS = [["."], ["\n"], [" the", "!"]]


@dataclass
class SoakConfig:
    clients: int = 20
    duration_s: float = 300.0
    abandon_share: float = 0.2        # of the streamed requests
    seed: int = 0
    warmup_s: float = 30.0            # RSS is taken as warmed up from here
    max_tokens: int = 24              # per answer (an abandoned stream asks for 4x)
    max_requests: int = 100_000       # the count bound beside the time bound
    request_timeout_s: float = 120.0


@dataclass
class Job:
    kind: str                 # "chat" | "completion"
    prompt: int               # index in PROMPTS
    stream: bool
    n: int
    stop: list | None
    greedy: bool
    abandon: bool
    max_tokens: int
    seed: int

    def body(self, model: str) -> dict:
        b = {"model": model, "max_tokens": self.max_tokens, "n": self.n, "stream": self.stream,
             "temperature": 0.0 if self.greedy else 0.8, "seed": self.seed}
        if self.stop:
            b["stop"] = self.stop
        if self.abandon:
            b["ignore_eos"] = True        # long enough to be left mid-way
        if self.kind == "chat":
            b["messages"] = [{"role": "user", "content": PROMPTS[self.prompt]}]
        else:
            b["prompt"] = PROMPTS[self.prompt]
        return b

    def key(self) -> tuple:
        """What makes a greedy answer: the same key must give the same text."""
        return self.kind, self.prompt, self.max_tokens, tuple(self.stop or ())


def make_job(rng: random.Random, cfg: SoakConfig) -> Job:
    stream = rng.random() < 0.5
    abandon = stream and rng.random() < cfg.abandon_share
    return Job(kind=rng.choice(["chat", "completion"]), prompt=rng.randrange(len(PROMPTS)),
               stream=stream, n=rng.choice([1, 1, 2, 3]),
               stop=rng.choice(STOPS) if rng.random() < 0.3 else None,
               greedy=rng.random() < 0.7, abandon=abandon,
               max_tokens=cfg.max_tokens * (4 if abandon else 1), seed=rng.randrange(1 << 30))


async def send(http, url: str, model: str, job: Job) -> list[str] | None:
    """One request; its choices' texts, or None for an abandoned stream."""
    route = "/chat/completions" if job.kind == "chat" else "/completions"
    if not job.stream:
        r = await http.post(url + route, json=job.body(model))
        r.raise_for_status()
        return [c["message"]["content"] if job.kind == "chat" else c["text"]
                for c in sorted(r.json()["choices"], key=lambda c: c["index"])]
    texts = [""] * job.n
    chunks = 0
    async with http.stream("POST", url + route, json=job.body(model)) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            data = json.loads(line[6:])
            if "error" in data:
                raise RuntimeError(f"error event: {data['error']['message']}")
            for c in data["choices"]:
                texts[c["index"]] += (c["delta"].get("content") or "") if job.kind == "chat" \
                    else c["text"]
            chunks += 1
            if job.abandon and chunks >= 3:
                return None                   # leaving the block closes the connection
    return texts


def rss_bytes(pid: int | None = None) -> int:
    import psutil
    return psutil.Process(pid or os.getpid()).memory_info().rss


async def soak(url: str, model: str, cfg: SoakConfig, pid: int | None = None) -> dict:
    """Run the clients against ``url`` (".../v1"); return counts, latencies, RSS samples
    and the greedy answers seen (``answers``: key -> texts)."""
    import httpx
    counts = {"sent": 0, "completed": 0, "abandoned": 0, "errored": 0}
    errors: dict[str, int] = {}
    latencies: list[float] = []
    answers: dict[tuple, set] = {}
    rss = {"after_warmup": None, "peak": 0}
    start = time.monotonic()
    deadline = start + cfg.duration_s

    async def client(i: int, http) -> None:
        rng = random.Random(cfg.seed * 100_003 + i)
        while time.monotonic() < deadline and counts["sent"] < cfg.max_requests:
            job = make_job(rng, cfg)
            counts["sent"] += 1
            t0 = time.perf_counter()
            try:
                texts = await send(http, url, model, job)
            except (httpx.HTTPError, RuntimeError, ValueError) as e:
                counts["errored"] += 1
                name = (f"HTTP {e.response.status_code}" if isinstance(e, httpx.HTTPStatusError)
                        else type(e).__name__)
                errors[name] = errors.get(name, 0) + 1
                continue
            if texts is None:
                counts["abandoned"] += 1
                continue
            counts["completed"] += 1
            latencies.append(time.perf_counter() - t0)
            if job.greedy:
                answers.setdefault(job.key(), set()).update(texts)
                counts["greedy choices"] = counts.get("greedy choices", 0) + len(texts)

    async def watch_rss() -> None:
        while True:
            now = rss_bytes(pid)
            rss["peak"] = max(rss["peak"], now)
            if rss["after_warmup"] is None and time.monotonic() - start >= cfg.warmup_s:
                rss["after_warmup"] = now
            await asyncio.sleep(1.0)

    limits = httpx.Limits(max_connections=cfg.clients + 4)
    async with httpx.AsyncClient(timeout=cfg.request_timeout_s, limits=limits) as http:
        watcher = asyncio.ensure_future(watch_rss())
        try:   # bounded twice over: each request's timeout, and the whole run's
            await asyncio.wait_for(asyncio.gather(*(client(i, http) for i in range(
                cfg.clients))), cfg.duration_s + 2 * cfg.request_timeout_s)
        finally:
            watcher.cancel()
    lat = sorted(latencies)
    return {"counts": counts, "errors": errors, "seconds": time.monotonic() - start,
            "latency_s": {"p50": _pct(lat, 50), "p99": _pct(lat, 99)},
            "rss": rss, "answers": answers}


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def check_greedy(answers: dict, engine) -> dict:
    """Each greedy key's texts against ``engine.generate`` of the same prompt (one text per
    key: every choice, stream or not, must equal it)."""
    import inferlab as il
    keys = sorted(answers)
    prompts = [[{"role": "user", "content": PROMPTS[p]}] if kind == "chat" else PROMPTS[p]
               for kind, p, _, _ in keys]
    params = [il.SamplingParams(max_tokens=m, temperature=0.0, stop=list(stop) or None)
              for _, _, m, stop in keys]
    outs = engine.generate(prompts, params, use_tqdm=False) if keys else []
    bad = [{"key": list(k), "engine": o.text, "served": sorted(answers[k])}
           for k, o in zip(keys, outs) if answers[k] != {o.text}]
    return {"keys": len(keys), "mismatched": len(bad), "examples": bad[:5]}


def wait_idle(srv, timeout_s: float) -> bool:
    """Until the server holds no request (aborts of abandoned streams land between two
    steps); False if it still holds one after ``timeout_s``."""
    end = time.monotonic() + timeout_s
    while srv.driver.num_open or srv.engine.has_unfinished_requests():
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def run(srv, cfg: SoakConfig, reference=None) -> dict:
    """Soak a running in-process server ``srv`` (inferlab.serve.start), then wait for it to be
    idle and read what its engine still holds; greedy answers are checked against
    ``reference`` (an engine with the same weights; None: ``srv.engine`` after ``srv.stop``)."""
    res = asyncio.run(soak(srv.url, srv.model_name, cfg))
    res["idle"] = wait_idle(srv, cfg.request_timeout_s)
    gc.collect()
    res["rss"]["end"] = rss_bytes()
    warm = res["rss"]["after_warmup"]
    res["rss"]["growth"] = None if not warm else res["rss"]["end"] / warm - 1
    st = srv.engine.stats()
    res["left"] = {"kv_blocks_used": st.kv_blocks_used, "running": st.num_running,
                   "waiting": st.num_waiting, "open_jobs": srv.driver.num_open}
    if reference is None:
        srv.stop()
        reference = srv.engine
    res["greedy"] = check_greedy(res.pop("answers"), reference)
    res["config"] = asdict(cfg)
    return res


def main(model: str | None = None, clients: int = 20, duration_s: float = 300.0,
         abandon_share: float = 0.2, seed: int = 0, out=print) -> dict:
    """The CLI: serve ``model`` (None: SmolLM2) on a free loopback port, soak it, report."""
    import inferlab as il
    import inferlab.serve
    eng = il.Engine(model, max_num_seqs=32) if model else il.Engine(max_num_seqs=32)
    cfg = SoakConfig(clients=clients, duration_s=duration_s, abandon_share=abandon_share,
                     seed=seed, warmup_s=min(60.0, duration_s / 3))
    srv = inferlab.serve.start(eng, port=0)
    try:
        res = run(srv, cfg)
    finally:
        srv.stop()
    c, r, lat = res["counts"], res["rss"], res["latency_s"]
    out(f"{eng.model_name}: {clients} clients for {duration_s:g} s (seed {seed}) at {srv.url}")
    out(f"requests: {c['sent']} sent, {c['completed']} completed, {c['abandoned']} abandoned "
        f"mid-stream, {c['errored']} errored {res['errors'] or ''}")
    if lat["p50"] is not None:
        out(f"latency of the completed: p50 {lat['p50']:.3f} s, p99 {lat['p99']:.3f} s")
    if r["after_warmup"]:
        out(f"RSS: {r['after_warmup'] / 2**20:.0f} MiB after warm-up ({cfg.warmup_s:g} s), "
            f"{r['end'] / 2**20:.0f} MiB at the end ({r['growth']:+.1%}), peak "
            f"{r['peak'] / 2**20:.0f} MiB")
    out(f"left in the engine: {res['left']}")
    g = res["greedy"]
    out(f"greedy answers: {c.get('greedy choices', 0)} choices of {g['keys']} prompts, "
        f"{g['mismatched']} differ from the engine's own")
    return res
