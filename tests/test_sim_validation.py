"""The "this-cpu" clock and the bench that validates the cost model against real steps
(issue 12, item 10): the machinery on tiny shapes. No wall-clock number is asserted; the
published numbers come from `inferlab bench clock` (BENCHMARKS.md)."""
import math

import pytest

from inferlab.core.shapes import model_shape
from inferlab.sim import this_cpu
from inferlab.sim.clock import SimulatedClock, check_clock, make_clock
from inferlab.sim.costmodel import step_terms, step_time
from inferlab.sim.profiles import get_gpu

TINY = dict(sgemm_shapes=((32, 64, 64), (16, 64, 32)), stream_bytes=1 << 20, repeats=2)


@pytest.fixture
def small_profile(monkeypatch):
    """A quickly measured profile, cached as this process's "this-cpu"."""
    prof = this_cpu.measure(**TINY)
    monkeypatch.setattr(this_cpu, "_cached", prof)
    return prof


def test_measured_profile_has_positive_finite_numbers(small_profile):
    p = small_profile
    for x in (p.flops_fp32, p.hbm_bandwidth, p.step_overhead_s, p.layer_overhead_s,
              p.memory_bytes):
        assert x > 0 and math.isfinite(x), p
    # on a CPU every dtype gets the one measured sgemm rate; the measurement is the
    # calibration, so the efficiencies are 1
    assert p.peak_flops(2) == p.peak_flops(4) == p.flops_fp32
    assert p.flops_efficiency == p.bandwidth_efficiency == 1.0
    assert p.name == "this-cpu" and "measured here" in p.note


def test_names_resolve_and_are_cached(small_profile, monkeypatch):
    assert get_gpu("this-cpu") is small_profile and get_gpu("This CPU") is small_profile
    assert this_cpu.is_this_cpu("this_cpu") and not this_cpu.is_this_cpu("H100")
    # checking the name measures nothing (the engine checks before loading the model)
    monkeypatch.setattr(this_cpu, "_cached", None)
    monkeypatch.setattr(this_cpu, "measure", lambda *a, **k: pytest.fail("measured"))
    check_clock("this-cpu")


def test_datasheet_gpus_keep_their_estimates():
    from inferlab.sim import gpus
    h100 = get_gpu("H100")
    assert h100.flops_efficiency == gpus.FLOPS_EFFICIENCY
    assert h100.bandwidth_efficiency == gpus.BANDWIDTH_EFFICIENCY
    assert h100.step_overhead_s == gpus.STEP_OVERHEAD_S and h100.note == "datasheet"


def test_make_clock_prices_the_runs_dtype(small_profile):
    from transformers import LlamaConfig
    c = make_clock("this-cpu", sim_model="smollm2-135m")
    assert isinstance(c, SimulatedClock) and c.gpu is small_profile
    assert c.name == "this-cpu (simulated, smollm2-135m shape)" and c.dtype_bytes == 4
    assert make_clock("this-cpu", hf_config=LlamaConfig(dtype="bfloat16")).dtype_bytes == 2
    assert make_clock("H100", sim_model="smollm2-135m").dtype_bytes == 2   # GPUs: bf16


def test_predictions_are_positive_and_grow_with_tokens(small_profile):
    s = model_shape("smollm2-135m")
    prefill = [step_time(small_profile, s, [(n, n)], 4) for n in (16, 64, 256, 1024)]
    decode = [step_time(small_profile, s, [(1, 20)] * b, 4) for b in (1, 4, 16, 64)]
    for xs in (prefill, decode):
        assert all(x > 0 for x in xs) and xs == sorted(xs)   # simulated clock
    assert prefill[-1] > prefill[0]                          # simulated clock
    for gpu in (small_profile, get_gpu("H100")):
        for chunks in ([(1, 20)] * 8, [(256, 256)]):
            terms = step_terms(gpu, s, chunks, 4)
            assert sum(terms.values()) == pytest.approx(step_time(gpu, s, chunks, 4))
            assert min(terms["compute"], terms["memory"]) == 0.0   # one roof binds


def test_engine_runs_on_this_cpu_clock(small_profile):
    import inferlab as il
    eng = il.Engine("tiny", clock="this-cpu", num_blocks=32, block_size=4)
    recs = []
    eng.subscribe(recs.append)
    eng.generate(["a b c d"], il.SamplingParams(max_tokens=3, ignore_eos=True), use_tqdm=False)
    assert eng.clock.gpu is small_profile and "this-cpu (simulated" in eng.clock_name
    for r in recs:
        chunks = [(c.num_tokens, c.start + c.num_tokens) for c in r.batch]
        assert r.sim_duration == step_time(small_profile, eng.clock.shape, chunks,
                                           eng.clock.dtype_bytes)   # simulated clock


def test_validation_returns_the_table(small_profile):
    from inferlab.bench import clock_validation as cv
    res = cv.validate("tiny", decode=(1, 2), prefill=(4, 8), repeats=2,
                      profile=lambda: this_cpu.measure(**TINY))
    assert [(r["kind"], r["size"]) for r in res["rows"]] == [
        ("decode", 1), ("decode", 2), ("prefill", 4), ("prefill", 8)]
    for r in res["rows"]:
        assert r["measured"]["n"] == r["predicted"]["n"] == 2
        assert r["measured"]["lo"] <= r["measured"]["median"] <= r["measured"]["hi"]
        assert r["predicted"]["median"] > 0 and math.isfinite(r["error"])
        assert set(r["parts"]["measured"]) == set(r["parts"]["model"]) == {
            "linear", "attention", "rest"}
    assert res["worst_abs_error"] >= res["median_abs_error"] >= 0
    assert res["worst_case"] in {f"{r['kind']} {r['size']}" for r in res["rows"]}
    text = cv.table(res)
    assert sum(line.startswith("| ") for line in text.splitlines()) == 1 + len(res["rows"])
    assert "median |error|" in text
    fig = cv.figure(res)
    assert len(fig.data) == 16 and "this-cpu" in fig.layout.title.text


def test_quoted_clock_error_is_the_recorded_validation():
    """The error the this-cpu profile quotes is the last recorded run's. (The chapters' H100
    label quotes the error against published H100 measurements instead:
    tests/test_published_validation.py.)"""
    import json
    import pathlib

    from inferlab.sim.this_cpu import VALIDATED_ERROR
    rec = json.loads((pathlib.Path(__file__).resolve().parents[1] / "docs" / "figures"
                      / "clock_validation.json").read_text())
    assert round(rec["median_abs_error"], 2) == VALIDATED_ERROR["median"]
    assert round(rec["worst_abs_error"], 2) == VALIDATED_ERROR["worst"]


def test_bench_roofline_reports_every_batch_and_its_split():
    """`inferlab bench roofline` on the tiny model: a row per batch with the split's parts
    (what it measures is its business; here only that it reports it)."""
    from inferlab.bench.roofline import main
    lines = []
    res = main(batches=(1, 2), model="tiny", repeats=1, linear_backend="torch", out=lines.append)
    assert sorted(res["rows"]) == [1, 2]
    for row in res["rows"].values():
        assert {"ideal", "step", "linear", "attention", "sampling", "other forward",
                "host", "share"} <= set(row)
    assert "linear backend torch" in lines[0] and len(lines) == 3 + 2 + 1


def test_bench_roofline_in_bfloat16_names_the_path_each_batch_takes():
    """In bf16 the roofline is priced at 2 bytes an element; batch 1 decodes in one call
    (model/fused.py HalfDecode), larger batches through the fused rows."""
    from inferlab.bench.roofline import main
    lines = []
    res = main(batches=(1, 2), model="tiny", repeats=1, out=lines.append, dtype="bfloat16")
    assert "bfloat16" in lines[0]
    assert [res["rows"][b]["forward"] for b in (1, 2)] == ["1 call", "fused"]
    fp32 = main(batches=(1,), model="tiny", repeats=1, out=[].append)
    assert res["rows"][1]["ideal"] < fp32["rows"][1]["ideal"]        # half the bytes to read


def test_bench_profile_times_the_parts_of_both_forwards_without_patching():
    """`inferlab bench profile` on the tiny model: every case with both forwards, each part
    timed through the forwards' own timing points; nothing in the engine or the kernels is
    replaced, and no timer is left behind."""
    import inferlab as il
    from inferlab import kernels
    from inferlab.bench.profile import PARTS, main
    from inferlab.model import llama
    before = {n: getattr(kernels, n) for n in kernels.__all__}
    lines = []
    table = main(model="tiny", repeats=1, out=lines.append)
    assert {n: getattr(kernels, n) for n in kernels.__all__} == before
    assert len(table) == 8 and {path for _, path in table} == {"fused", "op by op"}
    for (case, path), med in table.items():
        assert set(PARTS) <= set(med) and med["step"] >= med["forward"] > 0
        if (case, path) == ("decode, batch 1", "fused"):       # the whole pass in one call
            assert med["one-call decode"] > 0
            assert all(med[p] == 0 for p in PARTS if p != "one-call decode")
            continue
        assert med["one-call decode"] == 0
        for part in ("attention", "linear", "lm head", "rotary + kv write", "norms + adds",
                     "silu"):
            assert med[part] > 0, (case, path, part)
    eng = il.Engine("tiny", num_blocks=16)
    with eng.runner.timing(lambda part: None):
        assert eng.model.timer is not llama.NO_TIMER
    assert eng.runner.timer is eng.model.timer is llama.NO_TIMER
