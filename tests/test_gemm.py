"""The numba GEMM (kernels/gemm_cpu.py) against a float64 reference and against F.linear."""
import numpy as np
import pytest
import torch

from inferlab.kernels import gemm_cpu as gemm
from inferlab.model import linear


def test_pack_lays_out_32_column_panels_zero_padded():
    w = np.arange(70 * 3, dtype=np.float32).reshape(70, 3)
    p = gemm.pack(w)
    assert p.shape == (3, 3, 32) and p.flags.c_contiguous
    assert p[1, 2, 5] == w[37, 2] and p[0, 0, 31] == w[31, 0]
    assert (p[2, :, 6:] == 0).all() and (p[2, :, :6] == w[64:].T).all()


@pytest.mark.parametrize("m", [1, 3, 4, 5, 8, 9, 13, 32, 37])
@pytest.mark.parametrize("n, k", [(7, 3), (33, 1), (64, 576), (100, 17), (960, 64)])
def test_gemm_matches_float64(m, n, k):
    rng = np.random.default_rng(m * 1000 + n + k)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    out = np.full((m, n), np.nan, dtype=np.float32)         # every element must be written
    y = gemm.gemm(x, gemm.pack(w), out)
    ref = x.astype(np.float64) @ w.T.astype(np.float64)
    assert y is out and np.isfinite(y).all()
    # float32 sums of k products: error ~ k * eps * |terms|
    assert np.abs(y - ref).max() <= 1e-6 * k * max(np.abs(ref).max(), 1.0) + 1e-6


def test_gemm_names_disagreeing_shapes():
    x = np.zeros((4, 8), np.float32)
    panels = gemm.pack(np.zeros((40, 8), np.float32))
    with pytest.raises(ValueError, match=r"x \(4, 9\)"):
        gemm.gemm(np.zeros((4, 9), np.float32), panels, np.zeros((4, 40), np.float32))
    with pytest.raises(ValueError, match="out"):
        gemm.gemm(x, panels, np.zeros((4, 70), np.float32))
    with pytest.raises(ValueError, match="out"):
        gemm.gemm(x, panels, np.zeros((3, 40), np.float32))


def test_numba_linear_backend_matches_f_linear():
    torch.manual_seed(0)
    w, b = torch.randn(200, 96), torch.randn(200)
    lin = linear.Linear("numba")
    lin.prepare(w, "w", {})
    assert isinstance(lin.packed(w), np.ndarray)
    for rows in (1, 2, 17, 64):
        x = torch.randn(96, rows).t()                        # not contiguous
        for bias in (None, b):
            ref = torch.nn.functional.linear(x, w, bias)
            assert torch.allclose(lin(x, w, bias), ref, atol=1e-4), (rows, bias is None)
    # a weight the backend was not given to prepare still runs (F.linear)
    other = torch.randn(50, 96)
    x = torch.randn(5, 96)
    assert torch.allclose(lin(x, other), x @ other.T, atol=1e-4)


def test_bench_gemm_reports_every_row_count():
    """`inferlab bench gemm` on two layers: a line per row count with all three paths."""
    from inferlab.bench.gemm import main
    lines = []
    res = main(rows=(8, 33), layers=2, repeats=1, out=lines.append)
    assert sorted(res) == [8, 33] and len(lines) == 2 + 2 + 1
    for rates in res.values():
        assert set(rates) == {"numba GEMM", "oneDNN packed", "F.linear"}
        assert all(r > 0 for r in rates.values())


# ---- bfloat16: the AVX512-BF16 tile (vdpbf16ps) over panels of k pairs ----------------------
bf16_only = pytest.mark.skipif(not gemm.bf16_dot_available(),
                               reason="this CPU has no AVX512-BF16 (the oneDNN path is tested)")


def bf16(a) -> torch.Tensor:
    return torch.as_tensor(a).to(torch.bfloat16)


def bits(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.int16).numpy().view(np.uint16)


@bf16_only
def test_bf16_pack_keeps_pairs_of_k_in_each_lane():
    w = bf16(np.arange(70 * 4, dtype=np.float32).reshape(70, 4))
    p = gemm.pack(bits(w))
    assert p.shape == (3, 2, 64) and p.dtype == np.uint16
    wb = bits(w)
    assert p[1, 1, 2 * 5] == wb[37, 2] and p[1, 1, 2 * 5 + 1] == wb[37, 3]
    assert p[0, 0, 62] == wb[31, 0] and (p[2, :, 12:] == 0).all()


@bf16_only
@pytest.mark.parametrize("m", [1, 3, 4, 8, 9, 13, 37])
@pytest.mark.parametrize("n, k", [(7, 2), (33, 6), (64, 576), (100, 18), (960, 64)])
def test_bf16_gemm_matches_float64_of_the_bf16_values(m, n, k):
    g = torch.Generator().manual_seed(m * 1000 + n + k)
    x, w = bf16(torch.randn(m, k, generator=g)), bf16(torch.randn(n, k, generator=g))
    out = np.full((m, n), np.nan, dtype=np.float32)
    y = gemm.gemm(bits(x), gemm.pack(bits(w)), out)
    ref = (x.double() @ w.double().T).numpy()             # the products are exact in fp32
    assert y is out and np.isfinite(y).all()
    assert np.abs(y - ref).max() <= 1e-6 * k * max(np.abs(ref).max(), 1.0) + 1e-6


def test_bf16_gemm_refuses_odd_k_a_cpu_without_it_and_mixed_dtypes(monkeypatch):
    if gemm.bf16_dot_available():
        with pytest.raises(ValueError, match="even K"):
            gemm.pack(bits(bf16(np.ones((4, 3)))))
        with pytest.raises(ValueError, match="disagree"):      # fp32 rows, bf16 panels
            gemm.gemm(np.ones((2, 4), np.float32), gemm.pack(bits(bf16(np.ones((4, 4))))),
                      np.zeros((2, 4), np.float32))
    monkeypatch.setattr(gemm, "bf16_dot_available", lambda: False)
    with pytest.raises(RuntimeError, match="AVX512-BF16"):
        gemm.pack(bits(bf16(np.ones((4, 4)))))
    assert "AVX512-BF16" in linear.numba_runs(torch.bfloat16)
    assert "AVX512-BF16" in linear.unavailable("numba", "cpu", torch.bfloat16)


@bf16_only
def test_numba_bf16_linear_matches_f_linear_on_bf16_values():
    torch.manual_seed(0)
    w, b = bf16(torch.randn(200, 96)), bf16(torch.randn(200))
    lin = linear.Linear("numba")
    lin.prepare(w, "w", {})
    assert lin.packed(w).dtype == np.uint16
    for rows in (1, 2, 17, 64):
        x = torch.randn(96, rows).t()                        # not contiguous, float32
        for bias in (None, b):
            ref = torch.nn.functional.linear(bf16(x).float(), w.float(),
                                             None if bias is None else bias.float())
            got = lin.float_out(x, w, bias)
            assert got.dtype == torch.float32
            assert torch.allclose(got, ref, atol=1e-4), (rows, bias is None)
            assert lin(bf16(x), w, bias).dtype == torch.bfloat16      # F.linear's contract


def test_bf16_auto_takes_the_backend_measured_fastest_here_and_keeps_it(tmp_path, monkeypatch):
    from inferlab.model import linear_choice
    monkeypatch.setenv("INFERLAB_CACHE_DIR", str(tmp_path))
    linear_choice.forget()
    gb = 1 << 30
    ok = [c for c in ("numba", "onednn-packed") if linear.unavailable(c, "cpu", torch.bfloat16)
          is None]
    if len(ok) < 2:
        pytest.skip(f"only {ok} can run bf16 here: nothing to choose between")
    choice = linear_choice.resolve("auto", "cpu", torch.bfloat16, gb, 4 * gb)
    book = linear_choice.recorded()
    (entry,) = book.values()
    assert sorted(entry["candidates"]) == sorted(ok) and entry["choice"] == choice
    # kept: a new process (cleared in-memory cache) reads it and does not measure again
    linear_choice.forget()
    monkeypatch.setattr(linear_choice, "measure", lambda *a, **k: pytest.fail("measured again"))
    assert linear_choice.resolve("auto", "cpu", torch.bfloat16, gb, 4 * gb) == choice
    # a record saying the other one is faster is followed: the choice is the measurement's
    other = next(c for c in ok if c != choice)
    key = next(iter(book))
    book[key]["ms"][other] = book[key]["ms"][choice] / 2        # a record: fixed input
    (tmp_path / linear_choice.BOOK).write_text(__import__("json").dumps(book))
    linear_choice.forget()
    assert linear_choice.resolve("auto", "cpu", torch.bfloat16, gb, 4 * gb) == other
    linear_choice.forget()
