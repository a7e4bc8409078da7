"""A figure that cannot be exported says so: the places that go on without the static image
(a chapter's picture in a notebook, a widget's PNG beside its live view) warn visibly, naming
the error, instead of passing in silence."""
import plotly.graph_objects as go
import pytest

import inferlab as il
from inferlab.lab import figures


@pytest.fixture
def broken_export(monkeypatch):
    def fail(*args, **kwargs):
        raise RuntimeError("no headless chromium here")
    monkeypatch.setattr(figures, "to_image", fail)
    monkeypatch.setattr(go.Figure, "show", lambda self, *a, **k: None)


def test_chapter_picture_warns_and_names_the_error(broken_export, capsys):
    from inferlab.lab.chapters._display import show
    with pytest.warns(RuntimeWarning, match="RuntimeError: no headless chromium here"):
        show(go.Figure())
    assert "figure export failed" in capsys.readouterr().out


def test_widget_static_png_warns_and_keeps_the_widget(broken_export):
    from inferlab.observe.trace import Trace
    from inferlab.widgets import SchedulerTimeline
    eng = il.Engine("tiny", num_blocks=64, block_size=4)
    trace = Trace.record(eng)
    eng.generate(["a b c"], il.SamplingParams(max_tokens=3, ignore_eos=True), use_tqdm=False)
    view = SchedulerTimeline(trace)
    with pytest.warns(RuntimeWarning, match="SchedulerTimeline static image unavailable"):
        data, _ = view._repr_mimebundle_()
    assert "image/png" not in data and "application/vnd.jupyter.widget-view+json" in data
    assert any("no headless chromium here" in e for e in view.errors)
