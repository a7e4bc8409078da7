"""One token of one of our requests, as it arrived: ``request_streams`` makes them from the
server's stream, the ``assembler`` places them in steps."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class TokenArrival:
    rid: str
    token_id: int
    text: str
    index: int                      # the token's position in the request's output
    t: float                        # time.time() when it arrived
    finish: str | None = None       # the finish reason, on a request's last token
