"""Measure once, read many: a chapter's measurement shared by the processes of one session.

With ``INFERLAB_MEASURE_CACHE=DIR`` set, a chapter's ``measure(...)`` called again with the same
arguments (and the same engine settings from the environment: ``INFERLAB_DTYPE`` ...) returns
the measurement already kept in DIR instead of running the engine again, in this process or
any other that has DIR: the test session sets it for itself and for the notebook kernels it
starts, so the report card's fixture, the chapter tests and the notebooks read one
measurement per chapter. Unset (a user's notebook, ``inferlab claims``, ``inferlab figures``),
every call measures. With ``INFERLAB_REPLAY=1`` (``replay.enable()``) nothing measures: the
call returns the chapter's recorded measurement, saying so (``replay``).

A call whose arguments hold an object with no stable text (an engine, a function) is not
kept; nor is a result that does not pickle. A result read back is a fresh copy: a caller may
change it freely.
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import os
import pathlib
import pickle
import re

from . import replay

ENV = "INFERLAB_MEASURE_CACHE"
# environment variables that change what an engine computes belong in the key; these do not
# (the smoke size is an argument of measure itself)
_NOT_IN_KEY = {ENV, "INFERLAB_SMOKE", "INFERLAB_API_KEY", replay.ENV}
_UNSTABLE = re.compile(r" at 0x[0-9a-f]+")


def key(fn, args: tuple, kwargs: dict) -> str | None:
    """The text naming this call (None: it has an argument without a stable text)."""
    bound = inspect.signature(fn).bind(*args, **kwargs)
    bound.apply_defaults()
    settings = sorted((k, v) for k, v in os.environ.items()
                      if k.startswith("INFERLAB_") and k not in _NOT_IN_KEY)
    text = repr((fn.__module__, fn.__qualname__, sorted(bound.arguments.items()), settings))
    return None if _UNSTABLE.search(text) else text


def path_for(root: str, fn, text: str) -> pathlib.Path:
    digest = hashlib.sha256(text.encode()).hexdigest()[:24]
    return pathlib.Path(root) / f"{fn.__module__.rsplit('.', 1)[-1]}-{digest}.pickle"


def put(root, fn, kwargs: dict, data) -> pathlib.Path:
    """Keep ``data`` in ``root`` as the result of ``fn(**kwargs)`` (``fn``: a ``shared``
    measure or the function it wraps): a later call with these arguments reads it."""
    fn = getattr(fn, "__wrapped__", fn)
    path = path_for(root, fn, key(fn, (), kwargs))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(data))
    return path


def shared(fn):
    """Decorate a chapter's ``measure``: kept in ``$INFERLAB_MEASURE_CACHE`` when that is set;
    its record's measurement when replaying (``$INFERLAB_REPLAY``)."""
    @functools.wraps(fn)
    def measure(*args, **kwargs):
        if replay.enabled():
            return replay.chapter_measurement(fn)
        root = os.environ.get(ENV)
        text = key(fn, args, kwargs) if root else None
        if text is None:
            return fn(*args, **kwargs)
        path = path_for(root, fn, text)
        if path.exists():
            return pickle.loads(path.read_bytes())
        data = fn(*args, **kwargs)
        try:
            blob = pickle.dumps(data)
        except Exception:  # noqa: BLE001 - a result that does not pickle is simply not kept
            return data
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(blob)
        os.replace(tmp, path)               # another process sees the whole file or none
        return pickle.loads(blob)           # the caller's copy is not the one kept
    return measure
