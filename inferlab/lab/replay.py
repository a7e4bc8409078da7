"""A lab that teaches when compute is slow: replay a recorded run instead of running the model.

One flag, ``INFERLAB_REPLAY=1`` (or ``replay.enable()`` in Python, before the first
measurement), and the lab runs no model at all:

* a chapter's ``measure(...)`` (``measure_cache.shared``) returns the measurement its record
  holds (``docs/results/chapters/chNN_*.json.gz``, written by ``inferlab record``), whatever
  its arguments (a smoke size too), and prints once where that run was recorded;
* the tour (``notebooks/00_tour.py``) takes its engine, comparison and Lab from
  ``replay_tour.tour``: the calls of the run ``inferlab record --id tour`` recorded are played
  back, step by step, into the same views (the scrubber moves through them).

What is replayed always says so, with the CPU, its flags and the date read from the record's
own meta (``banner``). ``INFERLAB_REPLAY=record`` is the tour's recording mode (the command
``inferlab record --id tour`` sets it in the kernel that runs the tour); unset, ``0`` or
``replay.enable(False)``: everything runs live, as always.
"""
from __future__ import annotations

import importlib
import os
import pathlib
import re

from . import record_file

ENV = "INFERLAB_REPLAY"
_switch: bool | None = None          # the Python switch; None: the environment decides
_told: set[str] = set()              # the records whose banner this process printed


def enable(on: bool | None = True) -> None:
    """The Python switch: ``enable()`` replays, ``enable(False)`` runs live, ``enable(None)``
    leaves it to ``$INFERLAB_REPLAY`` again."""
    global _switch
    _switch = on


def mode() -> str | None:
    """``"replay"``, ``"record"`` (the tour being recorded) or None (live)."""
    if _switch is not None:
        return "replay" if _switch else None
    value = os.environ.get(ENV, "").strip().lower()
    if value == "record":
        return "record"
    return "replay" if value in ("1", "true", "yes", "on") else None


def enabled() -> bool:
    """Whether measurements and the tour replay their records."""
    return mode() == "replay"


def where(rec: dict) -> str:
    """The machine and date a record was made on, from its meta: 'AMD EPYC (avx2, avx512f),
    2 cores, 2026-12-06 21:05 UTC'."""
    flags = ", ".join(rec.get("flags") or [])
    cpu = f"{rec.get('cpu', 'an unknown CPU')}" + (f" ({flags})" if flags else "")
    date = str(rec.get("date", "an unknown date"))[:16].replace("T", " ")
    return f"{cpu}, {rec.get('cores', '?')} cores, {date} UTC"


def banner(rec: dict, what: str) -> str:
    """The line every replay prints: what replays, where and when it was recorded."""
    return (f"replaying a run recorded on {where(rec)}: {what}, from "
            f"docs/results/chapters/{rec['chapter']}{record_file.SUFFIX} (`{rec['command']}`). "
            f"No model runs here; the numbers are that run's. Unset {ENV} to run live.")


def tell_once(rec: dict, what: str) -> bool:
    """Print ``banner`` once per record and process; True when it printed."""
    if rec["chapter"] in _told:
        return False
    _told.add(rec["chapter"])
    print(banner(rec, what), flush=True)
    return True


def record_path(name: str, root=None) -> pathlib.Path:
    """The record of ``name`` ('tour', 'ch05' or a chapter's module name)."""
    root = pathlib.Path(root or record_file.ROOT)
    found = sorted(root.glob(f"{name}{record_file.SUFFIX}")) or \
        sorted(root.glob(f"{name[:4]}_*{record_file.SUFFIX}"))
    if not found:
        raise FileNotFoundError(
            f"{ENV} is set but there is no record of {name} in {root}: record it with "
            f"`inferlab record --id {name[:4]}` on a machine that can run the model, or unset "
            f"{ENV} to run live")
    return found[0]


def chapter_measurement(fn):
    """What a chapter's measure ``fn`` returns in replay mode: its record's measurement (the
    notebook's ``measure``), or the claims' measurement where ``fn`` is a call of its own
    (chapter 14's serving stacks: ``CLAIMS_MEASURE``). Prints the banner once."""
    module = fn.__module__.rsplit(".", 1)[-1]
    number = re.search(r"ch\d\d", module)
    if number is None:
        raise ValueError(f"{fn.__module__}.{fn.__qualname__} is not a chapter's measurement; "
                         f"{ENV} replays chapters' records only")
    rec = record_file.read(record_path(number.group(0)))
    if module == rec["chapter"]:
        data, what = rec["data"], f"{rec['chapter']}'s measurement"
    else:                                 # the claims' own measurement, as the record keeps it
        claims = rec["claims_data"] if rec.get("claims_data") is not None else rec["data"]
        mod = importlib.import_module(f"inferlab.lab.chapters.{rec['chapter']}")
        as_recorded = getattr(mod, "claims_as_recorded", lambda r: r["claims"])
        data, what = as_recorded({**rec, "claims": claims}), f"{rec['chapter']}'s claims run"
    tell_once(rec, what)
    return data
