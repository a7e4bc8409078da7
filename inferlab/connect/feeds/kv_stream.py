"""Subscribe to vLLM's KV cache events on one or more endpoints (one per data-parallel rank),
in sequence order, asking the replay socket for what was missed.

Each rank's publisher numbers its messages 0, 1, 2, ... (the 8-byte seq). Per endpoint we keep
the last seq delivered:

    seq == last + 1     deliver
    seq >  last + 1     a gap: ask that rank's replay socket (vLLM's ROUTER: send the first
                        missing seq, receive [topic, seq, payload] ... until seq -1) for the
                        missing ones and deliver them first; without a replay endpoint, or when
                        its buffer no longer has them, warn how many were lost
    seq <= last         out of order or repeated: warn and drop (the tree already has it)
    seq == 0 after > 0  the publisher restarted: warn, and deliver as a fresh start

Joining a running server (the first seq is not 0) replays the earlier messages when a replay
endpoint is given, so the view starts from vLLM's current cache; else it notes what it missed.
A malformed message is dropped with a warning; nothing here raises on bad input.

ZMQ: vLLM's publisher BINDs ipc:// and tcp://*:N endpoints and CONNECTs to any other tcp
address, in which case we must bind: ``bind=True``. Data-parallel ranks publish on consecutive
ports (tcp://host:5557, :5558, ...; vLLM offsets the port by the rank, and refuses ipc:// for
ranks > 0): pass one endpoint per rank, in rank order.
"""
from __future__ import annotations

import zmq

from ..wire.kv_events import END_SEQ, FrameError, KVBatch, decode_frame

REPLAY_TIMEOUT_MS = 1000


def rank_endpoints(base: str, num_ranks: int) -> list[str]:
    """tcp://host:5557 and 3 ranks -> [tcp://host:5557, tcp://host:5558, tcp://host:5559]."""
    if num_ranks <= 1:
        return [base]
    head, _, port = base.rpartition(":")
    if not base.startswith("tcp://") or not port.isdigit():
        raise ValueError(f"data-parallel ranks need tcp://host:port endpoints, got {base!r}")
    return [f"{head}:{int(port) + r}" for r in range(num_ranks)]


class KVSubscriber:
    def __init__(self, ctx: zmq.Context, endpoints, replay=None, topic: str = "kv",
                 warn=lambda kind, msg: None, bind: bool = False):
        self.ctx, self.warn = ctx, warn
        self.endpoints = list(endpoints)
        replay = list(replay or [])
        self.replay_endpoints = replay + [None] * (len(self.endpoints) - len(replay))
        self.topic = topic.encode()
        self.subs: list[zmq.Socket] = []
        self.last: list[int | None] = [None] * len(self.endpoints)
        self.counts = {"batches": 0, "replayed": 0, "lost": 0, "malformed": 0,
                       "out_of_order": 0, "restarts": 0}
        for ep in self.endpoints:
            s = ctx.socket(zmq.SUB)
            s.setsockopt(zmq.SUBSCRIBE, self.topic)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.RCVHWM, 100_000)
            (s.bind if bind else s.connect)(ep)
            self.subs.append(s)

    def close(self) -> None:
        for s in self.subs:
            s.close(0)
        self.subs = []

    def receive(self, i: int) -> list[tuple[int, KVBatch]]:
        """Read every waiting message of endpoint ``i``; (rank, batch) in seq order."""
        out: list[tuple[int, KVBatch]] = []
        s = self.subs[i]
        while True:
            try:
                parts = s.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return out
            out.extend(self._accept(i, parts))

    def _decode(self, i: int, parts) -> KVBatch | None:
        try:
            return decode_frame(parts)
        except FrameError as e:
            self.counts["malformed"] += 1
            self.warn("malformed", f"KV events from {self.endpoints[i]}: a malformed message "
                                   f"was dropped ({e})")
            return None

    def _accept(self, i: int, parts) -> list[tuple[int, KVBatch]]:
        b = self._decode(i, parts)
        if b is None:
            return []
        if b.topic != self.topic and self.topic:
            return []
        last = self.last[i]
        out = []
        if last is not None and b.seq == 0 and last > 0:
            self.counts["restarts"] += 1
            self.warn("restart", f"KV events from {self.endpoints[i]}: the publisher restarted "
                                 f"(seq went from {last} back to 0); a fresh start")
        elif last is not None and b.seq <= last:
            self.counts["out_of_order"] += 1
            self.warn("out_of_order", f"KV events from {self.endpoints[i]}: seq {b.seq} arrived "
                                      f"after {last} (out of order or repeated): dropped")
            return []
        elif b.seq > (last if last is not None else -1) + 1:
            out.extend(self._fill_gap(i, (last if last is not None else -1) + 1, b.seq))
        self.last[i] = b.seq
        self.counts["batches"] += 1
        out.append((self._rank(i, b), b))
        return out

    def _rank(self, i: int, b: KVBatch) -> int:
        return i        # endpoints are given in rank order (vLLM's own rank is in b.rank)

    def _fill_gap(self, i: int, first: int, upto: int) -> list[tuple[int, KVBatch]]:
        """Batches first..upto-1 from the replay socket, in order; warns about the rest."""
        got = self._replay(i, first, upto) if self.replay_endpoints[i] else []
        have = {b.seq for _, b in got}
        missing = [s for s in range(first, upto) if s not in have]
        self.counts["replayed"] += len(got)
        if missing:
            self.counts["lost"] += len(missing)
            joined = self.last[i] is None
            why = ("no replay endpoint was given" if not self.replay_endpoints[i] else
                   "the replay buffer no longer had them, or replay did not answer")
            what = (f"joined at seq {upto}: {len(missing)} earlier batches of KV events not seen"
                    if joined else f"{len(missing)} batches of KV events lost "
                                   f"(seq {missing[0]}..{missing[-1]})")
            self.warn("joined" if joined else "gap",
                      f"KV events from {self.endpoints[i]}: {what} ({why}); the cache view may "
                      "lack blocks stored or evicted then")
        for _, b in got:
            self.last[i] = b.seq
        return got

    def _replay(self, i: int, first: int, upto: int) -> list[tuple[int, KVBatch]]:
        d = self.ctx.socket(zmq.DEALER)
        d.setsockopt(zmq.LINGER, 0)
        out = []
        try:
            d.connect(self.replay_endpoints[i])
            d.send_multipart([b"", first.to_bytes(8, "big")])
            while d.poll(REPLAY_TIMEOUT_MS):
                msg = d.recv_multipart()
                if len(msg) == 4 and msg[0] == b"":
                    msg = msg[1:]
                if len(msg) == 3 and len(msg[1]) == 8 and \
                        int.from_bytes(msg[1], "big", signed=True) == END_SEQ:
                    break
                b = self._decode(i, msg)
                if b is not None and first <= b.seq < upto and b.topic == self.topic:
                    out.append((self._rank(i, b), b))
        except zmq.ZMQError as e:
            self.warn("replay", f"KV event replay from {self.replay_endpoints[i]} failed: {e}")
        finally:
            d.close(0)
        out.sort(key=lambda rb: rb[1].seq)
        return out
