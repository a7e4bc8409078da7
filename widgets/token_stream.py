"""TokenStream: every request's output tokens as ticks on one time axis, as they come out.

The gap between ticks is the inter-token latency, the bar before a request's first tick its
time to first token; hover a tick for the token and the text around it. The one drawing
(inferlab.lab.drawings.token_stream) is the live plot, updated in place, up to the
scrubber's step; every request has its lane (the widget's box scrolls). The tokens as typed
arrays (``tok_*``) and ``requests`` stay in the kernel, for Python: the browser reads the plot.
"""
from __future__ import annotations

import traitlets as t

from inferlab.core.outputs import RequestMetrics
from inferlab.widgets._base import asset, pack
from inferlab.widgets._plot import PlotView


class TokenStream(PlotView):
    _esm = asset("common.js", "token_stream.js")
    _css = asset("common.css", "token_stream.css")
    kind = "Token stream"
    requests = t.List(t.Dict())   # id, arrival (s from t0), prompt_len, prompt, ttft
    tok_req = t.Bytes(b"")        # int32 index into requests
    tok_step = t.Bytes(b"")       # int32 step the token came out of
    tok_time = t.Bytes(b"")       # float64 seconds from t0
    tok_text = t.Bytes(b"")       # utf-8 texts joined by NUL

    def _reset(self):
        self._index: dict[str, int] = {}
        self._reqs: list[dict] = []
        self._tr, self._ts, self._tt, self._tx = [], [], [], []

    def _request(self, rid, t_seen):
        i = self._index.get(rid)
        if i is None:
            meta = self._trace.requests.get(rid, {})
            arrival = meta.get("arrival")
            arrival = t_seen if arrival is None else arrival
            i = self._index[rid] = len(self._reqs)
            self._reqs.append({"id": rid, "arrival": arrival - self.t0,
                               "prompt_len": meta.get("prompt_len", 0),
                               "prompt": (meta.get("prompt_text") or "")[-160:]})
        return i

    def _ingest(self, records):
        for j, rec in enumerate(records):
            for ev in rec.request_events:
                if ev.kind == "queued":
                    self._request(ev.request_id, rec.t_start)
            for e in rec.emitted:
                i = self._request(e.request_id, rec.t_start)
                if e.index == 0:            # the definition of TTFT lives in RequestMetrics
                    arrival = self._reqs[i]["arrival"] + self.t0
                    self._reqs[i]["ttft"] = RequestMetrics.from_times(arrival, None,
                                                                      [rec.t_end], None).ttft
                self._tr.append(i)
                self._ts.append(self._done + j)      # index in the trace
                self._tt.append(rec.t_end - self.t0)
                self._tx.append(e.text.replace("\x00", ""))

    def _sync(self):
        self.requests = [dict(r) for r in self._reqs]
        self.tok_req = pack(self._tr, "<i4")
        self.tok_step = pack(self._ts, "<i4")
        self.tok_time = pack(self._tt, "<f8")
        self.tok_text = "\x00".join(self._tx).encode("utf-8")
        self._changed()

    def rows(self, upto_step: int | None = None) -> list[dict]:
        """Per request: id, arrival, token times and texts (seconds from t0)."""
        k = self.shown_step() if upto_step is None else upto_step
        rows = [{"request_id": r["id"], "arrival": r["arrival"], "times": [], "texts": [],
                 "prompt": r["prompt"]} for r in self._reqs]
        for i, s, tt, x in zip(self._tr, self._ts, self._tt, self._tx):
            if s <= k:
                rows[i]["times"].append(tt)
                rows[i]["texts"].append(x)
        return rows

    def text(self, request_id: str) -> str:
        i = self._index[request_id]
        return "".join(x for j, x in zip(self._tr, self._tx) if j == i)

    def _spec(self, dark: bool | None = None) -> dict:
        """The token stream (inferlab.lab.drawings.token_stream) up to the scrubber's step,
        in the page's theme unless ``dark`` says."""
        from inferlab.lab.drawings.token_stream import spec
        with self._lock:
            return spec(self.rows(), title=self.title, clock=self.clock,
                        dark=self._is_dark(dark))

    def __repr__(self):
        return f"TokenStream({len(self._reqs)} requests, {len(self._tr)} tokens, " \
               f"clock={self.clock!r})"
