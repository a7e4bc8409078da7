"""The GPU profiles checked against published measurements (sim/published.py): the table is
well formed, the cost model prices every point, the error the chapters quote is the one the
table gives, and the check can tell a wrong profile from the right one."""
import dataclasses
import math
import statistics

import pytest

from inferlab.core.shapes import MODEL_SHAPES, model_shape
from inferlab.sim import published
from inferlab.sim.costmodel import step_time
from inferlab.sim.gpus import GPUS


def test_every_point_is_sourced_and_names_a_known_gpu_and_shape():
    points = published.POINTS
    assert len(points) >= 8
    assert len({p.gpu for p in points}) >= 2
    for p in points:
        assert p.url.startswith("https://"), p
        assert p.source and p.where and p.engine, p
        assert p.gpu in GPUS, p
        assert model_shape(p.model).name in MODEL_SHAPES, p
        assert p.metric in published.METRICS, p
        assert p.value > 0, p                                          # fixed input
        assert p.batch >= 1 and p.tp >= 1 and p.dtype_bytes in (1, 2, 4), p
        if p.metric == "itl":
            assert p.context >= p.input_len, p
        if p.metric == "itl_slope":
            assert p.context_hi > p.context > 0, p
    assert len(set(points)) == len(points)          # no point recorded twice


def test_predictions_are_positive_and_finite():
    rows = published.validate()
    assert len(rows) == len(published.POINTS)
    for r in rows:
        assert math.isfinite(r["predicted"]) and r["predicted"] > 0, r   # simulated clock
        expected = (r["predicted"] - r["published"]) / r["published"]
        assert r["error"] == pytest.approx(expected)                    # simulated clock
        assert 0.0 <= r["decode_share"] <= 1.0, r
    assert [r["gpu"] for r in published.validate("H100")] == [
        p.gpu for p in published.POINTS if p.gpu == "H100"]


def test_a_run_sums_the_same_steps_the_clock_would_price():
    """The throughput points sum a prefill step and every decode step; the exact shortcut
    (affine pieces) equals pricing each step one by one."""
    for p in published.POINTS:
        if not p.metric.endswith("throughput"):
            continue
        shape, g = model_shape(p.model), GPUS[p.gpu]
        t = step_time(g, shape, [(p.input_len, p.input_len)] * p.batch, p.dtype_bytes, p.tp)
        for k in range(1, p.output_len):
            t += step_time(g, shape, [(1, p.input_len + k)] * p.batch, p.dtype_bytes, p.tp)
        per = p.output_len if p.metric == "output_throughput" else p.input_len + p.output_len
        predicted, _ = published.predict(p, g)
        assert predicted == pytest.approx(p.batch * per / t, rel=1e-9)   # simulated clock


def test_error_summary_is_recomputed_and_is_what_the_label_quotes():
    from inferlab.lab.chapters import _kit
    for gpu in ("H100", "A100", None):
        errs = [abs(r["predicted"] - r["published"]) / r["published"]
                for r in published.validate(gpu)]
        s = published.error_summary(gpu)
        assert s["n"] == len(errs) > 0
        assert s["median"] == pytest.approx(statistics.median(errs))
        assert s["worst"] == pytest.approx(max(errs))
    h100 = published.error_summary("H100")
    assert (f"within {h100['median']:.0%} median (worst {h100['worst']:.0%}) of {h100['n']} "
            "published H100 measurements") in _kit.SIM_LABEL
    assert "this CPU" not in _kit.SIM_LABEL          # the this-cpu error stays on this-cpu
    assert published.error_summary("L4") == {"median": None, "worst": None, "n": 0}  # none yet
    assert published.error_summary("this-cpu")["n"] == 0   # and nothing is measured for it


def test_a_wrong_profile_is_caught_on_the_decode_points():
    """Falsifiable: an H100 with 3x its HBM bandwidth prices decode 2-3x too fast, and the
    error on the decode points (ITL, and runs that are mostly decode) says so."""
    h100 = GPUS["H100"]
    fast = dataclasses.replace(h100, hbm_bandwidth=3 * h100.hbm_bandwidth)
    itl = ("itl", "itl_slope")
    right, wrong = (published.error_summary(g, itl) for g in (h100, fast))
    assert right["n"] == wrong["n"] >= 3
    assert wrong["median"] > right["median"] + 0.25          # simulated clock
    assert wrong["median"] > 2 * right["median"]             # simulated clock
    # every point that is mostly decode gets worse, runs included
    pairs = [(a, b) for a, b in zip(published.validate(h100), published.validate(fast))
             if a["decode_share"] > 0.8]
    assert len(pairs) >= 4
    assert all(b["abs_error"] > a["abs_error"] for a, b in pairs)   # simulated clock
    # the datasheet profile's own summary is untouched by the what-if
    assert published.error_summary("H100") == published.error_summary(h100)


def test_table_lists_every_point_with_its_source():
    text = published.table()
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == 1 + len(published.POINTS)
    for p in published.POINTS:
        assert p.url in text
    assert "- H100: median |error|" in text and "- all: median |error|" in text


def test_benchmarks_quotes_the_table_the_command_prints():
    """BENCHMARKS.md's section is the output of `python -m inferlab.sim.published`: a change to
    a point or to the cost model must be re-rendered there."""
    import pathlib
    text = (pathlib.Path(__file__).resolve().parents[1] / "BENCHMARKS.md").read_text()
    assert "## Cost model against published GPU measurements" in text
    assert published.table() in text
