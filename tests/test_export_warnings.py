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
    from inferlab.lab.chapters._display import PLOTLY, bundle
    with pytest.warns(RuntimeWarning, match="RuntimeError: no headless chromium here"):
        data = bundle(go.Figure(go.Bar(y=[1, 2]), layout_title_text="t"))
    assert "figure export failed" in capsys.readouterr().out
    assert "image/png" not in data and data[PLOTLY]["data"][0]["type"] == "bar"


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


def test_chapter_picture_is_interactive_with_its_png_beside():
    """JupyterLab draws the plotly JSON (hover, zoom); GitHub shows the PNG of that figure."""
    import base64

    from inferlab.lab.chapters._display import PLOTLY, bundle
    fig = go.Figure(go.Scatter(x=[1, 2, 3], y=[3, 1, 2]), layout_title_text="Three points")
    import struct

    from inferlab.lab import article
    data = bundle(fig, width=400, height=300)
    png = base64.b64decode(data["image/png"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    # the article profile: the column's width at device scale 2, the same size as the JSON
    spec = data[PLOTLY]
    w, h = struct.unpack(">II", png[16:24])
    assert spec["layout"]["width"] == article.COLUMN and w == article.SCALE * article.COLUMN
    assert h == article.SCALE * spec["layout"]["height"]
    assert spec["data"][0]["y"] == [3, 1, 2]
    assert spec["layout"]["title"]["text"] == "Three points"
    assert data["text/plain"] == "<plotly figure: Three points>"
