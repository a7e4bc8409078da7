"""Chapter 14, the analyst's question on the bundled chat traffic, answered by a sweep: which
``max_num_seqs`` and prefill token budget (whole prompts, or chunks) give the most output
tokens per second in total while each user still gets ``FLOOR`` tokens per second?

    data = measure(smoke=True)           # the grid below, on SmolLM2 and this machine's clock
    print(answer_text(data))             # the best point for the objective, and why
    show(figure(data))                   # the frontier (inferlab.lab.drawings.frontier)
    judge_sweep(data)                    # the claim: more seats, more tokens/s in total

The grid runs through ``inferlab.lab.sweep.Sweep`` (each point its own engine, repeats
interleaved across the points, median and range, a busy check over the whole sweep), on
the lab's bundled chat requests (``workload="chat"``) arriving as a Poisson process.
Output tokens/s per user is the sweep's (vLLM's plot_pareto x axis): the total over the
most requests in flight at once.

The claim's judge compares the two ends of ``max_num_seqs`` with every other knob the same
(the first point's): the most seats must serve more output tokens/s in total than one seat,
by at least the wall clock's noise line (``verdicts.WALL_NOISE``) and with the two points'
ranges over their repeats apart. A grid whose two ends are the same setting removes the
effect (tests/test_claims_sweep.py): the verdict is then "does not hold here". A sweep with
the busy-machine warning is not judged ("not measurable here").
"""
from __future__ import annotations

import shutil
import tempfile

from ..verdicts import FAILS, UNMEASURABLE, Verdict, on_wall, x

KNOB = "max_num_seqs"        # what the claim varies; the other knobs stay as the first point's
FLOOR = 5.0                  # the analyst's floor: output tokens/s each user still gets
CLEAR = 1.5                  # the claim holds at this ratio; WALL_NOISE to CLEAR: smaller here
BASE = {"num_blocks": 128, "max_model_len": 512}
WHOLE, CHUNK = 512, 32       # the prefill token budget: whole prompts, or chunks of 32 tokens


def point(seats: int, chunked: bool) -> dict:
    """One grid point: ``seats`` requests at once; whole prompts per step or chunks."""
    return {"max_num_seqs": seats, "enable_chunked_prefill": chunked,
            "max_num_batched_tokens": CHUNK if chunked else WHOLE}


GRID = {True: [point(1, False), point(8, False), point(8, True)],
        False: [point(s, c) for c in (False, True) for s in (1, 4, 8)]}
SIZES = {True: dict(num_requests=6, max_tokens=12, rate=8.0, repeats=2),
         False: dict(num_requests=12, max_tokens=32, rate=4.0, repeats=3)}


def measure(smoke: bool = False, grid=None, model: str | None = None, **sizes) -> dict:
    """The sweep of ``grid`` (default ``GRID[smoke]``) with ``SIZES[smoke]`` (``sizes``
    override them) on the wall clock; its rows and meta (``SweepResult``), the grid and
    sizes. The points' trace files are not kept (the chapter draws the frontier only)."""
    from .. import replay
    from ..sweep import Sweep
    if replay.enabled() and grid is None and not sizes and model is None:
        from .. import record_file               # the record's sweep: no model runs
        rec = record_file.read(replay.record_path("ch14"))
        recorded = (rec.get("claims_data") or {}).get("sweep")
        if recorded:
            replay.tell_once(rec, "chapter 14's sweep")
            return recorded
        return {"rows": [], "unmeasurable": "INFERLAB_REPLAY runs no model, and chapter 14's "
                "record holds no sweep"}
    cfg = {**SIZES[bool(smoke)], **sizes}
    pts = list(GRID[bool(smoke)] if grid is None else grid)
    out_dir = tempfile.mkdtemp(prefix="inferlab-ch14-sweep-")
    try:
        sw = Sweep(pts, workload="chat", model=model, base=BASE, out_dir=out_dir,
                   command=f"inferlab.lab.chapters.ch14_own_traffic.measure_sweep("
                           f"smoke={bool(smoke)})", **cfg)
        res = sw.run(progress=False)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    rows = [{**r, "trace_path": None} for r in res.rows]
    meta = {k: v for k, v in res.meta.items() if k != "out_dir"}
    return {"rows": rows, "meta": meta, "grid": pts, "sizes": cfg, "floor": FLOOR}


# --- reading the rows ---------------------------------------------------------------------
def _ok(rows) -> list[dict]:
    return [r for r in rows if r.get("error") is None and r.get("metrics")
            and r["metrics"].get("output_tok_s") is not None]


def _total(r) -> float:
    return r["metrics"]["output_tok_s"]


def _user(r) -> float:
    return r["metrics"].get("output_tok_s_per_user") or 0.0


def _range(r, key="output_tok_s") -> tuple[float, float]:
    s = (r["metrics"].get("spread") or {}).get(key)
    return (s[0], s[1]) if s else (r["metrics"][key],) * 2


PREFILL = ("enable_chunked_prefill", "max_num_batched_tokens")   # one setting: they move together


def _others(r, knob: str) -> dict:
    """The point's other knobs (chunking and its token budget count as one)."""
    same = PREFILL if knob in PREFILL else (knob,)
    return {k: v for k, v in r["knobs"].items() if k not in same}


def knobs_text(r) -> str:
    k = r["knobs"]
    prefill = (f"prefill in chunks of {k['max_num_batched_tokens']} tokens"
               if k.get("enable_chunked_prefill") else
               f"whole prompts (budget {k.get('max_num_batched_tokens')} tokens)")
    return f"max_num_seqs {k.get('max_num_seqs')}, {prefill}"


def _tok(r) -> str:
    lo, hi = _range(r)
    return f"{_total(r):.1f} output tok/s ({lo:.1f}-{hi:.1f}), {_user(r):.1f} per user"


def knob_effects(rows) -> list[tuple[str, float, dict, dict]]:
    """Per knob that varies: the largest ratio of total output tok/s between two points that
    differ in that knob only, with the two points (higher first); largest effect first."""
    ok = _ok(rows)
    out = []
    for knob in dict.fromkeys(k for r in ok for k in r["knobs"]):
        if knob == PREFILL[1] and any(PREFILL[0] in r["knobs"] for r in ok):
            continue                              # moves with chunking: one knob, not two
        pairs = [(a, b) for i, a in enumerate(ok) for b in ok[i + 1:]
                 if a["knobs"].get(knob) != b["knobs"].get(knob)
                 and _others(a, knob) == _others(b, knob)]
        if pairs:
            a, b = max(pairs, key=lambda p: max(_total(p[0]), _total(p[1])) /
                       max(min(_total(p[0]), _total(p[1])), 1e-9))
            hi, lo = (a, b) if _total(a) >= _total(b) else (b, a)
            out.append((knob, _total(hi) / max(_total(lo), 1e-9), hi, lo))
    return sorted(out, key=lambda e: -e[1])


def answer(data: dict, floor: float | None = None) -> dict:
    """The objective's answer: the points meeting the per-user ``floor`` (default the
    data's), the best of them by total output tok/s, the worst point, the knobs' effects."""
    floor = data.get("floor", FLOOR) if floor is None else floor
    ok = _ok(data.get("rows") or [])
    meets = [r for r in ok if _user(r) >= floor]
    return {"floor": floor, "ok": ok, "meets": meets,
            "best": max(meets, key=_total) if meets else None,
            "most_per_user": max(ok, key=_user) if ok else None,
            "worst": min(ok, key=_total) if ok else None,
            "effects": knob_effects(ok)}


def answer_text(data: dict, floor: float | None = None) -> str:
    """What the notebook prints: the question, the best point for it, how much it beats the
    worst, which knob moved it most, and where the numbers come from."""
    if data.get("unmeasurable"):
        return f"Not measured: {data['unmeasurable']} (0 points)."
    a = answer(data, floor)
    rows, meta, s = data.get("rows") or [], data.get("meta") or {}, data.get("sizes") or {}
    lines = [f"Objective: the most output tokens/s in total while each user still gets at "
             f"least {a['floor']:g} output tok/s.",
             f"Traffic: {meta.get('workload') or s}; {len(a['ok'])} of {len(rows)} points "
             "ran."]
    if not a["ok"]:
        return "\n".join(lines + ["No point of the sweep ran: nothing to answer with."])
    best, worst = a["best"], a["worst"]
    if best is None:
        top = a["most_per_user"]
        lines.append(f"No point gives each user {a['floor']:g} tok/s here; the most per user: "
                     f"{knobs_text(top)}, {_tok(top)}.")
        best = max(a["ok"], key=_total)
        lines.append(f"Without the floor, the most in total: {knobs_text(best)}: {_tok(best)}.")
    else:
        lines.append(f"Answer: {knobs_text(best)}: {_tok(best)} ({len(a['meets'])} of "
                     f"{len(a['ok'])} points meet the floor).")
    if best is not worst:
        lines.append(f"It serves {_total(best) / _total(worst):.2f}x the worst point "
                     f"({knobs_text(worst)}: {_tok(worst)}).")
    for knob, ratio, hi, lo in a["effects"]:
        name = "chunked prefill (with its token budget)" if knob == PREFILL[0] else knob
        lines.append(f"{name}: {ratio:.2f}x in total between {knobs_text(lo)} and "
                     f"{knobs_text(hi)} (the other knobs the same).")
    lines.append(f"Clock: {meta.get('label', 'wall clock')}.")
    if meta.get("warning"):
        lines.append(meta["warning"])
    return "\n".join(lines)


def figure(data: dict):
    """The frontier of the sweep's points (total against per user), the floor named."""
    from ..drawings import frontier
    title = (f"Chat traffic on SmolLM2: the best point with at least "
             f"{data.get('floor', FLOOR):g} tok/s per user")
    return frontier.figure(data.get("rows") or [], title=title)


# --- the claim ------------------------------------------------------------------------------
def arms(rows) -> tuple[dict, dict] | None:
    """(fewest seats, most seats) among the points whose other knobs are the first point's
    (the first of the fewest, the last of the most: one setting twice gives two points)."""
    ok = _ok(rows)
    if not ok:
        return None
    same = [r for r in ok if _others(r, KNOB) == _others(ok[0], KNOB)]
    seats = lambda r: r["knobs"].get(KNOB, 0)        # noqa: E731
    low = min(same, key=seats)
    high = max(reversed(same), key=seats)
    return (low, high) if low is not high else None


def judge_sweep(d: dict) -> Verdict:
    """More seats (``max_num_seqs``) serve more output tokens/s in total on the chat
    traffic: the ratio of the two ends' medians at least the wall clock's noise, their
    ranges apart (see the module's docstring)."""
    sw = d.get("sweep")
    if not sw or not sw.get("rows"):
        why = (sw or {}).get("unmeasurable") or "this measurement holds no sweep"
        return Verdict(UNMEASURABLE, f"{why} (0 sweep points); chapter 14's notebook or "
                       "`inferlab record --id ch14` measures one", measured="not measured",
                       points=(("sweep points", 0),), unit="points", clock="none")
    meta, pair = sw.get("meta") or {}, arms(sw["rows"])
    if pair is None:
        return Verdict(FAILS, f"{len(_ok(sw['rows']))} point(s) ran with the same other "
                       f"knobs: no two {KNOB} settings to compare", measured="1 point",
                       points=(("points", len(_ok(sw["rows"]))),), unit="points",
                       clock="wall clock", warning=meta.get("warning"))
    low, high = pair
    ratio = _total(high) / max(_total(low), 1e-9)
    (llo, lhi), (hlo, hhi) = _range(low), _range(high)
    apart = hlo > lhi
    n = meta.get("repeats", 1)
    verdict = on_wall(ratio, clear=CLEAR) if apart and n >= 2 else FAILS
    ends = f"{KNOB} {high['knobs'][KNOB]} vs {low['knobs'][KNOB]}"
    reason = (f"{ends}: {_total(high):.1f} vs {_total(low):.1f} output tok/s in total "
              f"({hlo:.1f}-{hhi:.1f} vs {llo:.1f}-{lhi:.1f} over {n} repeats), {x(ratio)}; "
              + ("the ranges are apart" if apart else "the ranges overlap")
              + ("; at least 2 repeats are needed for a spread" if n < 2 else "")
              + f" (holds from {CLEAR:g}x with the ranges apart; below the wall clock's "
              f"noise line, 1.2x, no effect); {meta.get('workload')}, "
              f"{(d['sweep'].get('sizes') or {}).get('num_requests')} requests")
    return Verdict(verdict, reason, measured=x(ratio),
                   points=((f"{KNOB} {low['knobs'][KNOB]}", _total(low)),
                           (f"{KNOB} {high['knobs'][KNOB]}", _total(high))),
                   unit="output tok/s", clock="wall clock", warning=meta.get("warning"))
