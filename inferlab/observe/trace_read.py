"""Reading a trace file of any supported version: its header first (format, version), then
the current schema (trace_format) or an old one migrated (trace_format_v1), then the checks
the schema alone cannot make. One error type, naming the field's path and what was expected.
"""
from __future__ import annotations

import msgspec

from ..errors import TraceFormatError
from .trace_format import (FORMAT, Header, TraceFile, VERSION, check_file, describe_error, request_entry, step_from_file)
from .trace_format_v1 import TraceFileV1, migrate


def from_file(data, source: str = "trace"):
    """Decode a trace file (its bytes, or its already-parsed JSON value) of any supported
    version: returns ``(meta, requests, records)``. Raises TraceFormatError naming the
    problem (the field's path and what was expected) for foreign, newer or malformed data."""
    raw = isinstance(data, (bytes, bytearray, memoryview))

    def decode(typ):
        return msgspec.json.decode(data, type=typ) if raw else msgspec.convert(data, typ)
    try:
        head = decode(Header)
    except msgspec.ValidationError:         # (a DecodeError too: caught first)
        head = None
    except msgspec.DecodeError as e:
        raise TraceFormatError(f"{source} is not valid JSON ({e}); inferlab traces are JSON "
                               "files written by Trace.save()") from None
    if head is None or head.format != FORMAT:
        raise TraceFormatError(f"{source} is not an inferlab trace (expected a JSON object "
                               f"with \"format\": \"{FORMAT}\")")
    v = head.version
    if not isinstance(v, int) or isinstance(v, bool):
        raise TraceFormatError(f"{source} has no integer \"version\" (got {v!r})")
    if v > VERSION:
        raise TraceFormatError(f"{source} is trace format version {v}, newer than this "
                               f"inferlab reads (up to {VERSION}); upgrade inferlab")
    if v < 1:
        raise TraceFormatError(f"{source} has an invalid trace format version {v}")
    try:
        extra: dict[str, dict] = {}
        if v == 1:
            f, extra = migrate(decode(TraceFileV1))
        else:
            f = decode(TraceFile)
        problem = check_file(f)
    except msgspec.ValidationError as e:
        problem = describe_error(e)
    if problem is not None:
        path, what = problem
        raise TraceFormatError(f"{source} (trace format v{v}) is malformed at {path}: {what}")
    records = [step_from_file(s) for s in f.steps]
    requests = {}
    for rec in records:
        for e in rec.request_events:
            if e.kind == "queued" and e.info is not None:
                requests[e.request_id] = request_entry(e.info)
    return f.meta, {**requests, **extra}, records
