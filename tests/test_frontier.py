"""The sweep's frontier (inferlab.lab.drawings.frontier) and SweepView without a browser:
which points are on the frontier, what the figure draws (every point that ran, the frontier
line, error bars from the spread, hover with the varying knobs and TTFT/ITL, failed points in
a note), a projection saying so, the article profile printing it, and a point opened from its
trace file (or the view saying why not). The browser test is tests/test_browser_sweep.py."""
import struct

import pytest

import inferlab as il
from inferlab.lab import article, figures, palette
from inferlab.lab.drawings import frontier
from inferlab.observe.metrics import request_metrics
from inferlab.observe.trace import Trace
from inferlab.tools import figure_check


def row(point, seqs, tok=None, per=None, *, error=None, spread=True, clock="wall",
        projection=False, trace_path=None):
    m = {} if error else {
        "output_tok_s": tok, "output_tok_s_per_user": per, "ttft_p50_ms": 10.0 + point,
        "ttft_p99_ms": 30.0 + point, "itl_p50_ms": 4.0 + point, "itl_p99_ms": 9.0 + point,
        "spread": {"output_tok_s": [tok * 0.9, tok * 1.05],
                   "output_tok_s_per_user": [per * 0.95, per * 1.1]} if spread else {}}
    return {"point": point, "knobs": {"max_num_seqs": seqs, "block_size": 16}, "metrics": m,
            "trace_path": trace_path, "error": error, "clock": clock, "projection": projection}


# (per user, total): 0..3 trade one for the other; 4 is beaten by 2 in both; 5 failed
ROWS = [row(0, 1, 40.0, 40.0), row(1, 2, 72.0, 36.0), row(2, 4, 120.0, 30.0),
        row(3, 8, 150.0, 18.75), row(4, 16, 100.0, 25.0),
        row(5, 32, error="RuntimeError: KV cache too small for 32 sequences")]


def _by_name(fig):
    return {tr.name.split(",")[0]: tr for tr in fig.data}


def test_the_frontier_is_the_points_nothing_beats():
    assert frontier.frontier_points(ROWS) == [3, 2, 1, 0]        # per user rising
    # a point beaten in one number and tied in the other is off it; an exact twin is on it
    tied = ROWS + [row(6, 3, 120.0, 29.0), row(7, 4, 120.0, 30.0)]
    assert frontier.frontier_points(tied) == [3, 2, 7, 1, 0]
    assert frontier.frontier_points([ROWS[5]]) == []
    assert [r["point"] for r in frontier.failed(ROWS)] == [5]
    assert frontier.varying_knobs(ROWS) == ["max_num_seqs"]


def test_the_figure_draws_points_frontier_spread_and_a_note():
    fig = frontier.figure(ROWS, selected=2)
    tr = _by_name(fig)
    pts, line, ring = tr["sweep points"], tr["frontier"], tr["shown beside"]
    assert list(pts.customdata) == [0, 1, 2, 3, 4]               # every point that ran
    assert list(line.customdata) == [3, 2, 1, 0] and 4 not in line.customdata
    assert list(line.x) == sorted(line.x) and line.mode == "lines+markers+text"
    assert list(line.text) == ["8", "4", "2", "1"]               # the knob that varies
    assert "labelled max_num_seqs" in line.name
    assert list(ring.customdata) == [2] and ring.showlegend
    # error bars: the spread [min, max] around each point
    assert pts.error_y.array[0] == pytest.approx(2.0) and pts.error_y.arrayminus[0] == 4.0
    assert pts.error_x.array[3] == pytest.approx(1.875)
    # hover: the point's varying knobs (not the fixed block size), TTFT and ITL p50/p99
    h = pts.hovertext[2]
    assert "max_num_seqs=4" in h and "block_size" not in h
    assert "TTFT p50 12 ms · p99 32 ms" in h and "ITL p50 6 ms · p99 11 ms" in h
    # the failed point is not drawn, it is named under the title; the ratio is computed
    title = fig.layout.title.text
    assert "not plotted: point 5 (max_num_seqs=32) failed: RuntimeError" in title
    assert "3.8× more in total, or 2.1× more per user" in title
    assert "clock: wall" in title and "Projection" not in title
    assert fig.layout.xaxis.title.text.startswith("output tokens/s per user")
    assert fig.layout.yaxis.title.text.startswith("output tokens/s in total")


def test_the_narrow_pane_keeps_its_title_short():
    """SweepView's pane (~450 px): title lines of at most 48 characters, failed points
    counted (the pane lists them beside); the same traces as the full figure."""
    fig = frontier.figure(ROWS, narrow=True)
    heading, clock, notes = article.parse_title(fig.layout.title.text)
    assert all(len(line) <= frontier.NARROW_CHARS for line in heading.split("<br>")), heading
    assert notes == ["not plotted: 1 failed point, listed beside"] and clock == "wall"
    assert [t.name for t in fig.data] == [t.name for t in frontier.figure(ROWS).data]


def test_colours_are_neutral_series():
    fig = frontier.figure(ROWS, selected=2)
    assert figure_check.colour_problems(fig, "frontier") == []
    colours = {c for tr in fig.data for c in (tr.marker.color, tr.line.color) if c}
    assert {palette.SERIES["main"], palette.SERIES["baseline"]} <= colours
    assert all(palette.is_grey(c) for c in colours), colours
    dark = frontier.figure(ROWS, dark=True)       # the dark page's greys, same ranks
    assert dark.data[1].line.color == palette.on_dark(palette.SERIES["main"]) != \
        palette.SERIES["main"]
    # break it: a frontier in a policy's hue is caught
    fig.data[1].line.color = palette.POLICY["static"]
    assert figure_check.colour_problems(fig, "frontier")


def test_a_projection_says_so():
    clock = "H100 (simulated, llama shape)"
    rows = [dict(r, clock=clock, projection=True) for r in ROWS]
    title = frontier.figure(rows).layout.title.text
    assert title.startswith("Projection. Sweep") and "a projection from the cost model" in title
    heading, clk, _ = article.parse_title(title)
    assert article.clock_tag(clk) == "projection: H100 cost model"


def test_no_point_ran():
    fig = frontier.figure([ROWS[5]])
    assert len(fig.data[0].x) == 0 and "nothing to plot" in fig.layout.annotations[0].text


@pytest.fixture(scope="module")
def page():
    from playwright.sync_api import sync_playwright

    from inferlab.tools.jupyter import CHROMIUM, CHROMIUM_ARGS
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser.new_page(viewport={"width": article.COLUMN, "height": 900})
        browser.close()


def test_the_article_profile_prints(tmp_path, page):
    """Exported as an article prints it (1600 px, light and dark, caption beside), with no
    text out of the canvas, over another, or under 14 px."""
    fig = frontier.figure(ROWS)
    for dark in (False, True):
        twin = article.profile(fig, dark=dark, cores=2)
        probs = figure_check.text_problems(figure_check.text_boxes(page,
                                                                   figure_check.svg_of(twin)))
        assert probs == [], (dark, probs)
    out = figures.save(fig, tmp_path / "frontier.png", profile="article")
    png = (tmp_path / "frontier.png").read_bytes()
    assert struct.unpack(">I", png[16:20])[0] == 1600
    assert (tmp_path / "frontier-dark.png").exists() and out.endswith("frontier.png")
    caption = (tmp_path / "frontier.caption.md").read_text()
    assert "Clock: wall." in caption and "point 5" in caption


# --- SweepView, without a browser ---------------------------------------------------------------
@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """Two real runs of the tiny model, one request at a time and four, saved to files."""
    from inferlab.sim.workloads import run_workload, synthetic
    folder = tmp_path_factory.mktemp("sweep")
    rows = []
    for i, seqs in enumerate((1, 4)):
        eng = il.Engine("tiny", num_blocks=64, block_size=4, max_num_seqs=seqs)
        trace = Trace.record(eng)
        run_workload(eng, synthetic(4, prompt_len=10, output_len=5, seed=1), progress=False)
        trace.stop()
        path = str(folder / f"point{i}.json")
        trace.save(path)
        per = request_metrics(trace.records, trace.requests)
        tok = sum(m.num_output_tokens for m in per.values()) / trace.duration
        rows.append(row(i, seqs, tok, tok / seqs, spread=False, trace_path=path))
    return rows


def test_sweep_view_opens_a_point_from_its_trace(traces):
    from inferlab.widgets import SweepView
    rows = traces + [dict(traces[0], point=2, trace_path=traces[0]["trace_path"] + ".gone"),
                     row(3, 8, error="MemoryError: out of KV blocks")]
    view = SweepView.from_result(type("Result", (), {"rows": rows})())
    assert "not plotted (failed)" in view.caption.value and "MemoryError" in view.caption.value
    for point in (1, 0):
        trace = view.open_point(point)
        want = Trace.load(rows[point]["trace_path"])
        assert len(trace) == len(want) and view.timeline.num_steps == len(want)
        assert view.kv_map.num_steps == len(want) and view.shown == point
        assert view.plot.picked == point and list(view.plot.figure().data[2].customdata) == [point]
        assert list(view.figure(ringed=True).data[2].customdata) == [point]
        assert len(view.figure().data[2].x) == 0          # an export rings nothing
        assert f"{len(want)} steps, 4 requests" in view.caption.value
        assert f"max_num_seqs={rows[point]['knobs']['max_num_seqs']}" in view.caption.value
    assert view.runs.children == tuple(view.views) and view.runs.layout.display == ""
    # a missing file, a failed point: said in the caption, the runs hidden, no exception
    assert view.open_point(2) is None and "is not there" in view.caption.value
    assert view.runs.layout.display == "none" and view.plot.picked == -1
    assert view.open_point(3) is None and "point 3 failed: MemoryError" in view.caption.value
    assert view.open_point(9) is None and "no point 9" in view.caption.value
    # the page's click is a message naming the point
    view.plot._on_page_msg(view.plot, {"event": "pick", "point": 1}, [])
    assert view.shown == 1
    assert repr(view).startswith("SweepView(4 points") and repr(view).endswith("1 failed)")
    data, _ = view._repr_mimebundle_()             # GitHub's picture: the frontier
    assert data["text/plain"] == repr(view) and data.get("image/png")
    with pytest.raises(TypeError, match="no .rows"):
        SweepView.from_result(object())
