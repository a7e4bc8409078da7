"""Paged-attention kernels vs the torch reference (CPU backends), and backend dispatch.

The CUDA kernels are checked in tests/test_kernels_cudasim.py (simulator or real GPU)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from inferlab import kernels as K

ATOL = 1e-4


def make_case(rng, seq_lens, new_tokens, num_heads, num_kv_heads, head_dim, block_size,
              extra_blocks=3):
    """Random caches and shuffled, non-contiguous block tables (with spare blocks interleaved
    so that no sequence owns a contiguous range). new_tokens[s] = query rows of sequence s."""
    seq_lens = np.asarray(seq_lens, np.int32)
    nblk = -(-seq_lens // block_size)                               # [S] blocks per sequence
    max_blocks = int(nblk.max())
    num_blocks = int(nblk.sum()) + extra_blocks
    perm = rng.permutation(num_blocks).astype(np.int32)
    tables = np.full((len(seq_lens), max_blocks + 1), -1, np.int32)  # padded past the end
    for s, off in enumerate(np.concatenate([[0], np.cumsum(nblk)[:-1]])):
        tables[s, :nblk[s]] = perm[off:off + nblk[s]]
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = rng.standard_normal(shape, dtype=np.float32)
    v_cache = rng.standard_normal(shape, dtype=np.float32)
    qsl = np.concatenate([[0], np.cumsum(new_tokens)]).astype(np.int32)
    q = rng.standard_normal((int(qsl[-1]), num_heads, head_dim), dtype=np.float32)
    tables = np.where(tables < 0, 0, tables)      # padding entries point at a real block
    return dict(q=q, k_cache=k_cache, v_cache=v_cache, block_tables=tables, seq_lens=seq_lens,
                query_start_loc=qsl, scale=head_dim ** -0.5)


def decode(case, backend):
    c = case
    return K.paged_attention_decode(c["q"], c["k_cache"], c["v_cache"], c["block_tables"],
                                    c["seq_lens"], c["scale"], backend=backend)


def prefill(case, backend):
    c = case
    return K.paged_attention_prefill(c["q"], c["k_cache"], c["v_cache"], c["block_tables"],
                                     c["seq_lens"], c["query_start_loc"], c["scale"],
                                     backend=backend)


HEADS = [(4, 4), (9, 3), (16, 2)]                 # GQA ratios 1, 3, 8


@pytest.mark.parametrize("block_size", [1, 8, 16, 32])
@pytest.mark.parametrize("num_heads,num_kv_heads", HEADS)
@pytest.mark.parametrize("head_dim", [64, 128])
def test_decode_matches_reference(block_size, num_heads, num_kv_heads, head_dim):
    rng = np.random.default_rng(block_size * 1000 + num_heads * 10 + head_dim)
    seq_lens = [1, block_size, block_size + 1, 37, 70, 3 * block_size - 1]
    case = make_case(rng, seq_lens, [1] * len(seq_lens), num_heads, num_kv_heads, head_dim,
                     block_size)
    ref = decode(case, "reference")
    out = decode(case, "numba-cpu")
    assert out.shape == ref.shape and out.dtype == np.float32
    np.testing.assert_allclose(out, ref, atol=ATOL, rtol=0)


@pytest.mark.parametrize("block_size", [1, 8, 16, 32])
@pytest.mark.parametrize("num_heads,num_kv_heads", HEADS)
@pytest.mark.parametrize("head_dim", [64, 128])
def test_prefill_matches_reference(block_size, num_heads, num_kv_heads, head_dim):
    rng = np.random.default_rng(block_size * 1000 + num_heads * 10 + head_dim + 1)
    # whole prompts, chunks after a cached prefix, a 1-token chunk, a sequence with no new
    # tokens this step, and a chunk longer than the prefill tile (Q_TILE = 16)
    seq_lens = [1, 23, 40, 17, 50, 9]
    new_tokens = [1, 23, 7, 1, 35, 0]
    case = make_case(rng, seq_lens, new_tokens, num_heads, num_kv_heads, head_dim, block_size)
    ref = prefill(case, "reference")
    out = prefill(case, "numba-cpu")
    np.testing.assert_allclose(out, ref, atol=ATOL, rtol=0)


def test_prefill_of_one_token_per_sequence_equals_decode():
    rng = np.random.default_rng(7)
    case = make_case(rng, [5, 16, 33], [1, 1, 1], 9, 3, 64, 16)
    np.testing.assert_allclose(prefill(case, "numba-cpu"), decode(case, "numba-cpu"),
                               atol=1e-6, rtol=0)


def test_long_context_stays_accurate():
    # 4096 keys: the online softmax must not drift from the one-shot softmax
    rng = np.random.default_rng(3)
    case = make_case(rng, [4096, 2500], [1, 1], 9, 3, 64, 16)
    case["q"] *= 4.0                                              # peaky scores
    np.testing.assert_allclose(decode(case, "numba-cpu"), decode(case, "reference"),
                               atol=ATOL, rtol=0)


def test_vectorised_exp_matches_numpy_to_float32_rounding():
    from inferlab.kernels.numba_cpu import exp_inplace
    x = np.concatenate([np.linspace(-100, 100, 20001, dtype=np.float32),
                        np.float32([0.0, -0.0, -1e-30, 1e-30, -87.0, 88.0, -np.inf, -1e30]),
                        np.float32([5.0, 6.0, 7.0])])                # past n: left alone
    n = len(x) - 3
    want = np.exp(np.clip(x[:n].astype(np.float64), -87, 88))     # clamped where float32 ends
    a = x.copy()
    exp_inplace(a, a.view(np.int32), np.empty(len(a), np.int32), n)
    rel = np.abs(a[:n] - want) / want
    assert rel.max() < 1.5e-7, (rel.max(), x[rel.argmax()])     # 7e-8 measured
    assert (a[:n][x[:n] == 0] == 1.0).all()                           # exp(0) is exactly 1
    assert a[n:].tolist() == [5.0, 6.0, 7.0]


def test_parallel_and_serial_paths_agree(monkeypatch):
    from inferlab.kernels import numba_cpu
    rng = np.random.default_rng(11)
    case = make_case(rng, [300, 129, 64], [1, 1, 1], 9, 3, 64, 16)
    monkeypatch.setattr(numba_cpu, "PARALLEL_MIN_BYTES", 1 << 40)
    serial = decode(case, "numba-cpu")
    monkeypatch.setattr(numba_cpu, "PARALLEL_MIN_BYTES", 0)
    parallel = decode(case, "numba-cpu")
    np.testing.assert_array_equal(serial, parallel)
    case = make_case(rng, [300, 40], [100, 40], 9, 3, 64, 16)
    parallel = prefill(case, "numba-cpu")
    monkeypatch.setattr(numba_cpu, "PARALLEL_MIN_BYTES", 1 << 40)
    np.testing.assert_array_equal(prefill(case, "numba-cpu"), parallel)



def test_numba_threading_layer_is_openmp_where_it_loads():
    """GNU OpenMP's spinning workers where libgomp loads (launch ~1.5 us here against ~80 us
    for workqueue's sleeping ones), numba's workqueue otherwise; the environment wins."""
    import os

    import numba

    from inferlab.kernels import numba_cpu
    rng = np.random.default_rng(5)
    case = make_case(rng, [600, 600], [1, 1], 9, 3, 64, 16)       # > PARALLEL_MIN_BYTES: prange
    decode(case, "numba-cpu")
    if "NUMBA_THREADING_LAYER" not in os.environ:
        assert numba_cpu.OMP_LAYER == numba_cpu._omp_layer_loads()
    assert numba.threading_layer() == ("omp" if numba_cpu.OMP_LAYER else "workqueue")


try:
    from hypothesis import given, settings, strategies as st
except ImportError:                                             # hypothesis is a dev extra
    given = None

if given is not None:
    @settings(max_examples=40, deadline=None)
    @given(data=st.data(), block_size=st.sampled_from([1, 2, 5, 8, 16, 32]),
           heads=st.sampled_from(HEADS + [(6, 2), (8, 1)]), head_dim=st.sampled_from([64, 128]))
    def test_prefill_random_shapes(data, block_size, heads, head_dim):
        n = data.draw(st.integers(1, 4))
        seq_lens = data.draw(st.lists(st.integers(1, 70), min_size=n, max_size=n))
        new_tokens = [data.draw(st.integers(0, L)) for L in seq_lens]
        seed = data.draw(st.integers(0, 2 ** 31))
        case = make_case(np.random.default_rng(seed), seq_lens, new_tokens, *heads, head_dim,
                         block_size)
        if case["q"].shape[0]:
            np.testing.assert_allclose(prefill(case, "numba-cpu"), prefill(case, "reference"),
                                       atol=ATOL, rtol=0)


@pytest.mark.parametrize("backend", ["reference", "numba-cpu"])
def test_write_kv_scatters_into_slots(backend):
    rng = np.random.default_rng(5)
    nb, bs, kvh, d = 6, 4, 3, 64
    k_cache = np.zeros((nb, bs, kvh, d), np.float32)
    v_cache = np.zeros_like(k_cache)
    slots = np.array([13, 2, 23, 4], np.int64)                   # any order, any blocks
    k = rng.standard_normal((4, kvh, d), dtype=np.float32)
    v = rng.standard_normal((4, kvh, d), dtype=np.float32)
    K.write_kv(k, v, k_cache, v_cache, slots, backend=backend)
    for i, slot in enumerate(slots):
        np.testing.assert_array_equal(k_cache[slot // bs, slot % bs], k[i])
        np.testing.assert_array_equal(v_cache[slot // bs, slot % bs], v[i])
    assert np.count_nonzero(k_cache.any(axis=(2, 3))) == 4       # nothing else touched


def test_write_kv_in_place_on_torch_tensors():
    k_cache = torch.zeros(4, 8, 3, 64)
    v_cache = torch.zeros(4, 8, 3, 64)
    k, v = torch.randn(2, 3, 64), torch.randn(2, 3, 64)
    K.write_kv(k, v, k_cache, v_cache, torch.tensor([9, 30], dtype=torch.int32),
               backend="numba-cpu")
    assert torch.equal(k_cache[1, 1], k[0]) and torch.equal(v_cache[3, 6], v[1])


def test_torch_in_torch_out_and_numpy_in_numpy_out():
    rng = np.random.default_rng(1)
    case = make_case(rng, [20, 5], [1, 1], 9, 3, 64, 16)
    tcase = {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v
             for k, v in case.items()}
    for backend in ("reference", "numba-cpu", None):
        t = decode(tcase, backend)
        n = decode(case, backend)
        assert isinstance(t, torch.Tensor) and isinstance(n, np.ndarray)
        np.testing.assert_allclose(t.numpy(), n, atol=ATOL)
        assert isinstance(prefill(tcase, backend), torch.Tensor)


def test_resolve_backend():
    assert "reference" in K.available_backends() and "numba-cpu" in K.available_backends()
    assert K.resolve_backend(None) == "numba-cpu"                # fastest on CPU (BENCHMARKS.md)
    assert K.resolve_backend("auto", "cpu") == "numba-cpu"
    assert K.resolve_backend("reference") == "reference"
    expected_cuda = "numba-cuda" if "numba-cuda" in K.available_backends() else "reference"
    assert K.resolve_backend("auto", "cuda") == expected_cuda
    with pytest.raises(ValueError, match=r"'auto' or one of \('reference', 'numba-cpu', 'numba-cuda'\)"):
        K.resolve_backend("triton")
    if "numba-cuda" not in K.available_backends():
        with pytest.raises(ValueError, match="not available"):
            K.resolve_backend("numba-cuda")


def test_numba_cpu_rejects_cuda_tensors_clearly():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    case = make_case(np.random.default_rng(0), [4], [1], 4, 4, 64, 16)
    tcase = {k: torch.from_numpy(v).cuda() if isinstance(v, np.ndarray) else v
             for k, v in case.items()}
    with pytest.raises(ValueError, match="CPU tensors"):
        decode(tcase, "numba-cpu")


def test_import_is_cheap():
    import subprocess
    import sys
    code = "import sys, inferlab.kernels; print('numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
