"""How long the test tiers take: pytest's JUnit XML reports summed per file into a result file.

    make test PYTEST_ARGS=--junitxml=/tmp/default.xml
    make test-all PYTEST_ARGS=--junitxml=/tmp/all.xml
    python -m inferlab.tools.test_times default=/tmp/default.xml all=/tmp/all.xml \\
        --out docs/results/tests-amd.json

Each report gives its tier's pytest wall time (the test suite's ``time``), the counts
(passed, failed, skipped) and the seconds per file: every test's setup, call and teardown summed
per test module, and every nbval cell summed per notebook. The result file carries the command,
date, CPU with its flags and load like every other (``protocol.result_meta``); BENCHMARKS.md
renders its "Test tiers" table from it (``inferlab results render``).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import xml.etree.ElementTree as ET

from inferlab.errors import InferlabError


class TestTimesError(InferlabError, ValueError):
    """A report is missing or is not pytest's JUnit XML; the message names it."""


def _file_of(case: ET.Element) -> str:
    """The file a test case belongs to: nbval names notebooks by path in ``file`` or in the
    class name ('notebooks.01_x.ipynb'); a module's tests carry 'tests.test_x' as class name."""
    if case.get("file"):
        return case.get("file")
    cls = case.get("classname", "")
    if ".ipynb" in cls:
        return cls.split(".ipynb")[0].replace(".", "/") + ".ipynb"
    parts = cls.split(".")
    mods = [i for i, p in enumerate(parts) if p.startswith("test_") or p == "conftest"]
    end = mods[0] + 1 if mods else len(parts)
    return "/".join(parts[:end]) + ".py"


def read_report(path) -> dict:
    """One JUnit XML report -> {'wall_s', 'started', 'tests', 'passed', 'failed', 'skipped',
    'files'}."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        raise TestTimesError(f"{path}: not a readable JUnit XML report ({e})") from None
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        raise TestTimesError(f"{path}: no <testsuite> (write it with pytest --junitxml)")
    files: dict[str, float] = {}
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for case in suite.iter("testcase"):
        f = _file_of(case)
        files[f] = files.get(f, 0.0) + float(case.get("time", 0) or 0)
        if case.find("failure") is not None or case.find("error") is not None:
            counts["failed"] += 1
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return {"wall_s": round(float(suite.get("time", 0)), 1), "started": suite.get("timestamp"),
            "tests": sum(counts.values()), **counts,
            "files": {k: round(v, 1) for k, v in sorted(files.items(), key=lambda kv: -kv[1])}}


def main(argv=None) -> int:
    from inferlab.lab.protocol import result_meta
    p = argparse.ArgumentParser(prog="python -m inferlab.tools.test_times",
                                description=__doc__.split("\n")[0])
    p.add_argument("reports", nargs="+", metavar="TIER=REPORT.xml",
                   help="a tier's name and its pytest --junitxml report")
    p.add_argument("--out", help="the result file (default: print)")
    args = p.parse_args(argv)
    tiers = {}
    for spec in args.reports:
        tier, sep, path = spec.partition("=")
        if not sep or not tier or not path:
            p.error(f"{spec!r}: give TIER=REPORT.xml, e.g. default=/tmp/default.xml")
        try:
            tiers[tier] = read_report(path)
        except TestTimesError as e:
            p.error(str(e))
    cmd = "python -m inferlab.tools.test_times " + " ".join(
        [*args.reports, *(["--out", args.out] if args.out else [])])
    text = json.dumps({**result_meta(cmd), "tiers": tiers}, indent=1)
    if args.out:
        pathlib.Path(args.out).write_text(text + "\n", encoding="utf-8")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
