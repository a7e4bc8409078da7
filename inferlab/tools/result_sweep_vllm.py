"""BENCHMARKS' rendering of ``inferlab bench sweep PARAMS.json --vllm``'s result file
(inferlab/bench/sweep_vllm.py): each grid point on both servers, the objective, and whether
the lab's best setting carries over to vLLM (inferlab/lab/carry_over.py)."""
from __future__ import annotations

from inferlab.tools.result_format import caption, short


def _cell(row: dict) -> str:
    m = row.get("metrics")
    if row.get("error") or not m:
        return f"failed: {str(row.get('error') or 'no numbers')[:60]}"
    lo, hi = (m.get("spread") or {}).get("output_tok_s") or [None, None]
    rng = f" ({lo:.1f}-{hi:.1f})" if lo is not None and hi is not None and lo != hi else ""
    return f"{m['output_tok_s']:.1f}{rng} / {m['output_tok_s_per_user']:.2f}"


def _knobs(row: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in (row.get("knobs") or {}).items())


def _answer(b: dict | None) -> str:
    if b is None:
        return "none meets it"
    return (f"point {b['point']} ({_knobs(b)}): {b['output_tok_s']:.1f} tok/s, "
            f"{b['output_tok_s_per_user']:.2f} per user")


def sweep_vllm_table(res: dict, file: str) -> str:
    """A row per point (tokens/s in total, median (range), / per user, for each engine),
    then the objective's three answers."""
    r = res["results"]
    eng = r["engines"]
    names = list(eng)
    rows = ["| point | knobs | " + " | ".join(f"{e}: tok/s (range) / per user" for e in names)
            + " |", "|---:|---|" + "---:|" * len(names)]
    for i, lab_row in enumerate(eng[names[0]]):
        rows.append(f"| {lab_row['point']} | {_knobs(lab_row)} | "
                    + " | ".join(_cell(eng[e][i]) for e in names) + " |")
    c, cfg = r["carry_over"], r["config"]
    at = c["vllm_at_lab_best"]
    lines = [f"Objective: {c['objective']}.", "",
             f"- inferlab's best: {_answer(c['best']['inferlab'])}",
             f"- vLLM's best: {_answer(c['best']['vLLM'])}"]
    if c["same_point"]:
        lines.append("- vLLM with the lab's best: the same point, nothing lost")
    elif at is not None and c["loss_pct"] is not None:
        lines.append(f"- vLLM with the lab's best: {at['output_tok_s']:.1f} tok/s, "
                     f"{at['output_tok_s_per_user']:.2f} per user: **{c['loss_pct']:.1f}% "
                     "less** in total than with its own best"
                     + ("" if at["meets_floor"] else ", and under the per-user floor")
                     + (" (within the repeats' spread)" if c["within_spread"] else ""))
    else:
        lines.append("- vLLM with the lab's best: not measured (no best, or it failed there)")
    traffic = (f"{cfg['requests']} requests of the bundled chat log at {cfg['rate']:g} req/s "
               f"(Poisson), {cfg['output_len']} tokens out each, {cfg['model']} fp32")
    warn = f" {res['warning']}" if res.get("warning") else ""
    return "\n".join(rows + [""] + lines + [
        "", f"Both servers measured by `vllm bench serve` (vLLM {cfg['vllm_version']}), "
        f"{traffic}; medians (range) of {cfg['repeats']} repeats, A B A B at each point; "
        f"{caption(res, file)}.{warn}"])


def sweep_vllm_summary(res: dict, file: str) -> str:
    """One line for BENCHMARKS' current table: the two bests and vLLM's loss at the lab's."""
    c = res["results"]["carry_over"]
    lab, vl = c["best"]["inferlab"], c["best"]["vLLM"]
    if lab is None or vl is None:
        head = "no point meets the objective on one engine"
    elif c["same_point"]:
        head = f"both engines' best is point {lab['point']} ({_knobs(lab)}): it carries over"
    else:
        head = (f"inferlab's best point {lab['point']} ({_knobs(lab)}), vLLM's point "
                f"{vl['point']} ({_knobs(vl)}); vLLM with the lab's best: "
                + ("not measured" if c["loss_pct"] is None else
                   f"{c['loss_pct']:.1f}% fewer tok/s than its own"))
    busy = "; a busy machine: not trustworthy" if res.get("warning") else ""
    return f"{head} ({c['objective']}{busy}; {short(res)}; {file})"
