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
