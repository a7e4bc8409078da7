"""What a live run sends to the page, counted (no clocks): each view redraws at most once per
step, each redraw is one Plotly.update (never one message per trace), no FigureWidget is made
again during a run, and once a page answers redraws the next one waits for its answer (a
page that falls behind gets the latest state, never a queue). How fast the Lab runs with its
views live beside the same run headless is `inferlab bench lab`'s business
(docs/results/lab-live-amd.json); the page's side of the answer is tests/test_browser.py."""
import collections

import pytest

import inferlab as il
from inferlab.observe.trace import Trace
from inferlab.widgets import Lab, SchedulerTimeline
from inferlab.widgets import _plot
from inferlab.widgets._base import wait_until


@pytest.fixture
def sent(monkeypatch):
    """Counts of the plotly messages the FigureWidgets send, by kind."""
    counts = collections.Counter()
    for kind in ("update", "restyle", "relayout", "addTraces", "deleteTraces"):
        orig = getattr(_plot.LiveFigure, f"_send_{kind}_msg")

        def spy(self, *args, _kind=kind, _orig=orig, **kwargs):
            counts[_kind] += 1
            return _orig(self, *args, **kwargs)
        monkeypatch.setattr(_plot.LiveFigure, f"_send_{kind}_msg", spy)
    return counts


def test_a_lab_run_redraws_each_view_at_most_once_a_step_in_one_message(sent):
    lab = Lab("tiny", workload_kind="random tokens: synthetic", num_requests=24,
              max_tokens=24, max_num_seqs=4, num_blocks=128, block_size=4)
    plots = [v.plot for v in lab.views]
    draws = [v._redraw.count for v in lab.views]
    made = [v.plots_made for v in lab.views]
    lab._run()                                     # the run, in this thread
    assert lab.status.value.startswith("done"), lab.status.value
    steps = len(lab.trace)
    assert steps > 20
    for v, plot, d0, m0 in zip(lab.views, plots, draws, made):
        assert v.errors == [], v.errors
        assert v.plot is plot and v.plots_made == m0, v.kind   # no FigureWidget made again
        assert 1 <= v._redraw.count - d0 <= steps + 1, (v.kind, v._redraw.count - d0, steps)
        assert v.num_pushes <= steps + 1, (v.kind, v.num_pushes, steps)
        assert _plot.same(v.plot, v.figure()), v.kind         # it shows the run's last step
    # one Plotly.update per redraw; restyles (one per trace, each a redraw in the page) never
    assert sent["restyle"] == 0 and sent["update"] >= 1, dict(sent)
    assert sent["update"] <= sum(v._redraw.count - d0 for v, d0 in zip(lab.views, draws))
    assert set(lab.timing) == {"start", "engine_done", "done"}


def _drawn(view, seq=None):
    """What the page's ilPlot sends once plotly has drawn redraw ``seq`` (common.js)."""
    view._on_page_msg(None, {"event": "drawn", "seq": view.plot_seq if seq is None else seq},
                      [])


def test_once_a_page_answers_a_redraw_waits_for_its_answer():
    eng = il.Engine("tiny", num_blocks=32, block_size=4)
    tr = Trace.record(eng)
    eng.generate(["a b c d", "e f"], il.SamplingParams(max_tokens=6, ignore_eos=True),
                 use_tqdm=False)
    v = SchedulerTimeline(tr.stop())
    thr = v._redraw
    thr.ack_timeout = 3600.0                      # a page that never answers: never resent
    assert not thr.paced                          # no page yet: redraws only rate-limited
    _drawn(v)
    assert thr.paced
    n = thr.count
    v.cursor = 1                                  # a scrubber move: drawn (page answered)
    assert wait_until(lambda: thr.count == n + 1, 30)
    v.cursor = 2                                  # the page has not answered that one yet:
    v.cursor = 3                                  # both wait, as one
    assert thr.pending() and thr.count == n + 1
    _drawn(v, seq=v.plot_seq - 1)                 # an answer to an older redraw: still waits
    assert thr.pending() and thr.count == n + 1
    _drawn(v)                                     # answered: the latest state is drawn, once
    assert wait_until(lambda: thr.count == n + 2 and not thr.pending(), 30)
    assert v.shown_step() == 3 and _plot.same(v.plot, v.figure())
    v.close()
