"""Figures for writers: discovered chapters, deterministic figure data, files written."""
import json

import pytest

from inferlab.lab import book as figures_book
def test_discovers_every_chapter_module():
    names = figures_book.chapter_modules()
    for n in ("ch01_prompt_anatomy", "ch02_tokenization", "ch03_prefill_decode",
              "ch04_kv_cache", "ch05_batching"):
        assert n in names
    assert names == sorted(names) and not any(n.startswith("_") for n in names)


def test_two_runs_give_identical_figure_data():
    a = figures_book.figure_json(figures_book.chapter_figure("ch02_tokenization", smoke=True))
    b = figures_book.figure_json(figures_book.chapter_figure("ch02_tokenization", smoke=True))
    assert a == b
    data = json.loads(a)["data"]
    assert data and all(tr["type"] == "bar" for tr in data)


@pytest.mark.full("tests/test_static_export.py::test_executed_notebook_has_widget_and_png")
def test_build_all_writes_each_format(tmp_path):
    paths = figures_book.build_all(tmp_path, smoke=True, only=["ch01"])
    names = sorted(p.rsplit("/", 1)[-1] for p in paths)
    # chapter 1 draws two figures (book.chapter_figures): the main one and its token view
    assert names == sorted(stem + e for stem in ("ch01_prompt_anatomy",
                                                 "ch01_prompt_anatomy-tokens")
                           for e in (".json", ".pdf", ".png", ".svg"))
    assert all((tmp_path / n).stat().st_size > 1000 for n in names)


def test_figures_draw_from_the_record_without_measuring(tmp_path, monkeypatch):
    """`inferlab figures --id ch05 --theme dark`: chapter 5's figure from its committed record,
    no engine started (measure() would raise), in each format; the same figure as the record's
    measurement drawn by the chapter."""
    from inferlab.cli import main
    from inferlab.lab import records
    from inferlab.lab.chapters import ch05_batching as ch

    def no_measuring(*a, **k):
        raise AssertionError("figures measured instead of reading the record")
    monkeypatch.setattr(ch, "measure", no_measuring)
    assert main(["figures", "--id", "ch05", "--theme", "dark", "--out", str(tmp_path)]) == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    # the chapter's two figures: the seats (main) and the answer-length spread
    assert names == sorted(stem + e for stem in ("ch05_batching", "ch05_batching-spread")
                           for e in (".json", ".pdf", ".png", ".svg"))
    drawn = json.loads((tmp_path / "ch05_batching.json").read_text())
    want = ch.figure(records.load("ch05")["data"])
    want.update_layout(template="inferlab_dark")
    assert drawn == json.loads(figures_book.figure_json(want))
    assert drawn["layout"]["template"]["layout"]["paper_bgcolor"] == "#111111"
