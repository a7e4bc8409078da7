"""``inferlab bench sweep PARAMS.json --vllm``: does the sweep's best setting carry over to
vLLM? Every point of the grid served by ``inferlab serve`` and by ``vllm serve`` with that
point's settings, both measured by ``vllm bench serve`` on the same traffic, A B A B
(``inferlab.lab.sweep_vllm``); then, for the objective (``--min-per-user N``: the most output
tokens/s in total with at least N per user; without it, the most in total), the lab's best
point, vLLM's best point, and vLLM's numbers at the lab's best: what it loses there against
its own best (``inferlab.lab.carry_over``).

    inferlab bench sweep docs/sweep-vllm-grid.json --vllm --min-per-user 2 --repeats 2 --rates 1 \\
        --output-len 64 --out docs/results/sweep-vllm-amd.json

Writes the result file (both engines' rows, the objective, the answers, the runs, command,
CPU and flags, date, load) and beside it the figure of both frontiers (``.png`` and
``.svg``, the article profile: a dark twin and a caption too; ``--no-figure``: none).
"""
from __future__ import annotations

import json
import os
import shlex

from inferlab.errors import InvalidInputError
from inferlab.lab.carry_over import carry_over, sentence
from inferlab.lab.sweep_vllm import LOG, measure_pair

from .sweep import NAME_KEY, load_params, parse_serve_params


def read_points(path) -> tuple[list[dict], list[str | None]]:
    """The points as ``vllm serve`` arguments (their own names) and their names, from a
    ``--serve-params`` file; checked as ``inferlab bench sweep`` checks it."""
    data = load_params(path)
    _, names = parse_serve_params(data)
    records = list(data.values()) if isinstance(data, dict) else data
    return [{k: v for k, v in r.items() if k != NAME_KEY} for r in records], names


def traffic_log(workload: str | None) -> str:
    if workload in (None, "chat"):
        return LOG
    if os.path.isfile(workload):
        return workload
    raise InvalidInputError(f"--vllm plays 'chat' (the bundled chat requests' log) or a request "
                            f"log file; {workload!r} is neither")


def figure_paths(out: str) -> list[str]:
    stem = os.path.splitext(out)[0]
    return [stem + ".png", stem + ".svg"]


def write_figure(res: dict, out: str) -> list[str]:
    from inferlab.lab import figures
    from inferlab.lab.drawings import frontier_pair
    r = res["results"]
    fig = frontier_pair.figure(r["engines"], r["carry_over"])
    src = f"{os.path.basename(out)}: {res['command']}"
    extra = [res["warning"]] if res.get("warning") else []      # the caption says it too
    return [figures.save(fig, p, profile="article", source=src, cores=res.get("cores"),
                         extra=extra) for p in figure_paths(out)]


def main(params: str, *, workload: str | None = "chat", requests: int | None = None,
         repeats: int = 2, rate: float = 4.0, output_len: int | None = None,
         min_per_user: float | None = None, out: str | None = None, figure: bool = True,
         argv=None, progress=print) -> dict:
    points, names = read_points(params)
    from inferlab.lab.carry_over import check_floor
    check_floor(min_per_user)                          # a bad objective: said before the run
    command = "inferlab " + shlex.join(argv) if argv else \
        f"inferlab bench sweep {params} --vllm"
    out = out or os.path.join("build", "bench", "sweep-vllm.json")
    res = measure_pair(points, log=traffic_log(workload), requests=requests, repeats=repeats,
                       rate=rate, output_len=output_len or 64, command=command,
                       progress=progress)
    r = res["results"]
    r["names"] = names
    r["carry_over"] = c = carry_over(r["engines"], min_per_user)
    for i, p in enumerate(points):
        label = names[i] or ", ".join(f"{k}={v}" for k, v in p.items())
        cells = []
        for engine, rows in r["engines"].items():
            row = rows[i]
            m = row["metrics"]
            cells.append(f"{engine} error: {row['error']}" if row["error"] or not m else
                         f"{engine} {m['output_tok_s']:.1f} tok/s, "
                         f"{m['output_tok_s_per_user']:.2f} per user")
        progress(f"point {i} {label}: " + "; ".join(cells))
    vary = [k for k in points[0] if len({repr(p.get(k)) for p in points}) > 1] or None
    progress(sentence(c, vary))
    if res.get("warning"):
        progress(res["warning"])
    path = os.path.abspath(out)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(res, indent=1, default=str) + "\n")
    progress(f"{res['label']}\nwritten to {path}")
    if figure:
        progress("figure: " + ", ".join(write_figure(res, out)))
    return res
