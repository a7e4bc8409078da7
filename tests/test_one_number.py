"""One number, one place (inferlab.tools.one_number): no measured number typed by hand where a
reader sees it, and no quantity with two values for one workload across the records."""
import gzip
import json
import pathlib
import shutil

from inferlab.lab import records
from inferlab.tools import one_number

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_no_measured_number_is_typed_by_hand():
    assert one_number.typed_numbers() == []


def test_no_quantity_has_two_values_for_one_workload():
    assert one_number.conflicts() == []


def _tree(tmp_path) -> pathlib.Path:
    """A copy of the surfaces the check reads."""
    for rel in ("README.md", "BENCHMARKS.md", "notebooks", "inferlab/lab/chapters",
                "inferlab/lab/report.py"):
        src, dst = REPO / rel, tmp_path / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dst)
    return tmp_path


def test_a_typed_number_fails_on_every_surface(tmp_path):
    root = _tree(tmp_path)
    with open(root / "README.md", "a") as f:
        f.write("\nContinuous batching is 1.53x faster.\n"
                "<!-- results:x -->rendered 9.9x<!-- /results:x -->\n")
    bench = (root / "BENCHMARKS.md").read_text()
    head, archive = bench.split("\n# Archive", 1)
    (root / "BENCHMARKS.md").write_text(head + "\nTTFT 706 ms here.\n# Archive" + archive
                                        + "\nan old 3.89x\n")
    nb = root / "notebooks" / "05_batching.py"
    nb.write_text(nb.read_text() + "\n# %% [markdown]\n# Paged waste is 2.8% here.\n")
    ch = root / "inferlab" / "lab" / "chapters" / "ch05_batching.py"
    ch.write_text(ch.read_text() + '\n\ndef _f(fig):\n    fig.update_layout(title_text='
                  'f"continuous {1}: 79.9 tok/s")\n')
    found = one_number.typed_numbers(root)
    assert [f.split(":")[0] for f in found] == [
        "README.md", "BENCHMARKS.md", "notebooks/05_batching.py",
        "inferlab/lab/chapters/ch05_batching.py"], found
    assert "'1.53x'" in found[0] and "'706 ms'" in found[1] and "'2.8%'" in found[2]
    assert "'79.9 tok/s'" in found[3]
    assert not any("9.9x" in f or "3.89x" in f for f in found)   # rendered, archived


def test_two_values_for_one_quantity_and_workload_conflict(tmp_path):
    out = tmp_path / "docs" / "results" / "chapters"
    out.mkdir(parents=True)
    n = {"quantity": "05-throughput:continuous", "workload": "ch05-full", "unit": "tok/s"}
    for name, value in (("a", 79.9), ("b", 63.8)):
        (out / f"{name}.json.gz").write_bytes(records.dumps({"numbers": [{**n, "value": value}]}))
    other = dict(n, workload="ch05-smoke", value=12.0)      # another workload: no conflict
    (tmp_path / "docs" / "results" / "x.json").write_text(json.dumps({"numbers": [other]}))
    got = one_number.conflicts(tmp_path)
    assert got == ["05-throughput:continuous @ ch05-full: 79.9 (a.json.gz), 63.8 (b.json.gz)"]
    assert gzip.decompress((out / "a.json.gz").read_bytes())         # a real gzip file
