"""Chapters 9, 10 and 15 drawn from their committed records (issue 42): each figure makes one
point, says its ratio in numbers read from the record, and wears the palette by meaning.
Quick: no measuring, no browser (inferlab.tools.figure_check measures the text)."""
from __future__ import annotations

import pytest

from inferlab.lab import records
from inferlab.lab.chapters import ch09_kernels, ch10_multi_gpu, ch15_memory_and_price as ch15
from inferlab.lab.chapters._ch15_figures import PACKED
from inferlab.tools.figure_check import colour_problems


@pytest.fixture(scope="module")
def rec():
    return {n: records.load(n)["data"] for n in ("ch09_kernels", "ch10_multi_gpu",
                                                  "ch15_memory_and_price")}


def _texts(fig) -> str:
    return " ".join([fig.layout.title.text or ""] + [a.text or "" for a in fig.layout.annotations])


def test_ch09_is_dots_with_the_speedup_and_an_estimate_said_as_one(rec):
    d = rec["ch09_kernels"]
    fig = ch09_kernels.figure(d)
    assert not [t for t in fig.data if t.type == "bar"]            # no bars on a log axis
    assert "recorded" not in " ".join(a.text or "" for a in fig.layout.annotations)
    est = [t for t in fig.data if "estimate" in (t.name or "")]
    assert len(est) == 1 and est[0].mode == "markers" and d["roof_gpu"] in est[0].name
    sp = [r["speedup"] for r in d["rows"]]
    assert f"{min(sp):.1f}x" in fig.layout.title.text and f"{max(sp):.1f}x" in fig.layout.title.text
    ratios = next(t for t in fig.data if t.mode == "text")
    assert list(ratios.text) == [f"{s:.1f}x" for s in sp]
    assert colour_problems(fig, "ch09") == []


def test_ch10_heading_is_plain_and_says_the_speedup(rec):
    d = rec["ch10_multi_gpu"]
    fig = ch10_multi_gpu.figure(d)
    title = fig.layout.title.text
    assert "SIMULATED" not in title and title.count("<sup>") == 1
    rows = d["models"]["llama-3-8b"]
    # the heading's ratio, read from the simulated H100's step times (a projection, no clock)
    said = f"{rows[0]['step_ms'] / rows[-1]['step_ms']:.1f}x faster, not {rows[-1]['tp']}x"
    assert said in title
    assert "does not fit" in _texts(fig)
    assert colour_problems(fig, "ch10") == []


def test_ch15_draws_one_figure_per_story(rec):
    d = rec["ch15_memory_and_price"]
    figs = ch15.figures(d)
    assert list(figs) == ["", "capacity", "memory"]
    assert ch15.figure(d).to_json() == figs[""].to_json()
    for k, fig in figs.items():
        assert colour_problems(fig, k) == [], k
    # the price: the measured ratios and the published ones are markers, the measured grey
    price = figs[""]
    assert {t.type for t in price.data} == {"scatter"}
    one = d["price"]["rows"][0]
    assert f"{one['ratio']:.1f}x" in price.layout.title.text
    # the capacity: how many ran at once, from the record
    lo = d["capacity"]["long"]
    assert f"{lo['max_running']} of {lo['requests']} long" in figs["capacity"].layout.title.text
    # the memory: the weights' packed copy apart, MB and GB on axes of their own
    mem = figs["memory"]
    names = {t.name for t in mem.data}
    assert "weights" in names and PACKED in names
    packed = sum(sum(t.x) for t in mem.data if t.name == PACKED)
    assert packed == pytest.approx(2 * d["memory"]["weights_packed"] / 1e6)  # idle and peak
    assert {mem.layout.xaxis.ticksuffix, mem.layout.xaxis2.ticksuffix} == {" MB", " GB"}


def test_ch15_without_a_price_has_no_empty_figure(rec):
    d = {k: v for k, v in rec["ch15_memory_and_price"].items() if k != "price"}
    figs = ch15.figures(d)
    assert list(figs) == ["", "memory"]
    assert "KV budget" in figs[""].layout.title.text
