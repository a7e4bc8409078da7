"""inferlab.tools.test_times: a real pytest run's JUnit report (test modules and an nbval
notebook) summed per file, and BENCHMARKS' "Test tiers" table rendered from the result."""
import json
import subprocess
import sys

import nbformat
import pytest

from inferlab.tools import test_times
from inferlab.tools import result_tables


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    d = tmp_path_factory.mktemp("suite")
    (d / "test_a.py").write_text("import pytest\n"
                                 "def test_ok(): pass\n"
                                 "def test_bad(): assert 1 == 2\n"
                                 "@pytest.mark.skip('no')\n"
                                 "def test_skipped(): pass\n"
                                 "class TestGroup:\n"
                                 "    def test_in_class(self): pass\n")
    (d / "test_b.py").write_text("def test_ok(): pass\n")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1"),
                                         nbformat.v4.new_code_cell("2 + 2")])
    nbformat.write(nb, d / "note.ipynb")
    xml = d / "report.xml"
    (d / "pytest.ini").write_text("[pytest]\n")         # not the repository's settings
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c",
                    str(d / "pytest.ini"), "--rootdir", str(d), "--nbval-lax",
                    "--nbval-current-env", f"--junitxml={xml}", str(d)],
                   cwd=d, capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr      # test_bad fails, nothing else
    return test_times.read_report(xml)


def test_a_report_is_summed_per_file_with_its_counts(report):
    assert set(report["files"]) == {"test_a.py", "test_b.py", "note.ipynb"}, report["files"]
    assert (report["passed"], report["failed"], report["skipped"]) == (5, 1, 1)
    assert report["tests"] == 7 and "wall_s" in report


def test_the_table_names_each_tier_and_file(report, tmp_path):
    res = {"command": "x", "date": "2026-12-06T06:00:00+00:00", "cpu": "AMD EPYC",
           "flags": ["avx2", "avx512f"], "cores": 2, "load": 1.0,
           "tiers": {"default": report, "all": report}}
    text = result_tables.tests_table(res, "docs/results/tests.json", shown_s=0)
    assert "| `make test` |" in text and "| `make test-all` |" in text
    assert all(f"`{f}`" in text for f in report["files"])
    assert "AMD EPYC (avx2, avx512f), 2 cores" in text


def test_a_missing_report_says_which(tmp_path, capsys):
    with pytest.raises(SystemExit):
        test_times.main([f"default={tmp_path / 'nope.xml'}"])
    assert "nope.xml" in capsys.readouterr().err


def test_the_result_file_records_the_machine(report, tmp_path):
    xml = tmp_path / "r.xml"
    xml.write_text('<testsuites><testsuite time="2.5"><testcase classname="tests.test_x" '
                   'name="test_y" time="2.0"/></testsuite></testsuites>')
    out = tmp_path / "out.json"
    assert test_times.main([f"default={xml}", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert {"command", "date", "cpu", "flags", "cores", "load"} <= set(res)
    assert res["tiers"]["default"]["files"] == {"tests/test_x.py": 2.0}
