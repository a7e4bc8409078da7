"""One recorded run per chapter: measured once, drawn everywhere.

    inferlab record --id ch05            # measure chapter 5's full run, write its record
    data = records.load("ch05")["data"]   # what the notebook, figures and report card draw

A chapter's full run writes ``docs/results/chapters/<chapter>.json.gz``: the measurement its
notebook computes (``measure(smoke=False)``), the verdicts of its claims, the numbers behind
them (each with a quantity id and a workload id), and the command, CPU model and flags, date
and load (``protocol.result_meta``). ``inferlab figures``, ``inferlab gallery``, the report
card (``inferlab claims``, notebook 11) and README's and BENCHMARKS' tables draw from these
records without measuring; measuring again is explicit (``inferlab record``, ``--measure``).

The measurement is kept as JSON with tags for what JSON lacks (tuples, numpy arrays, dict
keys that are not text), gzip-compressed with no timestamp: a record read back is the
measurement that was written, type for type, and the same record gives the same bytes.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import pathlib
import re
import tempfile

from . import protocol, record_file
from .record_file import SUFFIX, dumps, json_text, loads, read, write  # noqa: F401 - re-exported

ROOT = record_file.ROOT


# --- a chapter's record ------------------------------------------------------------------------
def chapter_name(chapter) -> str:
    """The module name (``ch05_batching``) of a chapter given as 5, "ch05" or its name."""
    from .chapters import chapter_modules
    key = f"ch{chapter:02d}" if isinstance(chapter, int) else str(chapter)
    names = [n for n in chapter_modules() if n == key or n[:4] == key[:4]]
    if len(names) != 1:
        raise ValueError(f"no chapter {chapter!r}; chapters: {', '.join(chapter_modules())}")
    return names[0]


def path(chapter, root=None) -> pathlib.Path:
    return pathlib.Path(root or ROOT) / f"{chapter_name(chapter)}{SUFFIX}"


def workload_id(name: str, smoke: bool) -> str:
    """What names a chapter's workload: its number and size (the full run's or smoke's)."""
    return f"{name[:4]}-{'smoke' if smoke else 'full'}"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")


def numbers(verdicts, workload: str) -> list[dict]:
    """The numbers behind the verdicts: one per drawn point, with a quantity id (claim id, the
    point's label and its role: the policy or part it belongs to) and the workload id. A
    published value or a reference line is not a measured number."""
    out = []
    for claim_id, v in verdicts:
        for p in v.points:
            label, value, role = (tuple(p) + (None,))[:3]
            if role in ("published", "reference") or not isinstance(value, (int, float)):
                continue
            what = _slug(label) + (f":{_slug(role)}" if role else "")  # a policy's, a part's
            out.append({"quantity": f"{claim_id}:{what}", "workload": workload,
                        "value": value, "unit": v.unit})
    return out


def verdict_rows(verdicts) -> list[dict]:
    return [{"id": cid, "verdict": v.verdict, "measured": v.measured, "reason": v.reason,
             "warning": v.warning} for cid, v in verdicts]


def record(chapter, smoke: bool = False, command: str | None = None, root=None,
           progress=None) -> pathlib.Path:
    """Measure ``chapter`` once (the notebook's ``measure(smoke=...)``; its claims' own
    measurement where that differs, chapter 14's serving stacks), judge its claims and write
    its record. Returns the path written."""
    name = chapter_name(chapter)
    mod = importlib.import_module(f"inferlab.lab.chapters.{name}")
    with _shared_measurements():
        if progress:
            progress(f"measuring {name} ...")
        data = mod.measure(smoke=smoke)
        claims_data = mod.measure_for_claims(smoke) if hasattr(mod, "measure_for_claims") \
            else data
    rec = {"record": 1, "chapter": name, "smoke": smoke, "workload": workload_id(name, smoke),
           **protocol.result_meta(command or f"inferlab record --id {name[:4]}"
                                  + (" --smoke" if smoke else "")),
           "data": data,
           "claims_data": None if json_text(claims_data) == json_text(data) else claims_data}
    return write(path(name, root), _judged(rec))


def rejudge(chapter, root=None) -> pathlib.Path:
    """Judge a record's measurement again with today's judges and rewrite its verdicts and
    numbers (a judge changed; nothing is measured). The record's meta stays that of its run."""
    p = path(chapter, root)
    return write(p, _judged(read(p)))


def _judged(rec: dict) -> dict:
    """``rec`` with the verdicts of its chapter's claims on its measurement, and their numbers."""
    data = rec["claims_data"] if rec.get("claims_data") is not None else rec["data"]
    mod = importlib.import_module(f"inferlab.lab.chapters.{rec['chapter']}")
    judged = [(c.id, c.assess(data)) for c in getattr(mod, "CLAIMS", ())]
    return {**rec, "verdicts": verdict_rows(judged), "numbers": numbers(judged, rec["workload"])}


def seed_cache(root) -> list[str]:
    """Each recorded chapter's measurement, put in the measure cache at ``root`` as its
    notebook's full-run call ``measure(smoke=False)``: the notebooks executed with
    ``INFERLAB_MEASURE_CACHE=root`` draw the recorded numbers (``make notebooks-records``)."""
    from . import measure_cache
    out = []
    for name in recorded():
        mod = importlib.import_module(f"inferlab.lab.chapters.{name}")
        rec = load(name)
        out.append(os.fspath(measure_cache.put(root, mod.measure, {"smoke": False},
                                               rec["data"])))
        if getattr(mod, "CLAIMS_MEASURE", None) is not None:   # the claims' own call
            claims = getattr(mod, "claims_as_recorded", lambda r: r["claims"])(rec)
            out.append(os.fspath(measure_cache.put(root, mod.CLAIMS_MEASURE,
                                                   {"smoke": False}, claims)))
    return out


@contextlib.contextmanager
def _shared_measurements():
    """Within a record, the claims' measurement reuses the notebook's where the two calls are
    the same (``measure_cache``): a temporary cache unless the caller set one."""
    from .measure_cache import ENV
    if os.environ.get(ENV):
        yield
        return
    with tempfile.TemporaryDirectory() as tmp:
        os.environ[ENV] = tmp
        try:
            yield
        finally:
            os.environ.pop(ENV, None)


class NoRecord(FileNotFoundError):
    pass


def load(chapter, root=None) -> dict:
    """A chapter's record: its meta (command, date, cpu, flags, load), ``verdicts``,
    ``numbers``, ``data`` (the notebook's measurement) and ``claims`` data (what its claims
    are judged on: ``data`` unless recorded apart)."""
    p = path(chapter, root)
    if not p.exists():
        name = chapter_name(chapter)
        raise NoRecord(f"no record of {name} at {p}: measure it with `inferlab record --id "
                       f"{name[:4]}` (the chapter's full run), or draw from a new measurement "
                       f"with --measure")
    rec = read(p)
    rec["claims"] = rec.pop("claims_data") if rec.get("claims_data") is not None \
        else rec["data"]
    return rec


def recorded() -> list[str]:
    """The chapters with a record, in chapter order."""
    from .chapters import chapter_modules
    return [n for n in chapter_modules() if (ROOT / f"{n}{SUFFIX}").exists()]


def meta_of_all(command: str) -> dict:
    """What a surface judged on every record says it came from: the first and last dates,
    the CPU (model, flags, cores) if one, and the highest load any record was written at."""
    metas = [read(ROOT / f"{n}{SUFFIX}") for n in recorded()]
    metas = [{k: m.get(k) for k in ("date", "cpu", "flags", "cores", "load")} for m in metas]
    one = lambda k: metas[0][k] if len({repr(m[k]) for m in metas}) == 1 else "several"
    dates = sorted(m["date"] for m in metas)
    return {"command": command, "date": dates[-1], "first_date": dates[0], "cpu": one("cpu"),
            "flags": one("flags"), "cores": one("cores"),
            "load": max(m["load"] for m in metas), "from": "docs/results/chapters"}


def source_line(rec: dict) -> str:
    """Where a drawing's numbers come from, in one line: the record, its CPU and date."""
    flags = ", ".join(rec.get("flags") or [])
    return (f"recorded {rec['date'][:10]} on {rec['cpu']}" + (f" ({flags})" if flags else "")
            + f", {rec.get('cores', '?')} cores; docs/results/chapters/{rec['chapter']}{SUFFIX}")
