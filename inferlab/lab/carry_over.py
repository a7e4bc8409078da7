"""Does a sweep's best setting carry over to another engine? The arithmetic, on rows.

    from inferlab.lab.carry_over import carry_over
    c = carry_over({"inferlab": lab_rows, "vLLM": vllm_rows}, min_per_user=5.0)
    c["best"]["inferlab"]["point"], c["best"]["vLLM"]["point"]
    c["vllm_at_lab_best"]["output_tok_s"], c["loss_pct"]

Rows are the sweep's (``sweep_result``: {"point", "knobs", "metrics", "error", ...}), one
list per engine over the same grid, matched by ``point``. The objective (vLLM's
``plot_pareto`` axes): the most output tokens/s in total among the points that give every
user at least ``min_per_user`` output tokens/s (no floor when None). Each engine's best is
the point that meets it; then the other engine is read at that point: what vLLM gives with
the lab's best knobs, and how much less that is than with its own best, in % of its own
best (0 when the two bests are one point). A point the other engine could not run, or where
it misses the floor, is said so, never counted as a best. Numbers are medians over repeats;
whether a loss is larger than the repeats' spread is ``within_spread``.
"""
from __future__ import annotations

import math

from inferlab.errors import InvalidInputError

TOTAL, PER_USER = "output_tok_s", "output_tok_s_per_user"
LAB, VLLM = "inferlab", "vLLM"


def objective_text(min_per_user: float | None) -> str:
    if min_per_user is None:
        return "the most output tokens/s in total"
    return (f"the most output tokens/s in total with at least {min_per_user:g} output "
            "tokens/s per user")


def check_floor(min_per_user) -> float | None:
    if min_per_user is None:
        return None
    if isinstance(min_per_user, bool) or not isinstance(min_per_user, (int, float)) or \
            not math.isfinite(min_per_user) or min_per_user < 0:
        raise InvalidInputError(f"min_per_user must be a number of tokens/s >= 0, got "
                                f"{min_per_user!r}")
    return float(min_per_user)


def _metric(row: dict | None, key: str) -> float | None:
    m = (row or {}).get("metrics") or {}
    v = m.get(key)
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def ran(row: dict | None) -> bool:
    """Whether a row ran and has both objective numbers."""
    return row is not None and row.get("error") is None and \
        _metric(row, TOTAL) is not None and _metric(row, PER_USER) is not None


def meets(row: dict | None, min_per_user: float | None) -> bool:
    return ran(row) and (min_per_user is None or _metric(row, PER_USER) >= min_per_user)


def best(rows, min_per_user: float | None = None) -> dict | None:
    """The row that meets the objective best: the most output tokens/s in total among those
    meeting the floor (a tie goes to more per user, then to the earlier point); None when no
    row meets it."""
    floor = check_floor(min_per_user)
    ok = [r for r in rows if meets(r, floor)]
    if not ok:
        return None
    return max(ok, key=lambda r: (_metric(r, TOTAL), _metric(r, PER_USER), -r["point"]))


def _brief(row: dict | None, floor: float | None) -> dict | None:
    """What the result file keeps of a row for an answer."""
    if row is None:
        return None
    return {"point": row["point"], "knobs": row.get("knobs"), "error": row.get("error"),
            TOTAL: _metric(row, TOTAL), PER_USER: _metric(row, PER_USER),
            "spread": ((row.get("metrics") or {}).get("spread") or {}).get(TOTAL),
            "meets_floor": meets(row, floor)}


def _loss(own: dict | None, other: dict | None) -> float | None:
    """How much less ``other`` gives in total than ``own``, in % of ``own``."""
    a, b = _metric(own, TOTAL), _metric(other, TOTAL)
    if a is None or b is None or a <= 0:
        return None
    return (a - b) / a * 100.0


def _within_spread(own: dict | None, other: dict | None) -> bool | None:
    """Whether the two rows' total tokens/s ranges over the repeats overlap (then the loss
    is not told apart from run-to-run noise)."""
    s1 = ((own or {}).get("metrics") or {}).get("spread", {}).get(TOTAL)
    s2 = ((other or {}).get("metrics") or {}).get("spread", {}).get(TOTAL)
    if not (s1 and s2):
        return None
    return s1[0] <= s2[1] and s2[0] <= s1[1]


def carry_over(rows: dict[str, list[dict]], min_per_user: float | None = None) -> dict:
    """The three answers (see the module's text) and the reverse reading (the lab at vLLM's
    best), for ``rows`` = {"inferlab": [...], "vLLM": [...]} over the same grid."""
    floor = check_floor(min_per_user)
    missing = [k for k in (LAB, VLLM) if k not in rows]
    if missing:
        raise InvalidInputError(f"carry_over needs rows for {LAB!r} and {VLLM!r}; missing "
                                f"{missing}")
    by = {k: {r["point"]: r for r in rows[k]} for k in (LAB, VLLM)}
    if set(by[LAB]) != set(by[VLLM]):
        raise InvalidInputError(f"the two engines ran different points: {sorted(by[LAB])} "
                                f"and {sorted(by[VLLM])}")
    bests = {k: best(rows[k], floor) for k in (LAB, VLLM)}
    lab_best, vllm_best = bests[LAB], bests[VLLM]
    at_lab = by[VLLM].get(lab_best["point"]) if lab_best else None
    at_vllm = by[LAB].get(vllm_best["point"]) if vllm_best else None
    same = lab_best is not None and vllm_best is not None and \
        lab_best["point"] == vllm_best["point"]
    return {"objective": objective_text(floor), "min_per_user": floor,
            "best": {k: _brief(r, floor) for k, r in bests.items()},
            "same_point": same,
            "vllm_at_lab_best": _brief(at_lab, floor),
            "loss_pct": 0.0 if same else _loss(vllm_best, at_lab),
            "within_spread": _within_spread(vllm_best, at_lab) if not same else None,
            "lab_at_vllm_best": _brief(at_vllm, floor),
            "lab_loss_pct": 0.0 if same else _loss(lab_best, at_vllm)}


def sentence(c: dict, names=None) -> str:
    """The answer in words, every number from ``c`` (``carry_over``'s dict). ``names``:
    the knobs to name a point by (default: all its knobs)."""
    def point(b):
        knobs = b.get("knobs") or {}
        keys = names if names is not None else list(knobs)
        return f"point {b['point']} (" + ", ".join(f"{k}={knobs[k]}" for k in keys
                                                    if k in knobs) + ")"
    lab, vl, at = c["best"][LAB], c["best"][VLLM], c["vllm_at_lab_best"]
    head = f"Objective: {c['objective']}. "
    if lab is None or vl is None:
        who = " and ".join(k for k in (LAB, VLLM) if c["best"][k] is None)
        return head + f"no point meets it on {who}."
    out = (head + f"inferlab's best: {point(lab)}, {lab[TOTAL]:.1f} tok/s "
           f"({lab[PER_USER]:.2f} per user); vLLM's best: {point(vl)}, {vl[TOTAL]:.1f} tok/s "
           f"({vl[PER_USER]:.2f} per user). ")
    if c["same_point"]:
        return out + "The lab's best is vLLM's best: nothing lost."
    if at is None or at.get(TOTAL) is None:
        return out + "vLLM did not run the lab's best point."
    out += (f"vLLM with the lab's best: {at[TOTAL]:.1f} tok/s ({at[PER_USER]:.2f} per user), "
            f"{c['loss_pct']:.1f}% less than with its own best")
    if not at["meets_floor"]:
        out += ", and it misses the per-user floor"
    if c["within_spread"]:
        out += " (within the repeats' spread: not told apart from noise)"
    return out + "."
