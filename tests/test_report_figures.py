"""The report card's figures, on made-up verdicts: published values are markers or ranges,
never bars; plain numbers (no scientific notation); log ratio axes with round ticks; parts
that add up drawn stacked; policies in their own colours; the verdict named in the legend."""
from __future__ import annotations

import json

import pytest

from inferlab.lab import figures, palette, report
from inferlab.lab.verdicts import (HOLDS, HOLDS_SMALLER, ILLUSTRATED, MEASURED, Claim,
                                   Verdict)


def claim(cid="99-test", kind=MEASURED):
    return Claim(cid, "a claim", "\"a\" in \"b\"", "ch05_batching", lambda s: {},
                 lambda d: None, kind=kind)


def test_numbers_are_plain_with_separators():
    assert report.number(10849.0) == "10,849"
    assert report.number(1.3299, "throughput (x)") == "1.33x"
    assert report.number(94.95, "% of KV slots wasted") == "95%"
    assert report.number(0.00001234) == "0.000012"
    assert all("e" not in report.number(v) for v in (1e-7, 3e9, 123456.7))
    assert figures.log_ticks(1e-4, 300, " ms")[1] == [
        "0.0001 ms", "0.001 ms", "0.01 ms", "0.1 ms", "1 ms", "10 ms", "100 ms"]
    assert figures.log_ticks(1, 10, "x") == ([1, 2, 5, 10], ["1x", "2x", "5x", "10x"])


def test_published_values_are_markers_and_ranges_not_bars():
    v = Verdict(HOLDS, "95% vs 60-80% published", "95%", points=(
        ("contiguous", 95.0), ("contiguous", (60.0, 80.0), "published"),
        ("paged", 2.8), ("paged", (0.0, 4.0), "published")), unit="% of KV slots wasted")
    fig = report.figure(claim(), v)
    bars = [t for t in fig.data if t.type == "bar"]
    assert len(bars) == 1 and list(bars[0].x) == [95.0, 2.8]
    assert bars[0].marker.color == report.VERDICT_COLORS[HOLDS]
    assert bars[0].name == f"measured: {HOLDS}"                  # the verdict key
    ranges = [t for t in fig.data if t.type == "scatter"]
    assert [list(t.x) for t in ranges] == [[60.0, 80.0], [0.0, 4.0]]
    assert {a.text for a in fig.layout.annotations} >= {"60-80%", "under 4%"}
    assert fig.layout.yaxis.automargin and fig.layout.margin.l < 170


def test_ratios_spanning_decades_get_a_log_axis_with_round_ticks():
    v = Verdict(HOLDS_SMALLER, "8x published; 1.33x here", "1.33x", points=(
        ("published", 8.0, "published"), ("wall clock", 1.33),
        ("ideal", 1.76, "reference")), unit="throughput, continuous / static (x)",
        axis="log")
    fig = report.figure(claim(), v)
    ax = fig.layout.xaxis
    assert ax.type == "log" and list(ax.tickvals) == [1, 2, 5, 10]
    assert list(ax.ticktext) == ["1x", "2x", "5x", "10x"]
    marker = next(t for t in fig.data if t.type == "scatter")
    assert marker.marker.symbol == "diamond" and list(marker.x) == [8.0]
    assert any("ideal: 1.76x" in a.text for a in fig.layout.annotations)
    assert fig.layout.shapes                                     # the reference line


def test_parts_that_add_up_are_stacked_and_policies_take_their_colours():
    v = Verdict(HOLDS, "the check adds 103 ms", "+103 ms", points=(
        ("input check", 103.0), ("answer's own TTFT", 80.0),
        ("time to first token", 183.0, "total")), unit="ms before the first token",
        chart="stack")
    fig = report.figure(claim(), v)
    wf = next(t for t in fig.data if t.type == "waterfall")
    assert list(wf.measure) == ["relative", "relative", "total"]
    v = Verdict(HOLDS, "1.37x lower median", "1.37x", points=(
        ("median", 15.0, "static"), ("median", 11.0, "continuous")), unit="E2E (ms)")
    fig = report.figure(claim(), v)
    assert {t.name: t.marker.color for t in fig.data} == {
        "static": palette.POLICY["static"], "continuous": palette.POLICY["continuous"]}


def test_records_round_trip_and_the_summary_is_the_key():
    v = Verdict(HOLDS, "1 of 2", "x", points=(("a", 1.0), ("b", (1.0, 2.0), "published")),
                unit="u", clock="none", chart="bars", axis="log")
    c = claim()
    rec = json.loads(json.dumps(report.as_records([(c, None, v)])))[0]
    assert rec["points"] == [["a", 1.0], ["b", [1.0, 2.0], "published"]]
    assert report.verdict_from_record(rec) == v
    with pytest.raises(ValueError):
        report.figure(c, Verdict(HOLDS, "1", points=(("a", 1.0, "bogus"),)))
    results = [(c, None, v), (claim("98-x", "illustration"), None,
                              Verdict(ILLUSTRATED, "1 shown", points=(("a", 1.0),)))]
    fig = report.summary_figure(results)
    assert [t.name for t in fig.data] == [f"{HOLDS} (1)", f"{ILLUSTRATED} (1)"]
    assert [t.marker.color for t in fig.data] == [report.VERDICT_COLORS[HOLDS],
                                                  report.VERDICT_COLORS[ILLUSTRATED]]


def test_every_claims_figure_draws_from_the_smoke_run(claims_smoke):
    """Each claim's own verdict draws: published values never as bars, no number in
    scientific notation, the verdict named in the legend."""
    for c, _, v in claims_smoke:
        fig = report.figure(c, v)
        # a published point's row in the figure: "<label>, published" (report.figure)
        published = {lb if "published" in lb else f"{lb}, published"
                     for lb, _, role in map(report.point_parts, v.points)
                     if role == report.PUBLISHED}
        for t in fig.data:
            if t.type == "bar":
                assert not published & {str(y).replace("<br>", " ") for y in t.y}, c.id
            assert not any("e+" in str(s) or "e-" in str(s) for s in (t.text or ())), c.id
        assert any(v.verdict in (t.name or "") for t in fig.data) or any(
            t.name in palette.POLICY for t in fig.data), c.id


def test_nothing_measured_draws_the_reason_and_the_busy_warning_stays_clear():
    """A verdict without points (not measurable here) draws its reason, not a crash; a
    busy-machine warning sits on the clock's line, clear of the axis title."""
    from inferlab.lab.verdicts import UNMEASURABLE
    fig = report.figure(claim(), Verdict(UNMEASURABLE, "no wall-clock runs (0 repeats)"))
    assert any("0 repeats" in a.text for a in fig.layout.annotations)
    assert [t.name for t in fig.data] == [f"measured: {UNMEASURABLE}"]
    assert fig.data[0].marker.color == palette.VERDICT[UNMEASURABLE]
    assert fig.layout.title.text.endswith(UNMEASURABLE)
    busy = report.figure(claim(), Verdict(HOLDS, "2x here", "2x", points=(("a", 2.0),),
                                          clock="wall", warning="WARNING: busy machine"))
    assert "busy machine" in busy.layout.title.text
    assert not any("busy" in (a.text or "") for a in busy.layout.annotations)
