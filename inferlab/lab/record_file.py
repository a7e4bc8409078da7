"""A record file: JSON with tags for what JSON lacks, gzip-compressed with no timestamp.

Tuples, numpy arrays, dict keys that are not text and traces (``inferlab.observe.trace``) keep
their types: a record read back is the data that was written, type for type, and the same data
gives the same bytes. ``records`` (a chapter's recorded run) and ``replay`` (a recorded run
replayed into the views) read and write records through this module.
"""
from __future__ import annotations

import gzip
import json
import os
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2] / "docs" / "results" / "chapters"
SUFFIX = ".json.gz"


# --- the codec: JSON with tags for tuples, arrays and non-text keys ---------------------------
def encode(o):
    import numpy as np
    if isinstance(o, dict):
        if all(isinstance(k, str) for k in o):
            return {k: encode(v) for k, v in o.items()} if "__t" not in o else \
                {"__t": "dict", "items": [[k, encode(v)] for k, v in o.items()]}
        return {"__t": "dict", "items": [[encode(k), encode(v)] for k, v in o.items()]}
    if isinstance(o, tuple):
        return {"__t": "tuple", "items": [encode(v) for v in o]}
    if isinstance(o, list):
        return [encode(v) for v in o]
    if isinstance(o, np.ndarray):
        return {"__t": "array", "dtype": str(o.dtype), "shape": list(o.shape),
                "items": o.ravel().tolist()}
    if isinstance(o, np.generic):
        return o.item()
    if o is None or isinstance(o, (bool, int, float, str)):
        return o
    from ..observe.trace import Trace
    if isinstance(o, Trace):                   # a run's steps, as its trace file's JSON
        return {"__t": "trace", "value": o.to_dict()}
    raise TypeError(f"a record keeps plain data only (dict, list, tuple, numbers, text, numpy "
                    f"arrays, traces); got {type(o).__name__}")


def decode(o):
    if isinstance(o, list):
        return [decode(v) for v in o]
    if not isinstance(o, dict):
        return o
    tag = o.get("__t")
    if tag == "tuple":
        return tuple(decode(v) for v in o["items"])
    if tag == "dict":
        return {_hashable(decode(k)): decode(v) for k, v in o["items"]}
    if tag == "trace":
        from ..observe.trace import Trace
        return Trace.from_dict(o["value"], "a record's trace")
    if tag == "array":
        import numpy as np
        return np.asarray(o["items"], dtype=o["dtype"]).reshape(o["shape"])
    return {k: decode(v) for k, v in o.items()}


def _hashable(k):
    return tuple(_hashable(v) for v in k) if isinstance(k, (list, tuple)) else k


def json_text(data) -> str:
    return json.dumps(encode(data), separators=(",", ":"))


def dumps(data) -> bytes:
    return gzip.compress(json_text(data).encode("utf-8"), compresslevel=9, mtime=0)


def loads(blob: bytes):
    return decode(json.loads(gzip.decompress(blob).decode("utf-8")))


def write(out, rec: dict) -> pathlib.Path:
    """Write a record whole or not at all (another process sees the old file or the new)."""
    out = pathlib.Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(dumps(rec))
    os.replace(tmp, out)
    return out


def read(p) -> dict:
    """A record file as written (no chapter lookup: the views' record too)."""
    return loads(pathlib.Path(p).read_bytes())
