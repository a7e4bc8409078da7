"""Our requests to a vLLM server: each one a thread reading its token stream, every token's
arrival timed, the results kept (token ids, text, arrival times, cached prompt tokens).

The assembler gets each token as it arrives; ``VllmResult`` keeps the exact per-request
numbers (vLLM's own count of cached prompt tokens comes with the stream's final usage), for
comparisons that must not depend on how tokens were matched to steps.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from ...core.events import RequestInfo
from ..wire.sse import StreamError, stream_completion
from .tokens import TokenArrival


@dataclass
class VllmResult:
    request_id: str
    prompt_token_ids: list[int]
    sent: float                                    # time.time() when the request went out
    prompt_text: str | None = None
    token_ids: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    cached_tokens: int | None = None               # from vLLM's usage (prompt_tokens_details)
    error: str | None = None
    done: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def text(self) -> str:
        return "".join(self.texts)

    @property
    def ttft(self) -> float | None:
        return self.arrivals[0] - self.sent if self.arrivals else None

    @property
    def itl(self) -> list[float]:
        a = self.arrivals
        return [b - x for x, b in zip(a, a[1:])]


class RequestStreams:
    """Sends requests and feeds their tokens to ``on_token(tok)`` / ``on_done(...)``."""

    def __init__(self, url: str, model: str, on_queued, on_token, on_done, clock=time.time):
        self.url, self.model = url, model
        self.on_queued, self.on_token, self.on_done, self.clock = on_queued, on_token, \
            on_done, clock
        self.results: dict[str, VllmResult] = {}
        self._n = 0
        self._threads: list[threading.Thread] = []

    def submit(self, ids: list[int], rid: str | None, prompt_text: str | None,
               body: dict) -> str:
        self._n += 1
        rid = rid or f"vllm-{self._n}"
        if rid in self.results:
            raise ValueError(f"request id {rid!r} was used already")
        res = self.results[rid] = VllmResult(rid, list(ids), self.clock(), prompt_text)
        self.on_queued(rid, RequestInfo(len(ids), res.sent, prompt_text))
        body = {"model": self.model, "prompt": list(ids), "request_id": rid, **body}
        th = threading.Thread(target=self._run, args=(res, body), daemon=True,
                              name=f"inferlab-vllm-{rid}")
        self._threads.append(th)
        th.start()
        return rid

    def _run(self, res: VllmResult, body: dict) -> None:
        rid = res.request_id
        try:
            for ch in stream_completion(self.url, body, clock=self.clock):
                n = len(ch.token_ids)
                for j, tid in enumerate(ch.token_ids):
                    text = ch.text if j == 0 else ""
                    fin = ch.finish_reason if j == n - 1 else None
                    res.token_ids.append(tid)
                    res.texts.append(text)
                    res.arrivals.append(ch.t)
                    self.on_token(TokenArrival(rid, tid, text, len(res.token_ids) - 1, ch.t,
                                               fin))
                if ch.finish_reason:
                    res.finish_reason = ch.finish_reason
                    if not n:
                        self.on_done(rid, "finished", ch.finish_reason, ch.t)
                details = (ch.usage or {}).get("prompt_tokens_details") or {}
                if details.get("cached_tokens") is not None:
                    res.cached_tokens = int(details["cached_tokens"])
            if res.finish_reason is None:
                raise StreamError("the stream ended without a finish reason")
        except (StreamError, ValueError) as e:
            res.error = str(e)
            self.on_done(rid, "aborted", f"stream failed: {e}", self.clock())
        finally:
            res.done.set()

    def wait(self, rids=None, timeout: float | None = None) -> bool:
        """Wait for these requests (all by default); False on timeout."""
        end = None if timeout is None else time.monotonic() + timeout
        for rid in (rids if rids is not None else list(self.results)):
            left = None if end is None else max(0.0, end - time.monotonic())
            if not self.results[rid].done.wait(left):
                return False
        return True
