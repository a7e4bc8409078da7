"""One number, one place: the check that what a reader sees was rendered from a record.

    python -m inferlab.tools.one_number       # lists each typed number and each conflict

Two checks (tests/test_one_number.py runs both on the tree):

* **typed numbers**: README, docs/reference.md, BENCHMARKS' current part (above
  "# Archive"), the chapters' markdown (notebooks/NN_*.py) and the figures' titles and captions (string constants in the
  chapter and report code) may not state a measured number (a ratio, a time, a rate, a share,
  a size in bytes) outside a block rendered from a result file (``<!-- results:NAME -->``;
  ``inferlab results render``). What is not measured (a version, a model's or a machine's
  size, a published figure) is on the short list ``ALLOWED``, with why;
* **conflicts**: two records (docs/results/chapters/*.json.gz, docs/results/*.json with a
  ``numbers`` list) may not give one quantity id two values for one workload id.
"""
from __future__ import annotations

import ast
import json
import pathlib
import re

from ..lab import records

REPO = pathlib.Path(__file__).resolve().parents[2]
# a number with a unit that only a measurement gives: a ratio, a time, a rate, a share, bytes
MEASURED = re.compile(r"(?<![\w.\-/])~?\d[\d,]*(?:\.\d+)?(?:[x×%]|\s?(?:ms|µs|us|s|tok/s"
                      r"|tokens/s|req/s|GB/s|TB/s|MB|GB|GiB|MiB|KiB))(?![\w/])")
RENDERED = re.compile(r"<!-- results:(?P<name>[\w-]+) -->.*?<!-- /results:(?P=name) -->", re.S)
# what is not a measurement, where it appears, and why it may be typed
ALLOWED = {
    "README.md": {"2 GB": "Binder's memory per pod (a size of the service)"},
    "BENCHMARKS.md": {"2 GB": "Binder's memory per pod (the reproduced pod's limit)"},
    "docs/reference.md": {"93 MB": "the model wheel's size on PyPI",
                          "2 GB": "Binder's memory per pod", "1.8 GB": "the test's limit",
                          "1 MiB": "the server's body limit (a setting)",
                          "1 s": "flush_interval's default (a setting)"},
    "notebooks/03_prefill_decode.py": {"538 MB": "SmolLM2-135M's fp32 weights: 134.5 M x 4 bytes"},
    "notebooks/05_batching.py": {"8x": "Anyscale's published figure (2023)",
                                 "23x": "Anyscale's published figure (2023)"},
    "notebooks/09_kernels.py": {"80%": "the share of an H200's bandwidth the projection "
                                       "assumes (the lab's stated assumption)"},
    "notebooks/14_your_own_traffic.py": {"1.2x": "the judge's threshold (a rule, not a result)"},
    "notebooks/15_memory_and_price.py": {"80 GB": "an H100's memory (its datasheet)",
                                         "2x": "32-bit against 16-bit numbers (arithmetic)"},
}


def _strip_rendered(text: str) -> str:
    return RENDERED.sub("", text)


def _markdown_of_notebook(src: str) -> str:
    """The markdown cells of a jupytext percent notebook (comment lines under ``[markdown]``)."""
    out, md = [], False
    for line in src.splitlines():
        if line.startswith("# %%"):
            md = "[markdown]" in line
        elif md and line.startswith("#"):
            out.append(line[1:])
    return "\n".join(out)


def _figure_texts(path: pathlib.Path) -> str:
    """The typed parts of the strings a figure shows: titles, captions, annotations."""
    keys = {"title", "title_text", "text", "caption", "subtitle"}
    parts = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.keyword) and node.arg in keys:
            for sub in ast.walk(node.value):
                if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                    parts.append(sub.value)
    return "\n".join(parts)


def surfaces(root=REPO) -> dict[str, str]:
    """Each surface a reader sees, as the text the check reads (rendered blocks removed)."""
    root = pathlib.Path(root)
    out = {}
    if (root / "README.md").exists():
        out["README.md"] = (root / "README.md").read_text(encoding="utf-8")
    if (root / "docs" / "reference.md").exists():
        out["docs/reference.md"] = (root / "docs" / "reference.md").read_text(encoding="utf-8")
    if (root / "BENCHMARKS.md").exists():
        out["BENCHMARKS.md"] = (root / "BENCHMARKS.md").read_text(encoding="utf-8") \
            .split("\n# Archive")[0]
    for nb in sorted((root / "notebooks").glob("[0-9][0-9]_*.py")):
        out[f"notebooks/{nb.name}"] = _markdown_of_notebook(nb.read_text(encoding="utf-8"))
    figure_code = sorted((root / "inferlab" / "lab" / "chapters").glob("*.py")) + \
        [root / "inferlab" / "lab" / "report.py"]
    for py in figure_code:
        if py.exists():
            out[str(py.relative_to(root))] = _figure_texts(py)
    return {k: _strip_rendered(v) for k, v in out.items()}


def typed_numbers(root=REPO, allowed=None) -> list[str]:
    """``surface: number in context`` for each measured-looking number typed by hand."""
    allowed = ALLOWED if allowed is None else allowed
    found = []
    for name, text in surfaces(root).items():
        ok = allowed.get(name, {})
        for m in MEASURED.finditer(text):
            lit = m.group(0).lstrip("~")
            if lit in ok:
                continue
            ctx = " ".join(text[max(0, m.start() - 40):m.end() + 30].split())
            found.append(f"{name}: {m.group(0)!r} in \"...{ctx}...\"")
    return found


def _all_numbers(root) -> list[tuple[str, dict]]:
    root = pathlib.Path(root)
    rows = []
    for p in sorted((root / "docs" / "results" / "chapters").glob(f"*{records.SUFFIX}")):
        rows += [(p.name, n) for n in records.read(p).get("numbers") or []]
    for p in sorted((root / "docs" / "results").glob("*.json")):
        data = json.loads(p.read_text())
        rows += [(p.name, n) for n in (data.get("numbers") or [] if isinstance(data, dict)
                                       else [])]
        for c in (data.get("claims") or [] if isinstance(data, dict) else []):
            rows += [(p.name, n) for n in c.get("numbers") or []]
    return rows


def conflicts(root=REPO) -> list[str]:
    """``quantity @ workload: value (file), value (file)`` for each quantity id given two
    values for one workload id."""
    seen: dict[tuple, list] = {}
    for where, n in _all_numbers(root):
        seen.setdefault((n["quantity"], n["workload"]), []).append((n["value"], where))
    return [f"{q} @ {w}: " + ", ".join(f"{v} ({f})" for v, f in vals)
            for (q, w), vals in seen.items() if len({v for v, _ in vals}) > 1]


def main() -> int:
    typed, clash = typed_numbers(), conflicts()
    for line in typed:
        print("typed:", line)
    for line in clash:
        print("conflict:", line)
    print(f"{len(typed)} typed numbers, {len(clash)} conflicts")
    return 1 if typed or clash else 0


if __name__ == "__main__":
    raise SystemExit(main())
