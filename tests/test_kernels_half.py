"""numba-cpu paged attention on bfloat16 and float16 tensors (kernels/half_cpu.py).

The truth is the torch reference run in float32 on the same half values (upcast). The numba
kernels read the half values exactly and accumulate in float32, so their only error beyond
float32's is the final rounding of each output to the half format: half an ulp, a relative
2^-8 (bfloat16) or 2^-11 (float16). They must also be at least as close to the truth as the
reference computed in the half dtype itself (up to float32's own error: were the truth within
that of a midpoint between two half values, either neighbour is as good)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from inferlab import kernels as K
from test_kernels import ATOL, make_case

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
HALF_ULP = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}    # relative, at most
HEADS = [(4, 4), (9, 3), (8, 2)]                 # GQA groups 1, 3, 4


def half_case(rng, dtype, seq_lens, new_tokens, heads, head_dim, block_size):
    c = make_case(rng, seq_lens, new_tokens, *heads, head_dim, block_size)
    t = {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in c.items()}
    for name in ("q", "k_cache", "v_cache"):
        t[name] = t[name].to(dtype)
    return t


def run(case, backend, prefill, dtype=None):
    """Attention over ``case``, its q and caches cast to ``dtype`` first when given."""
    c = dict(case)
    if dtype is not None:
        for name in ("q", "k_cache", "v_cache"):
            c[name] = c[name].to(dtype)
    if prefill:
        return K.paged_attention_prefill(c["q"], c["k_cache"], c["v_cache"], c["block_tables"],
                                         c["seq_lens"], c["query_start_loc"], c["scale"],
                                         backend=backend)
    return K.paged_attention_decode(c["q"], c["k_cache"], c["v_cache"], c["block_tables"],
                                    c["seq_lens"], c["scale"], backend=backend)


def check_against_truth(case, prefill):
    dtype = case["q"].dtype
    out = run(case, "numba-cpu", prefill)
    assert out.dtype == dtype and out.shape == case["q"].shape
    truth = run(case, "reference", prefill, torch.float32)           # float32 on half values
    half_ref = run(case, "reference", prefill)                       # the reference in half
    out, half_ref = out.float(), half_ref.float()
    torch.testing.assert_close(out, truth, rtol=HALF_ULP[dtype], atol=ATOL)
    err, ref_err = (out - truth).abs().max().item(), (half_ref - truth).abs().max().item()
    assert err <= ref_err + 1e-5, (err, ref_err)   # 1e-5: room for float32 error, both sides


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("block_size", [1, 16])
@pytest.mark.parametrize("heads", HEADS, ids=lambda h: f"{h[0]}q{h[1]}kv")
@pytest.mark.parametrize("head_dim", [64, 128])
def test_decode_half_matches_float32_truth(dtype, block_size, heads, head_dim):
    rng = np.random.default_rng(block_size * 100 + heads[0] * 10 + head_dim)
    seq_lens = [1, 16, 17, 37, 70]                 # 37, 70: contexts that end mid-block
    check_against_truth(half_case(rng, dtype, seq_lens, [1] * len(seq_lens), heads, head_dim,
                                  block_size), prefill=False)


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("block_size", [1, 16])
@pytest.mark.parametrize("heads", HEADS, ids=lambda h: f"{h[0]}q{h[1]}kv")
@pytest.mark.parametrize("head_dim", [64, 128])
def test_chunked_prefill_half_matches_float32_truth(dtype, block_size, heads, head_dim):
    rng = np.random.default_rng(block_size * 100 + heads[0] * 10 + head_dim + 1)
    # a whole prompt, chunks after a cached prefix (one longer than the 16-row tile), a decode
    # row, a sequence with nothing new this step
    seq_lens = [23, 40, 50, 9, 12]
    new_tokens = [23, 7, 35, 1, 0]
    check_against_truth(half_case(rng, dtype, seq_lens, new_tokens, heads, head_dim,
                                  block_size), prefill=True)


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_peaky_long_context_in_half(dtype):
    rng = np.random.default_rng(3)
    case = half_case(rng, dtype, [1500, 700], [1, 1], (9, 3), 64, 16)
    case["q"] = case["q"] * 4                                        # peaky scores
    check_against_truth(case, prefill=False)


def test_parallel_and_serial_half_paths_agree(monkeypatch):
    from inferlab.kernels import numba_cpu
    case = half_case(np.random.default_rng(11), torch.bfloat16, [300, 129, 64], [1, 1, 1],
                     (9, 3), 64, 16)
    monkeypatch.setattr(numba_cpu, "PARALLEL_MIN_BYTES", 1 << 40)
    serial = run(case, "numba-cpu", prefill=False)
    monkeypatch.setattr(numba_cpu, "PARALLEL_MIN_BYTES", 0)
    assert torch.equal(run(case, "numba-cpu", prefill=False), serial)


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_write_kv_writes_the_half_bits_in_place(dtype):
    nb, bs, kvh, d = 6, 4, 3, 64
    k_cache = torch.randn(nb, bs, kvh, d).to(dtype)
    v_cache = torch.randn(nb, bs, kvh, d).to(dtype)
    before_k, before_v = k_cache.clone(), v_cache.clone()
    ptrs = k_cache.data_ptr(), v_cache.data_ptr()
    slots = torch.tensor([13, 2, 23, 4])
    k, v = torch.randn(4, kvh, d).to(dtype), torch.randn(4, kvh, d).to(dtype)
    K.write_kv(k, v, k_cache, v_cache, slots, backend="numba-cpu")
    assert (k_cache.data_ptr(), v_cache.data_ptr()) == ptrs
    bits = lambda t: t.view(torch.int16).reshape(nb * bs, kvh, d)
    assert torch.equal(bits(k_cache)[slots], k.view(torch.int16))
    assert torch.equal(bits(v_cache)[slots], v.view(torch.int16))
    rest = torch.ones(nb * bs, dtype=torch.bool)
    rest[slots] = False
    assert torch.equal(bits(k_cache)[rest], bits(before_k)[rest])  # nothing else touched
    assert torch.equal(bits(v_cache)[rest], bits(before_v)[rest])
    # float32 keys into a half cache arrive rounded as torch rounds them
    k32 = torch.randn(1, kvh, d)
    K.write_kv(k32, k32, k_cache, v_cache, torch.tensor([5]), backend="numba-cpu")
    assert torch.equal(k_cache[1, 1].view(torch.int16), k32[0].to(dtype).view(torch.int16))


def test_numpy_float16_in_numpy_float16_out():
    rng = np.random.default_rng(2)
    case = make_case(rng, [20, 37], [4, 1], 9, 3, 64, 16)
    for name in ("q", "k_cache", "v_cache"):
        case[name] = case[name].astype(np.float16)
    out = run(case, "numba-cpu", prefill=True)
    assert isinstance(out, np.ndarray) and out.dtype == np.float16
    tcase = {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in case.items()}
    assert np.array_equal(out, run(tcase, "numba-cpu", prefill=True).numpy())
    k_cache, v_cache = case["k_cache"].copy(), case["v_cache"].copy()
    k = rng.standard_normal((1, 3, 64)).astype(np.float16)
    K.write_kv(k, k, k_cache, v_cache, np.array([17]), backend="numba-cpu")
    assert np.array_equal(k_cache[1, 1].view(np.int16), k[0].view(np.int16))


def test_half_rows_convert_exactly_for_every_bit_pattern():
    from numba import njit

    from inferlab.kernels.half_cpu import load_row

    @njit
    def convert(bits, out):
        for i in range(bits.shape[0]):
            out[i] = load_row(bits[i], out[i])

    every = np.arange(1 << 16, dtype=np.uint16).reshape(-1, 64)
    for bits, dtype in ((every, torch.bfloat16), (every.view(np.int16), torch.float16)):
        out = np.empty(every.shape, np.float32)
        convert(bits, out)
        want = torch.from_numpy(every.view(np.int16)).view(dtype).float().numpy()
        same = out.view(np.uint32) == want.view(np.uint32)
        assert (same | (np.isnan(out) & np.isnan(want))).all(), dtype


def test_bfloat16_rounding_is_torchs():
    from inferlab.kernels.half_cpu import result_as
    rng = np.random.default_rng(0)
    x = np.concatenate([
        (rng.standard_normal(10000) * 10.0 ** rng.integers(-40, 38, 10000)).astype(np.float32),
        np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, 3.4e38, -3.4e38, 1e-45, -1e-40]),
        # exact ties between two bfloat16 values: both rounding directions of even
        (np.arange(64, dtype=np.uint32) << 16 | 0x8000).view(np.float32),
        (np.uint32(0x3F810000) | np.uint32(0x7FFF)).reshape(1).view(np.float32)])
    got = result_as(x, np.zeros(1, np.uint16))
    want = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    nan = np.isnan(x)
    assert np.array_equal(got[~nan], want[~nan])
    assert np.isnan(torch.from_numpy(got[nan].view(np.int16)).view(torch.bfloat16).float()).all()
