"""The drawings behind the scheduler timeline, the token stream and the batching comparison
(inferlab.lab.drawings): what each must show at a glance (issue 26), on the tiny model."""
import pytest

import inferlab as il
from inferlab.lab import figures, palette
from inferlab.lab.drawings import comparison, timeline, token_stream
from inferlab.observe.trace import Trace
from inferlab.sim.workloads import CappedExponential, run_workload, synthetic
from inferlab.widgets import BatchingComparison, SchedulerTimeline, TokenStream

SEATS = 2


def _run(scheduler: str, n: int = 6) -> Trace:
    work = synthetic(n, prompt_len=12, output_len=CappedExponential(6, 14), seed=3)
    eng = il.Engine("tiny", scheduler=scheduler, max_num_seqs=SEATS, num_blocks=64,
                    block_size=4, clock="H100", sim_model="llama-3-8b")
    trace = Trace.record(eng)
    run_workload(eng, work, progress=False)
    return trace.stop()


@pytest.fixture(scope="module")
def runs():
    return {s: _run(s) for s in ("static", "continuous")}


def _names(fig):
    return [tr.name for tr in fig.data if tr.showlegend is not False]


def test_time_unit_is_ms_below_two_seconds_and_s_above():
    assert timeline.time_unit(1.999) == (1e3, "ms")
    assert timeline.time_unit(2.0) == (1.0, "s")
    assert timeline.fmt_time(0.0123, "ms") == "12.3 ms"
    assert timeline.fmt_time(3.5, "s") == "3.5 s"
    assert [timeline.int_ticks(t) for t in (1, 3, 6, 40, 512)] == [1, 1, 2, 20, 200]


def test_timeline_lanes_strips_and_end_marks(runs):
    tr = runs["continuous"]
    fig = SchedulerTimeline(tr).figure()
    lb = tr.lanes()
    # request labels on the y axis in arrival order, the first at the top
    assert list(fig.layout.yaxis.categoryarray) == lb.order[::-1]
    # the legend: only phases that occur, in phase order, then the end mark
    names = _names(fig)
    assert names[-1] == "finished" and "preempted" not in names
    phases = [n for n in names if n in palette.PHASE and n != "finished"]
    assert phases == [k for k in palette.PHASE if k in phases]
    for t in fig.data:
        if t.type == "bar":
            assert t.marker.color == palette.PHASE[t.name.split()[0]], t.name
    ends = next(t for t in fig.data if t.name == "finished")
    assert len(ends.x) == len(lb.finish) == 6
    # decode on its own linear scale: its strip's top is its own maximum, not the prefill's
    decode = max(r.num_decode_tokens for r in tr.records)
    prefill = max(r.num_prefill_tokens for r in tr.records)
    assert prefill > 3 * decode
    assert fig.layout.yaxis3.range[1] == pytest.approx(decode * 1.15)
    assert fig.layout.yaxis2.range[1] == pytest.approx(prefill * 1.15)
    # one unit on the time axis (this run is < 2 s on the simulated clock), zoom on time only
    assert fig.layout.xaxis3.title.text == "time (ms)"
    assert fig.layout.yaxis.fixedrange and fig.layout.yaxis3.fixedrange
    assert fig.layout.xaxis.exponentformat == "none"
    assert "clock: H100" in fig.layout.title.text


def test_timeline_scrubbed_and_dark(runs):
    v = SchedulerTimeline(runs["static"])
    v.cursor = 2
    fig = v.figure(dark=True)
    assert fig.layout.template.layout.paper_bgcolor == palette.NEUTRAL["dark"]["bg"]
    shown = v.shown_time() - v.t0
    assert all(b + w <= shown * 1e3 + 1e-6 for t in fig.data if t.type == "bar"
               and t.orientation == "h" for b, w in zip(t.base, t.x))
    ends = [t for t in fig.data if t.name == "finished"]
    assert all(t.marker.line.color == palette.NEUTRAL["dark"]["fg"] for t in ends)


def test_token_stream_every_request_a_lane(runs):
    tr = runs["static"]
    v = TokenStream(tr)
    fig = v.figure()
    ids = [r["request_id"] for r in v.rows()]
    assert len(ids) == 6 and list(fig.layout.yaxis.categoryarray) == ids[::-1]
    # the figure grows with the requests instead of cutting them
    assert fig.layout.height == token_stream.height_for(6) > token_stream.height_for(3)
    assert token_stream.height_for(40) - token_stream.height_for(8) == 32 * timeline.LANE_PX
    wait = next(t for t in fig.data if t.type == "bar")
    assert wait.marker.color == palette.PHASE["queued"] and len(wait.y) == 6
    first = next(t for t in fig.data if t.name.startswith("first token"))
    rest = next(t for t in fig.data if t.name.startswith("token"))
    assert first.marker.line.color == palette.PHASE["prefill"]
    assert rest.marker.line.color == palette.PHASE["decode"]
    assert len(first.x) + len(rest.x) == sum(len(r.emitted) for r in tr.records)
    # the request's text on hover: its whole answer on the waiting bar
    answer = "".join(v.rows()[0]["texts"])
    assert token_stream._wrap(answer) in wait.hovertext[0]


def test_token_stream_from_trace_matches_the_view(runs):
    tr = runs["continuous"]
    a = token_stream.from_trace(tr)
    b = TokenStream(tr).figure()
    assert [t.name for t in a.data] == [t.name for t in b.data]
    for ta, tb in zip(a.data, b.data):
        assert list(ta.y) == list(tb.y) and list(ta.x) == pytest.approx(list(tb.x))


def test_seat_plan_seats_never_double_booked(runs):
    for name, tr in runs.items():
        plan = comparison.seat_plan(tr)
        assert plan["seats"] == SEATS, name
        by_seat = {}
        for seat, rid, kind, t0, t1, *_ in plan["bars"]:
            by_seat.setdefault(seat, []).append((t0, t1, rid))
        for seat, spans in by_seat.items():
            spans.sort()
            for (a0, a1, ra), (b0, b1, rb) in zip(spans, spans[1:]):
                assert b0 >= a1 - 1e-12 or ra == rb, (name, seat, ra, rb)
        assert sorted(e[1] for e in plan["ends"]) == sorted(tr.lanes().finish)
        assert plan["steps"] == len(tr.records) and plan["tokens"] > 0


def _idle_while_waiting(plan) -> float:
    """Seat-seconds left empty before the last request took its seat (all arrive at 0)."""
    last_start = max(b[3] for b in plan["bars"])
    busy = {}
    for seat, rid, kind, t0, t1, *_ in plan["bars"]:
        busy[seat] = busy.get(seat, 0.0) + max(min(t1, last_start) - t0, 0.0)
    return sum(last_start - busy.get(k, 0.0) for k in range(plan["seats"]))


def test_static_batching_leaves_seats_empty_while_requests_wait(runs):
    """The picture's point: under static batching a seat idles while the queue waits;
    continuous batching fills it at the next step."""
    s, c = comparison.seat_plan(runs["static"]), comparison.seat_plan(runs["continuous"])
    assert s["steps"] > c["steps"]
    assert _idle_while_waiting(c) == pytest.approx(0.0, abs=1e-9)
    assert _idle_while_waiting(s) > 0.1 * s["duration"]


def test_comparison_figure_ratio_colours_and_axes(runs):
    v = BatchingComparison(runs["static"], runs["continuous"], labels=["static", "continuous"])
    fig = v.figure()
    s, c = (comparison.seat_plan(runs[k]) for k in ("static", "continuous"))
    text = " ".join(a.text for a in fig.layout.annotations)
    assert f"{c['throughput'] / s['throughput']:.2f}x</b> the throughput" in text
    assert f"{c['steps'] / s['steps']:.2f}x</b> the steps ({c['steps']} vs {s['steps']})" in text
    boxes = [t for t in fig.data if t.type == "box"]
    assert [(b.name, b.marker.color) for b in boxes] == \
        [("static", palette.POLICY["static"]), ("continuous", palette.POLICY["continuous"])]
    assert fig.layout.yaxis2.rangemode == "tozero" and "latency" in fig.layout.yaxis2.title.text
    assert fig.layout.xaxis3.title.text == "time (ms)"
    names = _names(fig)
    assert names[:4] == ["empty seat", "prefill", "decode", "finished"]
    assert names.count("decode") == 1          # one legend entry per meaning
    m = fig.layout.margin          # room for the latencies even with two seats
    assert fig.layout.height - m.t - m.b >= 300


def test_comparison_scrubbed_inside_one_step_still_moves(runs):
    """Two scrubber times inside one step cut the same steps; the figure must still change
    (a scrub that draws nothing new left the browser test waiting: CI, 2026-12-04)."""
    sides = [("static", runs["static"]), ("continuous", runs["continuous"])]
    tr = runs["static"]
    rec = tr.records[2]
    a, b = [(rec.t_start - tr.t0) + (rec.t_end - rec.t_start) * w for w in (0.25, 0.75)]
    fa, fb = (comparison.spec(sides, upto=t) for t in (a, b))
    assert fa["data"] == fb["data"]                       # the same steps ended by then
    assert fa != fb
    lines = [sh for sh in fb["layout"]["shapes"] if sh["type"] == "line"]
    f, _ = timeline.time_unit(max(t.records[-1].t_end - t.t0 for _, t in sides))
    assert len(lines) == 2 and all(sh["x0"] == pytest.approx(b * f) for sh in lines)
    assert "shapes" not in comparison.spec(sides)          # the whole run: no scrubber line


def test_policy_colour_by_name_not_position():
    assert comparison.policy_colour("continuous", 0) == palette.POLICY["continuous"]
    assert comparison.policy_colour("static (wall)", 1) == palette.POLICY["static"]
    assert comparison.policy_colour("run 2", 1) == palette.SERIES["baseline"]
    assert comparison.policy_colour("run 1", 0) == palette.SERIES["main"]


def test_chapter_5_draws_the_same_figure(runs):
    from inferlab.lab.chapters import ch05_batching as ch
    data = {"traces": {"sim": runs}, "clock_sim": "H100 (simulated)", "max_num_seqs": SEATS}
    fig = ch.figure(data)
    assert fig.layout.title.text.startswith(ch.TITLE)
    view = BatchingComparison(runs["static"], runs["continuous"],
                              labels=["static", "continuous"]).figure()
    assert [t.name for t in fig.data] == [t.name for t in view.data]


@pytest.mark.parametrize("which", ["timeline", "token_stream", "comparison"])
def test_png_export_at_its_own_height(runs, tmp_path, which):
    fig = {"timeline": lambda: SchedulerTimeline(runs["static"]).figure(dark=True),
           "token_stream": lambda: TokenStream(runs["static"]).figure(),
           "comparison": lambda: comparison.figure(list(runs.items()))}[which]()
    p = figures.save(fig, tmp_path / f"{which}.png", height=fig.layout.height)
    assert open(p, "rb").read(8).startswith(b"\x89PNG")


@pytest.mark.parametrize("grid", [
    dict(rows=3, cols=1, row_heights=[200, 64, 64], vertical_spacing=0.05),
    dict(rows=2, cols=2, row_heights=[100, 40], column_widths=[0.7, 0.3],
         horizontal_spacing=0.09, vertical_spacing=0.1)])
def test_spec_lays_out_subplots_as_make_subplots(grid):
    """The drawings' dict specs name and place their axes as plotly's make_subplots does (the
    first row on top: a reversed grid once drew the lanes in the smallest strip)."""
    from plotly.subplots import make_subplots

    from inferlab.lab.drawings.spec import Spec
    span = grid["cols"] == 2
    specs = [[{}, {"rowspan": 2}], [{}, None]] if span else None
    want = make_subplots(**grid, shared_xaxes=True, specs=specs).to_plotly_json()["layout"]
    want.pop("template")
    got = Spec(**grid, shared_xaxes=True, span_last_column=span).layout
    assert sorted(got) == sorted(want)
    for axis, props in want.items():
        assert set(got[axis]) == set(props), axis
        for k, v in props.items():
            assert got[axis][k] == (pytest.approx(v) if isinstance(v, list) else v), (axis, k)
