"""Where a notebook kernel's memory goes, cell by cell, in a Binder pod.

    python -m inferlab.bench.binder_cells                     # the tour
    python -m inferlab.bench.binder_cells --notebook 04_kv_cache --out build/cells.json

The notebook runs (nbclient, no browser) in a pod of 2 GB and one CPU under binder/start,
as binder_pod runs it; after each code cell, and sampled during it, the kernel's footprint:
the distinct pages it and its children map (inferlab/tools/pod.py ``resident_pages``),
then, at the end, the largest mappings by resident size (the weights file, the heap, torch's
library ...). What grows a kernel's peak is the cell whose "peak during" jumps.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

from inferlab.bench.binder_pod import ROOT, START, pod_env
from inferlab.tools.pod import Pod

RUNNER = r"""
import collections, json, os, sys, threading, time
import nbformat
from nbclient import NotebookClient
from inferlab.tools.pod import resident_pages

def family(pid):
    kids = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                ppid = int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(p))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out

def mappings(pid, n=8):
    agg, cur = collections.Counter(), None
    for line in open(f"/proc/{pid}/smaps"):
        head = line.split(None, 1)[0]
        if "-" in head and not head.endswith(":"):
            parts = line.split()
            cur = parts[5].rsplit("/", 1)[-1] if len(parts) > 5 else "[anonymous]"
        elif head == "Rss:":
            agg[cur] += int(line.split()[1]) * 1024
    return agg.most_common(n)

nb = nbformat.read(sys.argv[1], 4)
client = NotebookClient(nb, timeout=900, kernel_name="python3",
                        resources={"metadata": {"path": os.path.dirname(sys.argv[1])}})
rows, peak, stop = [], [0], threading.Event()
with client.setup_kernel():
    pid = client.km.provisioner.process.pid
    def watch():
        while not stop.wait(0.5):
            peak[0] = max(peak[0], resident_pages(family(pid)) or 0)
    threading.Thread(target=watch, daemon=True).start()
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        peak[0] = 0
        t = time.perf_counter()
        client.execute_cell(cell, i)
        after = resident_pages(family(pid)) or 0
        rows.append({"cell": i, "first_line": cell.source.splitlines()[0][:70],
                     "seconds": round(time.perf_counter() - t, 1), "after_bytes": after,
                     "peak_bytes": max(peak[0], after), "processes": len(family(pid))})
    top = mappings(pid)
    stop.set()
print("RESULT " + json.dumps({"cells": rows, "largest_mappings": top}))
"""


def run(notebook: str = "00_tour.ipynb", python: str = sys.executable, memory="2G",
        cpus: float = 1.0) -> dict:
    path = ROOT / "notebooks" / (notebook if notebook.endswith(".ipynb") else notebook + ".ipynb")
    env = pod_env(python)
    with Pod(memory, cpus) as pod:
        p = subprocess.run(["bash", str(START), python, "-c", RUNNER, str(path)], env=env,
                           preexec_fn=pod.enter, capture_output=True, text=True, cwd=ROOT)
        report = pod.report()
    line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
    if p.returncode or not line:
        raise RuntimeError(f"{notebook} did not run in the pod:\n{p.stderr[-3000:]}")
    return {"notebook": path.name, "memory_limit": memory, "cpus": cpus,
            **json.loads(line[0][7:]), "pod": report}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m inferlab.bench.binder_cells",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--notebook", default="00_tour.ipynb")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    res = run(a.notebook, a.python)
    for r in res["cells"]:
        print(f"cell {r['cell']:>2} {r['seconds']:6.1f} s  after {r['after_bytes'] / 1e9:.2f} GB"
              f"  peak {r['peak_bytes'] / 1e9:.2f} GB  | {r['first_line']}")
    for name, b in res["largest_mappings"]:
        print(f"  {b / 1e6:8.1f} MB  {name}")
    from inferlab.bench.common import save_result
    save_result("inferlab.bench.binder_cells", argv, res, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
