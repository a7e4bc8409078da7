"""BENCHMARKS' Binder tables, rendered from the pod's result files (inferlab/bench/binder_pod.py,
inferlab/bench/binder_kernels.py): the whole pod's memory, the first view and Run All, per
scenario and per notebook; what the portable kernels cost."""
from __future__ import annotations

from inferlab.tools.result_format import caption


def _gb(n) -> str:
    return "—" if n is None else f"{n / 1e9:.2f} GB"


def _s(x) -> str:
    return "—" if x is None else f"{x:.0f} s"


def _parts(r: dict) -> str:
    return ", ".join(f"{k} {_gb(v)}" for k, v in r.get("by_process", {}).items()) or "—"


def _cells(r: dict) -> str:
    ok = r.get("cells", 0) > 0 and r.get("done") == r.get("cells") and not r.get("cell_errors")
    return f"{r.get('done')}/{r.get('cells')}" + ("" if ok else " (failed)")


TOUR = "00_tour.ipynb"


def pod_table(res: dict, file: str, skip_tour: bool = True) -> str:
    """One row per scenario (``--scenarios``) or per notebook (``--notebooks``; the tour's
    row left out where other notebooks are there: its number is the scenarios' table's)."""
    body = res["results"]
    if "notebooks" in body:                              # one run: a row per notebook
        runs = [(name, r) for name, r in body["notebooks"].items()
                if not (skip_tour and name == TOUR and len(body["notebooks"]) > 1)]
        head = "notebook"
        pods = {name: body for name, _ in runs}
    else:                                                # scenarios: the first notebook each
        runs = [(what, next(iter(out["notebooks"].values()))) for what, out in body.items()]
        head = "pod"
        pods = {what: out for what, out in body.items()}
    rows = [f"| {head} | pod peak | by process | first view | Run All | cells |",
            "|---|---:|---|---:|---:|---:|"]
    for name, r in runs:
        rows.append(f"| {name.removesuffix('.ipynb')} | **{_gb(r.get('peak_bytes'))}** | "
                    f"{_parts(r)} | {_s(r.get('first_view_s'))} | {_s(r.get('run_all_s'))} | "
                    f"{_cells(r)} |")
    first = next(iter(pods.values()))
    limit = f"{first['memory_limit']} and {first['cpus']:g} CPU"
    return "\n".join(rows + ["", f"A pod of {limit}, {caption(res, file)}."])


def kernels_table(res: dict, file: str) -> str:
    """Tokens/s with x86-64-v3 kernels and with the exact CPU's, median (range)."""
    sides = res["results"]["sides"]
    work = list(next(iter(sides.values())))
    rows = ["| kernels compiled for | " + " | ".join(f"{w}, tokens/s" for w in work) + " |",
            "|---|" + "---:|" * len(work)]
    for side, by in sides.items():
        rows.append(f"| {side} | " + " | ".join(
            f"{by[w]['median']:.1f} ({by[w]['min']:.1f}-{by[w]['max']:.1f})" for w in work) + " |")
    ratio = res["results"]["ratio_v3_over_exact"]
    rows.append("| x86-64-v3 / exact CPU | " + " | ".join(f"{ratio[w]:.2f}x" for w in work)
                + " |")
    return "\n".join(rows + ["", f"Medians (range), SmolLM2 in a pod of 2 GB and one CPU, "
                                 f"{caption(res, file)}."])


def cells_table(res: dict, file: str) -> str:
    """The kernel's footprint cell by cell, then its largest mappings."""
    body = res["results"]
    rows = ["| cell | first line | seconds | kernel after | peak during |",
            "|---:|---|---:|---:|---:|"]
    for r in body["cells"]:
        line = r["first_line"].replace("|", "\\|")
        rows.append(f"| {r['cell']} | `{line}` | {r['seconds']:.1f} | {_gb(r['after_bytes'])} | "
                    f"{_gb(r['peak_bytes'])} |")
    top = ", ".join(f"{name} {b / 1e6:.0f} MB" for name, b in body["largest_mappings"])
    return "\n".join(rows + ["", f"Largest mappings at the end: {top}.", "",
                             f"{body['notebook']} in a pod of {body['memory_limit']} and "
                             f"{body['cpus']:g} CPU, {caption(res, file)}."])


def pod_summary(res: dict, file: str) -> str:
    """One line for BENCHMARKS' current table: each scenario's pod peak, first view, Run All."""
    from inferlab.tools.result_format import short
    parts = []
    for what, out in res["results"].items():
        r = next(iter(out["notebooks"].values()))
        parts.append(f"{what.split(':')[0]}: pod peak {_gb(r.get('peak_bytes'))}, first view "
                     f"{_s(r.get('first_view_s'))}, Run All {_s(r.get('run_all_s'))}")
    return "; ".join(parts) + f" ({short(res)}; {file})"


def kv_pages_table(res: dict, file: str) -> str:
    """KV pages resident as written against all at the start: allocation, bytes, tokens/s."""
    body = res["results"]
    rows = ["| KV cache | allocating it | resident when built | resident after the runs | "
            "tokens/s, median (range) |", "|---|---:|---:|---:|---:|"]
    for side, r in body.items():
        if side == "ratio":
            continue
        t = r["tok_s"]
        rows.append(f"| {side} ({_gb(r['kv_reserved_bytes'])} reserved) | {r['alloc_s']:.3f} s | "
                    f"{_gb(r['kv_resident_built_bytes'])} | {_gb(r['kv_resident_after_bytes'])} | "
                    f"{t['median']:.1f} ({t['min']:.1f}-{t['max']:.1f}) |")
    return "\n".join(rows + ["", f"Tokens/s as written over all at the start: "
                                 f"{body['ratio']:.2f}x; {caption(res, file)}."])
