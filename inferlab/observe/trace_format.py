"""What a saved trace may contain: every field's type and range, checked before loading.

A trace file is data from outside (another machine, another version, a hand edit), so it is
validated as strictly as user input: anything that loads can be replayed and exported.
"""
from __future__ import annotations

import math

from inferlab.errors import TraceFormatError

MAX_BLOCKS = 1 << 22        # far above any real cache; keeps a hostile file from huge arrays


class _Bad(Exception):
    pass


def _num(v, name, none_ok=False):
    if v is None and none_ok:
        return
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise _Bad(f"{name} must be a finite number, got {v!r}")


def _int(v, name, lo=0, hi=None):
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
        rng = f">= {lo}" + (f" and <= {hi}" if hi is not None else "")
        raise _Bad(f"{name} must be an int {rng}, got {v!r}")


def _str(v, name, none_ok=False, choices=None):
    if v is None and none_ok:
        return
    if not isinstance(v, str) or (choices and v not in choices):
        raise _Bad(f"{name} must be {'one of ' + str(choices) if choices else 'a string'}, "
                   f"got {v!r}")


def _list(v, name):
    if not isinstance(v, list):
        raise _Bad(f"{name} must be a list, got {type(v).__name__}")
    return v


def _dict(v, name, keys=None):
    if not isinstance(v, dict):
        raise _Bad(f"{name} must be an object, got {type(v).__name__}")
    if keys is not None and set(v) != set(keys):
        raise _Bad(f"{name} must have exactly the keys {sorted(keys)}, got {sorted(v)}")
    return v


def _step(s: dict, total_cap: int) -> None:
    from inferlab.core.events import StepRecord
    keys = StepRecord.__dataclass_fields__.keys()
    _dict(s, "step", keys)
    for k in ("t_start", "t_end", "wall_duration"):
        _num(s[k], k)
    _num(s["sim_duration"], "sim_duration", none_ok=True)
    _str(s["clock"], "clock")
    for k in ("step", "num_batched_tokens", "token_budget", "kv_blocks_used", "kv_tokens_used",
              "kv_slots_allocated", "num_running", "num_waiting"):
        _int(s[k], k)
    _int(s["kv_blocks_total"], "kv_blocks_total", 1, total_cap)
    _int(s["block_size"], "block_size", 1, 1 << 16)
    nblocks = s["kv_blocks_total"]
    for c in _list(s["batch"], "batch"):
        _dict(c, "batch[i]", ("request_id", "start", "num_tokens", "kind", "samples",
                              "num_cached"))
        _str(c["request_id"], "batch[i].request_id")
        _int(c["start"], "batch[i].start")
        _int(c["num_tokens"], "batch[i].num_tokens", 1)
        _int(c["num_cached"], "batch[i].num_cached")
        _str(c["kind"], "batch[i].kind", choices=("prefill", "decode"))
        if not isinstance(c["samples"], bool):
            raise _Bad("batch[i].samples must be true or false")
    for e in _list(s["emitted"], "emitted"):
        _dict(e, "emitted[i]", ("request_id", "token_id", "text", "index"))
        _str(e["request_id"], "emitted[i].request_id")
        _str(e["text"], "emitted[i].text")
        _int(e["token_id"], "emitted[i].token_id")
        _int(e["index"], "emitted[i].index")
    for e in _list(s["request_events"], "request_events"):
        _dict(e, "request_events[i]", ("request_id", "kind", "detail"))
        _str(e["request_id"], "request_events[i].request_id")
        _str(e["kind"], "request_events[i].kind")
        _str(e["detail"], "request_events[i].detail", none_ok=True)
    for e in _list(s["kv_events"], "kv_events"):
        _dict(e, "kv_events[i]", ("kind", "block_ids", "request_id"))
        _str(e["kind"], "kv_events[i].kind")
        _str(e["request_id"], "kv_events[i].request_id", none_ok=True)
        for b in _list(e["block_ids"], "kv_events[i].block_ids"):
            _int(b, "block id", 0, nblocks - 1)
    for rid, table in _dict(s["block_tables"], "block_tables").items():
        for b in _list(table, f"block_tables[{rid!r}]"):
            _int(b, "block id", 0, nblocks - 1)
    for rid, n in _dict(s["stored_tokens"], "stored_tokens").items():
        _int(n, f"stored_tokens[{rid!r}]")


def validate(d, source: str) -> None:
    """Raise TraceFormatError naming the first problem in a trace's dict form."""
    try:
        meta = _dict(d.get("meta", {}), "meta")
        _dict(meta.get("config", {}), "meta.config")
        for k in ("model", "clock"):
            _str(meta.get(k, ""), f"meta.{k}", none_ok=True)
        for k, v in meta.get("config", {}).items():
            if isinstance(v, (dict, list)):
                raise _Bad(f"meta.config.{k} must be a plain value")
        for rid, info in _dict(d.get("requests", {}), "requests").items():
            _dict(info, f"requests[{rid!r}]")
            _int(info.get("prompt_len", 0), f"requests[{rid!r}].prompt_len")
            _num(info.get("arrival"), f"requests[{rid!r}].arrival", none_ok=True)
            _str(info.get("prompt_text", ""), f"requests[{rid!r}].prompt_text")
        for i, s in enumerate(_list(d.get("steps"), "steps")):
            try:
                _step(s, MAX_BLOCKS)
            except _Bad as e:
                raise _Bad(f"step record #{i}: {e}") from None
    except _Bad as e:
        raise TraceFormatError(f"{source} is malformed: {e}") from None
