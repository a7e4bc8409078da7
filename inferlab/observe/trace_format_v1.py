"""Trace format version 1 (release 0.1.0), frozen, and its migration to the current form.

A v1 file holds a top-level ``requests`` table (prompt_len, arrival, prompt_text) beside the
steps, and request events without ``info``. Every other part of a v1 step is the same as in
the current format, so those structs are shared; a later version that changes one of them
must first copy its old definition here, so that v1 files keep loading exactly as before.
"""
from __future__ import annotations

from typing import Any, Union

import msgspec

from ..core.events import RequestEventKind
from .trace_format import (FORMAT, VERSION, Finite, Info, NonNeg, ReqEvent, Step,
                           TraceFile)


class ReqEventV1(msgspec.Struct, forbid_unknown_fields=True):
    request_id: str
    kind: RequestEventKind
    detail: Union[str, None]


class StepV1(Step):
    request_events: list[ReqEventV1]


class RequestV1(msgspec.Struct):
    prompt_len: NonNeg = 0
    arrival: Union[Finite, None] = None
    prompt_text: str = ""


class TraceFileV1(msgspec.Struct):
    format: str
    version: int
    steps: list[StepV1]
    meta: dict[str, Any] = {}
    requests: dict[str, RequestV1] = {}


def migrate(f: TraceFileV1) -> tuple[TraceFile, dict[str, dict]]:
    """A v1 file as the current form: each request's table entry moves onto its (first)
    "queued" event (a missing arrival becomes that step's start). Also returns the entries
    that had no queued event, so that loading keeps them in ``Trace.requests``. The meta
    notes ``"format_migrated_from": 1``."""
    left = dict(f.requests)
    steps = []
    for s in f.steps:
        events = []
        for e in s.request_events:
            info = None
            r = left.pop(e.request_id, None) if e.kind == "queued" else None
            if r is not None:
                arrival = s.t_start if r.arrival is None else r.arrival
                info = Info(r.prompt_len, arrival, r.prompt_text)
            events.append(ReqEvent(e.request_id, e.kind, e.detail, info))
        fields = {k: getattr(s, k) for k in Step.__struct_fields__}
        steps.append(Step(**{**fields, "request_events": events}))
    meta = {**f.meta, "format_migrated_from": 1}
    extra = {rid: {"prompt_len": r.prompt_len, "arrival": r.arrival,
                   "prompt_text": r.prompt_text} for rid, r in left.items()}
    return TraceFile(FORMAT, VERSION, meta, steps), extra
