"""``--record-requests PATH``: the server's accepted traffic as a request log.

One JSON line per engine request the server accepted (a request refused by validation or by
the engine writes nothing), appended and flushed as it is accepted, in the format that
``inferlab.sim.request_log.workload_from_log`` replays:

    {"id": "chatcmpl-…", "arrival_s": 1.234, "messages": [...], "max_tokens": 2048}
    {"id": "cmpl-…", "arrival_s": 1.9, "prompt": "Once upon a time", "max_tokens": 16}

``arrival_s``: when its HTTP request reached the handler, in seconds from the server's start;
``messages`` as received (content parts joined, as the engine reads them) with the request's
``tools`` beside them when it had any; ``prompt`` as received (text or token ids);
``max_tokens`` as the engine used it (a chat request without a cap gets the context length);
``ignore_eos: true`` when the client asked for it; ``id`` the response's id. A request with
``n`` choices, or a batch of prompts, is that many engine requests, so that many lines
(their ids suffixed ``-0``, ``-1``, ...). A file that already holds requests is continued:
this server's arrivals count from the last one there, so the file stays one log in order.
"""
from __future__ import annotations

import json
import logging
import pathlib
import threading
import time

from ..errors import InvalidInputError, OutputWriteError

log = logging.getLogger("inferlab.serve")
SUFFIXES = (".jsonl", ".ndjson", ".json")


def last_arrival(path: pathlib.Path) -> float:
    """The last ``arrival_s`` in an existing log (0 for a missing or empty file)."""
    if path.suffix.lower() not in SUFFIXES:
        raise InvalidInputError(f"--record-requests {path}: the server writes JSON Lines; "
                                f"name the file with one of {', '.join(SUFFIXES)}")
    if not path.exists():
        return 0.0
    try:
        lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidInputError(f"--record-requests {path}: cannot read it to append ({e})") \
            from None
    if not lines:
        return 0.0
    try:
        t = json.loads(lines[-1])["arrival_s"]
        if isinstance(t, bool) or not isinstance(t, (int, float)) or t < 0:
            raise TypeError(t)
    except (ValueError, KeyError, TypeError):
        raise InvalidInputError(f"--record-requests {path}: this file is not a request log "
                                "(its last line has no arrival_s); give a new file") from None
    return float(t)


class RequestRecorder:
    """Appends accepted requests to ``path``; ``start`` sets the clock's zero."""

    def __init__(self, path):
        self.path = pathlib.Path(path)
        self.offset = last_arrival(self.path)
        try:
            self._f = open(self.path, "a", encoding="utf-8")
        except OSError as e:
            raise OutputWriteError(f"--record-requests {self.path}: cannot write it "
                                   f"({e.strerror or e})", e.errno, str(self.path)) from None
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self.num_recorded = 0
        self._failed = False

    def start(self) -> None:
        self._t0 = time.monotonic()

    def arrival_s(self, monotonic: float) -> float:
        return round(self.offset + max(0.0, monotonic - self._t0), 6)

    def record(self, arrived: float, answer_id: str, kind: str, req, prompts: list,
               params: list) -> None:
        """The lines of one accepted HTTP request (``prompts``/``params``: one per engine
        request, as the driver got them)."""
        base = {"arrival_s": self.arrival_s(arrived)}
        if kind == "chat":
            base["messages"] = [m.as_dict(i) for i, m in enumerate(req.messages)]
            if req.tools:
                base["tools"] = [t.model_dump(exclude_none=True) for t in req.tools]
            sources = [None] * len(prompts)
        else:
            sources = [p for p in req.prompts() for _ in range(req.n)]
        lines = []
        for i, (src, sp) in enumerate(zip(sources, params)):
            row = {"id": answer_id if len(params) == 1 else f"{answer_id}-{i}", **base}
            if src is not None:
                row["prompt"] = src
            row["max_tokens"] = sp.max_tokens
            if sp.ignore_eos:
                row["ignore_eos"] = True
            lines.append(json.dumps(row, ensure_ascii=False) + "\n")
        with self._lock:
            if self._f.closed:
                return
            try:
                for line in lines:
                    self._f.write(line)
                    self._f.flush()
                self.num_recorded += len(lines)
            except OSError as e:             # the answer goes on; say it once
                if not self._failed:
                    log.error("inferlab serve: recording requests to %s failed (%s); "
                              "requests are no longer recorded", self.path, e)
                self._failed = True

    def close(self) -> None:
        with self._lock:
            if not self._f.closed:
                self._f.close()
