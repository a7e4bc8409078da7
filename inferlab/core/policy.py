"""Scheduling policy: the order waiting requests are admitted in, and who yields memory.

* ``fcfs``: arrival order. A preempted request goes back to the front of the queue; when
  the KV cache runs out, the most recently admitted running request yields.
* ``priority`` (as vLLM's): by ``(priority, arrival time)``, lower priority value first,
  earlier arrival (then earlier ``add``) breaking ties. A preempted request goes back in its
  place in that order; the running request that sorts last (largest priority value, latest
  arrival) yields. A waiting request may also displace running requests that sort after it.
"""
from __future__ import annotations

import bisect
import itertools
from collections import deque

from ..errors import InvalidInputError, InvalidTypeError
from .request import Request


def check_priority(priority, policy: str) -> None:
    """A request's priority: an int, and non-zero only under the "priority" policy (vLLM)."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidTypeError(f"priority must be an int, got {type(priority).__name__} "
                               f"{priority!r}")
    if priority and policy != "priority":
        raise InvalidInputError(f"priority={priority} needs Engine(scheduling_policy="
                                f"'priority'); this engine schedules {policy!r}")


def priorities_for(priority, n: int) -> list:
    """One priority for ``n`` prompts, or a list with one per prompt."""
    prios = list(priority) if isinstance(priority, (list, tuple)) else [priority] * n
    if len(prios) != n:
        raise InvalidInputError(f"got {len(prios)} priorities for {n} prompts")
    return prios


class FCFSQueue:
    """Waiting requests in arrival order."""

    def __init__(self):
        self._q: deque[Request] = deque()

    def add(self, req: Request) -> None:
        self._q.append(req)

    def prepend(self, req: Request) -> None:
        """A preempted request: first in line again."""
        self._q.appendleft(req)

    def peek(self) -> Request:
        return self._q[0]

    def pop(self) -> Request:
        return self._q.popleft()

    def remove(self, req: Request) -> None:
        self._q.remove(req)

    def forget(self, req: Request) -> None:
        """The request has finished (it may have been running, not waiting)."""

    def victim(self, running: list[Request]) -> Request:
        """The running request that yields its KV blocks when the cache is full."""
        return running[-1]

    def may_displace(self, waiting: Request, running: Request) -> bool:
        """May ``waiting``, not fitting the cache, preempt ``running`` to get in?"""
        return False

    def __len__(self) -> int:
        return len(self._q)

    def __iter__(self):
        return iter(self._q)

    def __contains__(self, req) -> bool:
        return req in self._q


class PriorityQueue(FCFSQueue):
    """Waiting requests sorted by (priority, arrival time, order of ``add``)."""

    def __init__(self):
        self._q: list[Request] = []
        self._order: dict[str, int] = {}
        self._counter = itertools.count()

    def key(self, req: Request) -> tuple:
        return req.priority, req.arrival_time, self._order[req.request_id]

    def add(self, req: Request) -> None:
        self._order.setdefault(req.request_id, next(self._counter))
        bisect.insort(self._q, req, key=self.key)

    def prepend(self, req: Request) -> None:
        self.add(req)                      # back in its own place, not ahead of better ones

    def pop(self) -> Request:
        return self._q.pop(0)

    def forget(self, req: Request) -> None:
        self._order.pop(req.request_id, None)

    def victim(self, running: list[Request]) -> Request:
        return max(running, key=self.key)

    def may_displace(self, waiting: Request, running: Request) -> bool:
        return self.key(running) > self.key(waiting)


def make_queue(policy: str) -> FCFSQueue:
    return PriorityQueue() if policy == "priority" else FCFSQueue()
