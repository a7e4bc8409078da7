"""README's and BENCHMARKS' marked tables equal what their result files render
(inferlab/tools/results.py, `inferlab results render|check`), and the renderer's own rules on a
temp repository: blocks and inline fragments, the CPU beside every number, a missing result
file named with the command that writes it, a check that fails on a hand edit."""
from __future__ import annotations

import json
import pathlib
import re

import pytest

from inferlab.tools import results

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_committed_tables_match_their_result_files():
    """Every marked block in README.md and BENCHMARKS.md is what `inferlab results render`
    writes from docs/results/ (a missing result file fails here too, by name)."""
    problems = results.check(root=ROOT)
    assert not problems, "\n".join(problems)


def test_the_docs_have_marked_blocks_for_every_committed_result_file():
    """Each result file in docs/results/ that a table is registered for is rendered somewhere
    (a file nobody renders would be a number kept in two places again)."""
    blocks = results.render(root=ROOT, write=False)
    rendered = {results.TABLES[b.name].file for b in blocks if b.name in results.TABLES}
    registered = {t.file for t in results.TABLES.values()}
    present = {p.name for p in (ROOT / results.RESULTS_DIR).glob("*.json")} & registered
    assert present <= rendered, f"result files with no marked block: {present - rendered}"


# ---- the renderer on a temp repository ------------------------------------------------------

COLDSTART = {
    "command": "inferlab bench coldstart --out docs/results/coldstart-xeon.json",
    "date": "2026-12-02 06:40", "cpu": "Test CPU 9000", "cores": 2,
    "load_before": 0.8125, "load_after": 1.42,
    "summary": {name: {ph: {"median": m, "min": m - 0.1, "max": m + 0.2}
                       for ph in ("import", "engine", "first token", "total", "process")}
                for name, m in (("engine files", 3.5), ("transformers", 4.75),
                                ("new CPU (empty numba cache)", 25.0))},
    "runs": {"new CPU (empty numba cache)": [{"said": ["inferlab: compiling ..."]}]},
}

# the shape `inferlab claims --smoke --json --only ch02 ch04` prints (cli.py `_claims`)
CLAIMS = {
    "command": "inferlab claims --smoke --only ch02 ch04 --json",
    "date": "2026-12-02T09:46:39+00:00", "cpu": "Test CPU 9000", "cores": 2, "load": 6.04,
    "smoke": True, "rests_on": {"measured": 2, "projection": 0, "illustration": 0},
    "verdicts": {"holds": 1, "holds, smaller here": 1, "does not hold here": 0},
    "claims": [
        {"id": "02-languages", "chapter": "ch02_tokenization", "claim": "Tokens differ.",
         "source": "x", "rests_on": "measured", "verdict": "holds",
         "measured": "up to 6.76x the tokens", "reason": "Thai 142 vs English 21 | tokens",
         "unit": "tokens", "clock": "none", "warning": None, "points": [["English", 21.0]]},
        {"id": "04-kv-waste", "chapter": "ch04_kv_cache", "claim": "Paged wastes less.",
         "source": "x", "rests_on": "measured", "verdict": "holds, smaller here",
         "measured": "96% vs 9.7%", "reason": "slot counts", "unit": "%", "clock": "none",
         "warning": "busy machine", "points": []},
    ],
}

DOC = """# Title

Intro, cold start <!-- results:coldstart-warm -->old<!-- /results:coldstart-warm --> in a line.

<!-- results:coldstart -->
a hand-written table
<!-- /results:coldstart -->

## Report card

<!-- results:claims -->
<!-- /results:claims -->

| row | <!-- results:coldstart-summary -->x<!-- /results:coldstart-summary --> |

The end.
"""


def make_repo(tmp_path, files=("coldstart-xeon.json", "claims.json"), doc=DOC):
    d = tmp_path / "docs" / "results"
    d.mkdir(parents=True)
    data = {"coldstart-xeon.json": COLDSTART, "claims.json": CLAIMS}
    for name in files:
        (d / name).write_text(json.dumps(data[name]))
    (tmp_path / "README.md").write_text(doc)
    (tmp_path / "BENCHMARKS.md").write_text("# Benchmarks\n\nNothing marked.\n")
    return tmp_path


def test_render_writes_every_block_and_check_then_passes(tmp_path):
    root = make_repo(tmp_path)
    assert len(results.check(root=root)) == 4          # every block still hand-written
    assert results.main("render", root=root, out=lambda *_: None) == 0
    text = (root / "README.md").read_text()
    assert results.check(root=root) == []
    assert results.main("check", root=root, out=lambda *_: None) == 0
    # what is outside the markers is untouched
    assert text.startswith("# Title\n\nIntro, cold start <!-- results:coldstart-warm -->")
    assert text.endswith("\n\nThe end.\n") and "a hand-written table" not in text
    # inline fragments stay on their line, the CPU beside the number
    assert "<!-- results:coldstart-warm -->3.50 s (Test CPU 9000, 2 cores, 2026-12-02)" \
           "<!-- /results:coldstart-warm --> in a line." in text
    row = re.search(r"\| row \| (.*) \|\n", text).group(1)
    assert "3.50 s median (3.40-3.70), against 4.75 s through transformers" in row
    assert "25.0 s, once, saying so" in row and "Test CPU 9000, 2 cores" in row
    # a block: caption with CPU, date, load and command, then the table
    assert ("measured on Test CPU 9000, 2 cores, 2026-12-02 06:40, load 0.81 before and 1.42 "
            "after, by `inferlab bench coldstart --out docs/results/coldstart-xeon.json` "
            "(docs/results/coldstart-xeon.json)") in text
    assert "| engine files | 3.50 (3.40-3.70) | 3.50 (3.40-3.70) | 3.50 (3.40-3.70) |" in text
    # rendering twice changes nothing
    assert results.main("render", root=root, out=lambda *_: None) == 0
    assert (root / "README.md").read_text() == text


def test_claims_table_from_the_json_of_inferlab_claims(tmp_path):
    root = make_repo(tmp_path)
    results.render(root=root)
    text = (root / "README.md").read_text()
    block = text.split("<!-- results:claims -->")[1].split("<!-- /results:claims -->")[0]
    assert block.startswith("\n\nSmoke run, measured on Test CPU 9000, 2 cores, "
                            "2026-12-02 09:46 UTC, load 6.04, by `inferlab claims --smoke "
                            "--only ch02 ch04 --json` (docs/results/claims.json): 1 holds; "
                            "1 holds, smaller here (rests on: 2 measured).")
    rows = [r for r in block.splitlines() if r.startswith("| ")]
    assert rows[0] == "| claim | chapter | rests on | measured | verdict | reason |"
    assert rows[1] == ("| Tokens differ. | ch02 | measured | up to 6.76x the tokens | **holds** "
                       "| Thai 142 vs English 21 \\| tokens |")        # a | in a cell escaped
    assert rows[2].endswith("| **holds, smaller here** | slot counts (busy machine) |")


def test_a_hand_edit_inside_a_block_fails_the_check(tmp_path):
    root = make_repo(tmp_path)
    results.render(root=root)
    readme = root / "README.md"
    readme.write_text(readme.read_text().replace("3.50 s (Test CPU", "3.4 s (Test CPU"))
    problems = results.check(root=root)
    assert problems == ["README.md: results:coldstart-warm: differs from its result file "
                        "(run `inferlab results render`)"]
    assert results.main("check", root=root, out=lambda *_: None) == 1


def test_a_missing_result_file_is_named_with_the_command_that_writes_it(tmp_path):
    root = make_repo(tmp_path, files=("coldstart-xeon.json",))
    problems = [p for p in results.check(root=root) if "results:claims" in p]
    assert problems == ["README.md: results:claims: result file docs/results/claims.json does "
                        "not exist; `inferlab record (each chapter's full run; the report card "
                        "judged on the records)` writes it"]
    said = []
    assert results.main("render", root=root, out=said.append) == 1
    assert any("NOT RENDERED" in s and "claims.json" in s for s in said)
    text = (root / "README.md").read_text()        # the others were rendered, it was kept
    assert "<!-- results:claims -->\n<!-- /results:claims -->" in text
    assert "3.50 s (Test CPU 9000" in text


def test_a_result_file_without_its_cpu_is_refused(tmp_path):
    root = make_repo(tmp_path)
    no_cpu = {k: v for k, v in COLDSTART.items() if k != "cpu"}
    (root / "docs/results/coldstart-xeon.json").write_text(json.dumps(no_cpu))
    problems = results.check(root=root)
    assert problems and all("records no CPU" in p for p in problems if "coldstart" in p)


@pytest.mark.parametrize("doc, message", [
    ("<!-- results:nonesuch -->x<!-- /results:nonesuch -->\n", "unknown results block"),
    ("<!-- results:coldstart -->\nno end\n", "no closing marker for coldstart"),
])
def test_unknown_or_unclosed_markers_are_errors(tmp_path, doc, message):
    root = make_repo(tmp_path, doc=doc)
    if "closing" in message:
        with pytest.raises(results.ResultsError, match=message):
            results.check(root=root)
    else:
        assert message in results.check(root=root)[0]


def test_an_inline_block_never_spans_lines(tmp_path):
    table = results.Table("multi", "claims.json", "make it", lambda res, f: "a\nb",
                          inline=True)
    root = make_repo(tmp_path)
    _, blocks = results.render_text("<!-- results:multi -->x<!-- /results:multi -->", "d",
                                    root, tables={"multi": table})
    assert blocks[0].new is None and "one line" in blocks[0].error


def test_cli_results_check_runs():
    from inferlab.cli import main
    assert main(["results", "check"]) in (0, 1)      # the committed state is the first test's


def test_bench_out_writes_a_result_file_with_its_command_and_machine(tmp_path, capsys):
    """`inferlab bench engine|vllm|gemm|roofline --out FILE` (cli.py `_save`): the numbers
    under "results", beside the command as typed, the date, the CPU, its cores and the load."""
    import argparse

    from inferlab.cli import _save
    path = tmp_path / "sub" / "vllm.json"
    args = argparse.Namespace(out=str(path), argv=["bench", "vllm", "--out", str(path)])
    _save(args, {"tok_s": {"inferlab": 305.8, "vLLM": 254.7}, "ratio": 1.2, 32: (1, 2)})
    res = json.loads(path.read_text())
    assert res["command"] == f"inferlab bench vllm --out {path}"
    assert res["results"] == {"tok_s": {"inferlab": 305.8, "vLLM": 254.7}, "ratio": 1.2,
                              "32": [1, 2]}
    assert res["cpu"] and res["cores"] >= 1 and isinstance(res["load"], float)
    assert results.machine(res).startswith(res["cpu"])
    assert "written to" in capsys.readouterr().out
    _save(argparse.Namespace(out=None, argv=[]), {"x": 1})     # no --out: nothing written
