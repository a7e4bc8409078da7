"""Where a served request's time goes: the HTTP handler, the driver thread, the engine step,
the hand-off to the event loop and the SSE write (``inferlab serve --timing FILE``).

Off by default (nothing is timed). On, every finished request appends one JSON line to FILE:

    {"id", "stream", "prompt_tokens", "tokens", "chunks", "batch_p50", "in_order",
     "ttft_ms": {"parse", "to_driver", "queued", "first_step", "flush", "handoff", "write",
                 "total"},                      # arrival .. its first token's chunk written
     "decode_ms": {"forward", "step_other", "between_steps", "delivery_drift", "total",
                   "per_token"}}                # its first token's chunk .. its last one's

All times are ``time.monotonic`` on the server. The parts add up exactly to their total:

    ttft    parse        body read, validated, turned into engine inputs (event loop)
            to_driver    waiting for the driver thread to take it (it finishes its step first)
            queued       in the engine before the step that gave its first token (earlier
                         prefill chunks, waiting for a seat)
            first_step   that step, start to end (schedule, forward, sample, publish)
            flush        the step's end to its outputs handed to the event loop
            handoff      handed over to the handler taking them off its queue (event loop busy,
                         the GIL)
            write        its chunks formatted and given to the socket
    decode  forward      the forward passes of the steps between its first and last token
            step_other   the rest of those steps (schedule, sample, detokenize, publish)
            between_steps  the driver between two steps (commands, flush)
            delivery_drift  last chunk's (flush + handoff + write) less the first one's

``inferlab bench serve --timing`` runs the server with it under vLLM's client and reports
the medians beside the client's TTFT and TPOT: what the server cannot account for is the
client's side (socket, parsing, its own event loop).
"""
from __future__ import annotations

import json
import statistics
import threading
import time

clock = time.monotonic                # what every timestamp reads (a test may jump it)


def now() -> float:
    return clock()


KEEP_STEPS = 100_000                  # steps remembered (a request spans far fewer)
TTFT_PARTS = ("parse", "to_driver", "queued", "first_step", "flush", "handoff", "write")
DECODE_PARTS = ("forward", "step_other", "between_steps", "delivery_drift")


class RequestTimes:
    """One HTTP request's timestamps (its Job carries it)."""
    __slots__ = ("arrived", "submitted", "added", "chunks", "prompt_tokens", "stream")

    def __init__(self, arrived: float, stream: bool):
        self.arrived, self.stream = arrived, stream
        self.submitted = self.added = None
        self.chunks: list[tuple[int, float, float]] = []    # (step, taken off queue, written)
        self.prompt_tokens = 0


class ServeTiming:
    """The driver thread reports steps (``step_done``, ``flushed``); handlers report their
    requests (``RequestTimes``) and ``finish`` each, which writes its line."""

    def __init__(self, path: str):
        self.path = path
        self._file = open(path, "a", encoding="utf-8")        # noqa: SIM115 - closed in close()
        self._lock = threading.Lock()
        self._steps: dict[int, list] = {}     # step -> [start, end, forward s, seqs, flushed]
        self._last: tuple[float, int] = (0.0, 0)
        self._unsubscribe = None

    # --- the driver thread ---------------------------------------------------------------
    def attach(self, engine) -> None:
        """Take each step's forward time and batch from the engine's step records."""
        self._unsubscribe = engine.subscribe(self._on_record)

    def _on_record(self, rec) -> None:
        self._last = (rec.wall_duration or 0.0, len(rec.batch))

    def step_done(self, step: int, start: float, end: float) -> None:
        forward, seqs = self._last
        self._last = (0.0, 0)
        self._steps[step] = [start, end, forward, seqs, end]
        if len(self._steps) > KEEP_STEPS:
            for k in sorted(self._steps)[:KEEP_STEPS // 2]:
                del self._steps[k]

    def flushed(self, step: int, t: float | None = None) -> None:
        s = self._steps.get(step)
        if s is not None:
            s[4] = now() if t is None else t

    # --- the event loop ------------------------------------------------------------------
    def finish(self, t: RequestTimes, request_id: str, tokens: int) -> None:
        line = self.breakdown(t, request_id, tokens)
        if line is None:
            return
        with self._lock:
            if not self._file.closed:
                self._file.write(json.dumps(line) + "\n")
                self._file.flush()

    def breakdown(self, t: RequestTimes, request_id: str, tokens: int) -> dict | None:
        """The request's line (see the module's docstring); None when it wrote no chunk."""
        steps = [(c, self._steps.get(c[0])) for c in t.chunks]
        if not steps or t.added is None or any(s is None for _, s in steps):
            return None
        (step0, got0, sent0), s0 = steps[0]
        ttft = {"parse": t.submitted - t.arrived, "to_driver": t.added - t.submitted,
                "queued": s0[0] - t.added, "first_step": s0[1] - s0[0],
                "flush": s0[4] - s0[1], "handoff": got0 - s0[4], "write": sent0 - got0}
        ttft["total"] = sent0 - t.arrived
        line = {"id": request_id, "stream": t.stream, "prompt_tokens": t.prompt_tokens,
                "tokens": tokens, "chunks": len(steps), "ttft_ms": _ms(ttft)}
        in_order = all(v >= 0 for v in ttft.values())
        (step1, got1, sent1), s1 = steps[-1]
        span = [self._steps.get(k) for k in range(step0 + 1, step1 + 1)]
        if len(steps) > 1 and all(s is not None for s in span):
            fwd = sum(s[2] for s in span)
            total = sum(s[1] - s[0] for s in span)
            dec = {"forward": fwd, "step_other": total - fwd,
                   "between_steps": (s1[1] - s0[1]) - total,
                   "delivery_drift": (sent1 - s1[1]) - (sent0 - s0[1])}
            dec["total"] = sent1 - sent0
            dec["per_token"] = dec["total"] / max(tokens - 1, 1)    # vLLM's TPOT's count
            line["decode_ms"] = _ms(dec)
            line["batch_p50"] = statistics.median(s[3] for s in span)
            in_order = in_order and min(fwd, total - fwd, dec["between_steps"]) >= 0
        line["in_order"] = in_order          # every part >= 0: the events came in their order
        return line

    def close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        with self._lock:
            self._file.close()


def _ms(parts: dict) -> dict:
    return {k: round(v * 1e3, 3) for k, v in parts.items()}


def summarize(lines: list[dict]) -> dict:
    """The median of each part over a run's requests (streamed ones with a decode part), and
    the parts of the slowest first token (``slowest_ttft_ms``: what a TTFT p99 is made of)."""
    rows = [x for x in lines if "decode_ms" in x]
    if not rows:
        return {"requests": 0}
    med = lambda key, part: round(statistics.median(r[key][part] for r in rows), 3)  # noqa: E731
    slowest = max(lines, key=lambda r: r["ttft_ms"]["total"])
    return {"requests": len(rows), "slowest_ttft_ms": slowest["ttft_ms"],
            "ttft_ms": {p: med("ttft_ms", p) for p in (*TTFT_PARTS, "total")},
            "decode_ms": {p: med("decode_ms", p) for p in (*DECODE_PARTS, "total")},
            "per_token_ms": {p: round(statistics.median(r["decode_ms"][p] / max(
                r["tokens"] - 1, 1) for r in rows), 3) for p in DECODE_PARTS},
            "tpot_ms": med("decode_ms", "per_token"),
            "batch_p50": statistics.median(r["batch_p50"] for r in rows)}


def read_lines(path: str, start: int = 0) -> tuple[list[dict], int]:
    """The lines written from byte ``start`` on, and the offset to read from next time."""
    with open(path, encoding="utf-8") as f:
        f.seek(start)
        text = f.read()
        end = f.tell()
    return [json.loads(x) for x in text.splitlines() if x.strip()], end
