"""Subscribe to inferlab's per-step reports (``wire.step_reports``) from the plugin inside a
vLLM server, checking each message and its sequence number; and, for a server without the
plugin, the cache's shape from vLLM's Prometheus /metrics (``vllm:cache_config_info``).

A malformed report is dropped with a warning; a gap in ``seq`` means reports were lost (the
timeline lacks those steps); a server whose vLLM is not the version the plugin's field reads
were checked on (``step_reports.PINNED_VLLM``) is named once.
"""
from __future__ import annotations

import re
import time

import msgspec
import zmq

from ..wire import step_reports
from ..wire.sse import StreamError, get_text


class ReportSubscriber:
    def __init__(self, ctx: zmq.Context, endpoints, warn=lambda kind, msg: None):
        self.endpoints, self.warn = list(endpoints), warn
        self.subs: list[zmq.Socket] = []
        self.last: list[int | None] = [None] * len(self.endpoints)
        self.counts = {"reports": 0, "reports_lost": 0, "reports_bad": 0}
        self.heard = 0.0                      # time.time() of the last message
        for ep in self.endpoints:
            s = ctx.socket(zmq.SUB)
            s.setsockopt(zmq.SUBSCRIBE, step_reports.TOPIC)
            s.setsockopt(zmq.LINGER, 0)
            s.connect(ep)
            self.subs.append(s)

    def close(self) -> None:
        for s in self.subs:
            s.close(0)
        self.subs = []

    def receive(self, i: int, now: float) -> list:
        """Every waiting message of endpoint ``i``, checked: StepReport / EngineInfo."""
        out = []
        while True:
            try:
                parts = self.subs[i].recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return out
            try:
                if len(parts) != 2:
                    raise ValueError(f"{len(parts)} parts, expected 2 (topic, payload)")
                msg = step_reports.decode(parts[1])
            except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as e:
                self.counts["reports_bad"] += 1
                self.warn("bad_report", f"a malformed step report was dropped ({e})")
                continue
            self.heard = now
            last = self.last[i]
            if last is not None and msg.seq > last + 1:
                self.counts["reports_lost"] += msg.seq - last - 1
                self.warn("reports_lost", f"{msg.seq - last - 1} step reports lost (seq "
                          f"{last + 1}..{msg.seq - 1}): the timeline lacks those steps")
            if last is None or msg.seq > last or msg.seq == 0:
                self.last[i] = msg.seq
            if isinstance(msg, step_reports.EngineInfo):
                if msg.vllm_version != step_reports.PINNED_VLLM:
                    self.warn("version", f"the server runs vLLM {msg.vllm_version}; the step "
                              "reports read vLLM internals checked on "
                              f"{step_reports.PINNED_VLLM}: some numbers may be missing")
            else:
                self.counts["reports"] += 1
            out.append(msg)


def info_from_metrics(url: str, model: str) -> step_reports.EngineInfo | None:
    """Block size and number of KV blocks from /metrics (vllm:cache_config_info)."""
    try:
        text = get_text(url, "/metrics")
    except StreamError:
        return None
    m = re.search(r"vllm:cache_config_info\{([^}]*)\}", text)
    if not m:
        return None
    labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
    info = step_reports.EngineInfo(seq=0, ts=time.time(), vllm_version="?", model=model)
    for key, name in (("block_size", "block_size"), ("num_gpu_blocks", "num_blocks")):
        if labels.get(key, "").isdigit():
            setattr(info, name, int(labels[key]))
    info.prefix_caching = labels.get("enable_prefix_caching") == "True"
    return info
