"""numba-CUDA kernels vs the torch reference.

- With a real GPU: the tests below run in-process at real (SmolLM2 / Llama) shapes.
- Without one: ``test_cuda_kernels_in_simulator`` reruns this file in a subprocess with
  NUMBA_ENABLE_CUDASIM=1 (it must be set before numba is imported), where the same tests run
  at tiny shapes -- the simulator runs every CUDA thread as a Python thread: each kernel once
  in the default tier, every test in the full tier (with kernels/gpu_check.sh's dry run).
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from test_kernels import ATOL, decode, make_case, prefill

SIM = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def _real_gpu() -> bool:
    if SIM:
        return False
    try:
        from numba import cuda
        return cuda.is_available()
    except Exception:
        return False


GPU = _real_gpu()
needs_cuda = pytest.mark.skipif(not (SIM or GPU), reason="no CUDA GPU (the simulator run "
                                "covers these: test_cuda_kernels_in_simulator)")


def _in_simulator(select: str | None = None) -> None:
    """This file again in a subprocess with NUMBA_ENABLE_CUDASIM=1 (``select``: a -k filter)."""
    if SIM:
        pytest.skip("already inside the simulator run")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", INFERLAB_TIER="all")   # every test here
    here = os.path.dirname(__file__)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           os.path.join(here, "test_kernels_cudasim.py"),
                           *(["-k", select] if select else [])],
                          env=env, cwd=here, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert " passed" in proc.stdout and " failed" not in proc.stdout


# each kernel once, at its cheapest shape in the simulator (decode, its split-K partitions and
# prefill's, the KV write; fp32 and bf16): ~15 s of simulated threads instead of ~130 s
SIMULATOR_SUBSET = ("(test_decode and shape1) or test_decode_split_into_partitions or "
                    "test_prefill_split_into_partitions or write_kv or "
                    "(decode_half_split and bfloat16)")


def test_cuda_kernels_in_simulator():
    _in_simulator(SIMULATOR_SUBSET)


@pytest.mark.full("tests/test_kernels_cudasim.py::test_cuda_kernels_in_simulator")
def test_every_cuda_kernel_test_in_simulator():
    _in_simulator()


# (num_heads, num_kv_heads, head_dim, block_size, seq_lens): tiny in the simulator
DECODE_SHAPES = [
    (6, 2, 32, 4, [1, 7, 10]),                   # GQA 3, lengths off block boundaries
    (2, 2, 64, 1, [3, 1]),                       # GQA 1, block size 1
    (8, 1, 32, 8, [9]),                          # GQA 8
    (9, 3, 64, 16, [1, 17]),                     # SmolLM2 heads, block 16
] if SIM else [
    (9, 3, 64, 16, [1, 15, 16, 17, 500, 2048]),  # SmolLM2-135M
    (32, 8, 128, 16, [1, 33, 1000, 4096]),       # Llama-3-8B
    (12, 12, 64, 1, [1, 2, 300]),
    (16, 2, 128, 32, [31, 32, 33, 4000]),
]


def _torchify(case, device):
    import torch
    return {k: torch.from_numpy(v).to(device) if isinstance(v, np.ndarray) else v
            for k, v in case.items()}


@needs_cuda
@pytest.mark.parametrize("shape", DECODE_SHAPES)
def test_decode(shape):
    heads, kv_heads, head_dim, bs, lens = shape
    case = make_case(np.random.default_rng(len(lens)), lens, [1] * len(lens), heads, kv_heads,
                     head_dim, bs)
    np.testing.assert_allclose(decode(case, "numba-cuda"), decode(case, "reference"),
                               atol=ATOL, rtol=0)


@needs_cuda
def test_decode_split_into_partitions():
    # partitions of 4 tokens: warps with no token, partitions past a short sequence, merge
    from inferlab.kernels import numba_cuda
    case = make_case(np.random.default_rng(2), [2, 11], [1, 1], 3, 1, 32, 4)
    c = case
    out = numba_cuda.paged_attention_decode(c["q"], c["k_cache"], c["v_cache"],
                                            c["block_tables"], c["seq_lens"], c["scale"],
                                            partition_size=4)
    np.testing.assert_allclose(out, decode(case, "reference"), atol=ATOL, rtol=0)


@needs_cuda
def test_prefill():
    # a whole prompt, a chunk after a cached prefix, a sequence with nothing new this step
    if SIM:
        case = make_case(np.random.default_rng(4), [3, 9, 5], [3, 2, 0], 4, 2, 32, 4)
    else:
        case = make_case(np.random.default_rng(4), [300, 1200, 64, 17], [300, 200, 0, 1],
                         9, 3, 64, 16)
    np.testing.assert_allclose(prefill(case, "numba-cuda"), prefill(case, "reference"),
                               atol=ATOL, rtol=0)


@needs_cuda
def test_prefill_split_into_partitions():
    from inferlab.kernels import numba_cuda
    case = make_case(np.random.default_rng(5), [10, 3], [3, 1], 2, 1, 32, 4)
    c = case
    out = numba_cuda.paged_attention_prefill(c["q"], c["k_cache"], c["v_cache"],
                                             c["block_tables"], c["seq_lens"],
                                             c["query_start_loc"], c["scale"], partition_size=4)
    np.testing.assert_allclose(out, prefill(case, "reference"), atol=ATOL, rtol=0)


@needs_cuda
def test_write_kv_matches_cpu():
    from inferlab import kernels as K
    rng = np.random.default_rng(6)
    nb, bs, kvh, d = (4, 4, 2, 32) if SIM else (64, 16, 8, 128)
    caches = [np.zeros((nb, bs, kvh, d), np.float32) for _ in range(4)]
    n = 3 if SIM else 200
    slots = rng.permutation(nb * bs)[:n].astype(np.int64)
    slots[1] = -1                                                # padding: skipped
    k = rng.standard_normal((n, kvh, d), dtype=np.float32)
    v = rng.standard_normal((n, kvh, d), dtype=np.float32)
    K.write_kv(k, v, caches[0], caches[1], slots, backend="numba-cuda")
    K.write_kv(k, v, caches[2], caches[3], slots, backend="numba-cpu")
    np.testing.assert_array_equal(caches[0], caches[2])
    np.testing.assert_array_equal(caches[1], caches[3])


# ---- half precision: float16 and bfloat16 -----------------------------------------------------
# q, k, v and caches in one half type; the kernels accumulate in float32 and round only the
# output, so it is within one rounding (the unit roundoff u, relative) of the float32
# reference computed on the same (upcast) half inputs. A kernel that accumulated in half
# precision would miss by many u.
UNIT_ROUNDOFF = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
HALF_ATOL = 2e-5                     # float32 summation-order noise near zero
HALF_KINDS = [("float16", "numpy"), ("float16", "torch"), ("bfloat16", "torch")]


def _half_case(case, dtype, kind="torch"):
    """The case with q, k_cache, v_cache in ``dtype``: numpy arrays (float16 only: numpy has
    no bfloat16) or torch tensors (on the GPU when there is one)."""
    import torch
    half = ("q", "k_cache", "v_cache")
    if kind == "numpy":
        return {k: v.astype(dtype) if k in half else v for k, v in case.items()}
    t = _torchify(case, "cuda" if GPU else "cpu")
    return {k: v.to(getattr(torch, dtype)) if k in half else v for k, v in t.items()}


def _assert_half_close(out, case, reference_fn, dtype):
    """out (in ``dtype``) vs the float32 reference on the upcast inputs of ``case``."""
    import torch
    assert str(out.dtype).rsplit(".", 1)[-1] == dtype
    up = {k: torch.as_tensor(v).cpu() for k, v in case.items() if k != "scale"}
    up = {k: v.float() if k in ("q", "k_cache", "v_cache") else v for k, v in up.items()}
    ref = reference_fn(dict(up, scale=case["scale"]), "reference")
    torch.testing.assert_close(torch.as_tensor(out).cpu().float(), ref, atol=HALF_ATOL,
                               rtol=UNIT_ROUNDOFF[dtype] * 1.01)


@needs_cuda
@pytest.mark.parametrize("dtype,kind", HALF_KINDS)
def test_decode_half(dtype, kind):
    heads, kv_heads, head_dim, bs, lens = DECODE_SHAPES[0] if SIM else DECODE_SHAPES[1]
    case = _half_case(make_case(np.random.default_rng(10), lens, [1] * len(lens), heads,
                                kv_heads, head_dim, bs), dtype, kind)
    out = decode(case, "numba-cuda")
    assert type(out) is type(case["q"])                          # numpy in -> numpy out
    _assert_half_close(out, case, decode, dtype)


@needs_cuda
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_decode_half_split_into_partitions(dtype):
    # the merge kernel rounds the output here (partitions of 4 tokens, one past a short row)
    from inferlab.kernels import numba_cuda
    c = _half_case(make_case(np.random.default_rng(11), [2, 11], [1, 1], 3, 1, 32, 4), dtype)
    out = numba_cuda.paged_attention_decode(c["q"], c["k_cache"], c["v_cache"],
                                            c["block_tables"], c["seq_lens"], c["scale"],
                                            partition_size=4)
    _assert_half_close(out, c, decode, dtype)


@needs_cuda
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_prefill_half(dtype):
    if SIM:
        case = make_case(np.random.default_rng(12), [3, 9, 5], [3, 2, 0], 4, 2, 32, 4)
    else:
        case = make_case(np.random.default_rng(12), [300, 1200, 64, 17], [300, 200, 0, 1],
                         32, 8, 128, 16)
    case = _half_case(case, dtype)
    _assert_half_close(prefill(case, "numba-cuda"), case, prefill, dtype)


def _special_floats():
    """float32 values that test a rounding to half: ties (to even, both ways), just above a
    tie, overflow to inf, subnormals, signed zero, infinities, NaNs with payloads."""
    bits = [0x3F808000, 0x3F818000, 0x3F808001, 0xBF808000, 0x3F801000, 0x7F7FFFFF,
            0x477FF000, 0x477FE000, 0x00000001, 0x00018000, 0x33800000, 0x33000001,
            0x80000000, 0x7F800000, 0xFF800000, 0x7FC00001, 0xFFFFFFFF, 0x7F800001]
    return np.array(bits, np.uint32).view(np.float32)


@needs_cuda
@pytest.mark.filterwarnings("ignore:overflow encountered in cast")   # to inf, on purpose
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_write_kv_half(dtype):
    """In place into half caches: half k/v are copied bit for bit; float32 k/v are rounded to
    nearest even exactly as torch rounds them (NaN stays NaN; its payload may not)."""
    import torch
    from inferlab import kernels as K
    tdt = getattr(torch, dtype)
    dev = "cuda" if GPU else "cpu"
    rng = np.random.default_rng(13)
    nb, bs, kvh, d = (4, 4, 1, 32) if SIM else (64, 16, 8, 128)
    n = 3 if SIM else 200
    slots = torch.from_numpy(rng.permutation(nb * bs)[:n].astype(np.int64))
    slots[1] = -1                                                # padding: skipped
    k32 = rng.standard_normal((n, kvh, d), dtype=np.float32) * 100
    k32[0, 0, :18] = _special_floats()
    k32 = torch.from_numpy(k32)
    v32 = torch.from_numpy(rng.standard_normal((n, kvh, d), dtype=np.float32))
    keep = slots >= 0
    for k, v in [(k32.to(tdt), v32.to(tdt)), (k32, v32)]:       # same type, then float32
        fill = torch.full((nb, bs, kvh, d), 7.0, dtype=tdt)
        kc, vc = fill.clone().to(dev), fill.clone().to(dev)
        K.write_kv(k.to(dev), v.to(dev), kc, vc, slots.to(dev), backend="numba-cuda")
        kc, vc = kc.cpu(), vc.cpu()
        for new, cache in ((k, kc), (v, vc)):
            want = fill.clone().view(nb * bs, kvh, d)
            want[slots[keep]] = new[keep].to(tdt)                # torch rounds to nearest even
            got = cache.view(nb * bs, kvh, d)
            nan = torch.isnan(want)
            assert torch.equal(torch.isnan(got), nan)
            if new.dtype == tdt:                                 # a copy: every bit, NaNs too
                assert torch.equal(got.view(torch.int16), want.view(torch.int16))
            else:
                assert torch.equal(got.view(torch.int16)[~nan], want.view(torch.int16)[~nan])


@needs_cuda
def test_half_dtypes_must_agree():
    from inferlab.kernels import numba_cuda
    c = make_case(np.random.default_rng(14), [3], [1], 2, 1, 32, 4)
    with pytest.raises(TypeError, match="one dtype"):
        numba_cuda.paged_attention_decode(c["q"].astype(np.float16), c["k_cache"],
                                          c["v_cache"], c["block_tables"], c["seq_lens"],
                                          c["scale"])
    with pytest.raises(TypeError, match="numba-cuda kernels take"):
        numba_cuda.paged_attention_decode(*(c[k].astype(np.float64) for k in
                                            ("q", "k_cache", "v_cache")),
                                          c["block_tables"], c["seq_lens"], c["scale"])


@pytest.mark.skipif(not GPU, reason="needs a real CUDA GPU")
def test_torch_cuda_tensors_stay_on_device():
    import torch
    from inferlab import kernels as K
    case = _torchify(make_case(np.random.default_rng(8), [100, 7], [1, 1], 9, 3, 64, 16),
                     "cuda")
    out = decode(case, None)                                      # auto -> numba-cuda
    assert out.is_cuda and out.dtype == torch.float32
    torch.testing.assert_close(out, decode(case, "reference"), atol=ATOL, rtol=0)
    k_cache, v_cache = case["k_cache"].clone(), case["v_cache"].clone()
    k = torch.randn(2, 3, 64, device="cuda")
    K.write_kv(k, k, k_cache, v_cache, torch.tensor([0, 17], device="cuda"))
    assert torch.equal(k_cache[1, 1], k[1])


def test_kernels_compile_to_ptx():
    """The simulator does not type-check; compile the real kernels where NVVM/NVRTC exist."""
    if SIM:
        pytest.skip("compilation is checked outside the simulator")
    from numba import types
    from numba.cuda import compile_ptx
    from inferlab.kernels import numba_cuda as nc

    def trivial(x):
        x[0] = 1.0
    try:                                  # is there a CUDA toolkit (NVVM/NVRTC) at all?
        compile_ptx(trivial, (types.float32[::1],), cc=(9, 0))
    except Exception as exc:              # noqa: BLE001 - the toolkit, not our kernels
        pytest.skip(f"no CUDA toolkit to compile with here: {type(exc).__name__}")
    # from here on a failure is our kernels' fault and fails the test
    element = {"float32": types.float32, "float16": types.float16,
               "bfloat16": types.int16}                           # bf16 travels as its bits
    f3, f4 = types.float32[:, :, ::1], types.float32[:, :, :, ::1]
    i1, i2 = types.int32[::1], types.int32[:, ::1]
    for dtype, t in element.items():
        a3, a4 = t[:, :, ::1], t[:, :, :, ::1]
        for src, s in element.items():
            ptx, _ = compile_ptx(nc._write_kv_kernel(src, dtype).py_func,
                                 (s[:, :, ::1],) * 2 + (a4,) * 2 + (types.int64[::1],),
                                 cc=(9, 0))
            assert ".f64" not in ptx
        sig = (a3, a4, a4, i2, i1, i1, types.boolean, types.float32, types.int64, a3, f3, f3,
               f4)
        for group, j in [(1, 2), (3, 2), (8, 4), (4, 4)] if dtype == "float32" else [(4, 4)]:
            ptx, _ = compile_ptx(nc._attention_kernel(group, j, dtype).py_func, sig, cc=(9, 0))
            assert ".f64" not in ptx                              # stays in fp32
            assert ".local" not in ptx                            # per-lane arrays in registers
        ptx, _ = compile_ptx(nc._merge_partitions_kernel(dtype).py_func, (f3, f3, f4, a3),
                             cc=(9, 0))
        assert ".f64" not in ptx


@needs_cuda
def test_engine_requests_sharing_blocks_in_one_step():
    """Two requests with a common 8-token prefix admitted in one step: the second attends
    over the blocks the first writes in that same forward. Every K/V the step writes, and
    both sampled tokens, equal the reference attention's (kept to 2 layers, one step: the
    simulator runs every CUDA thread as a Python thread)."""
    import torch

    import inferlab as il
    device = "cuda" if GPU else "cpu"
    prefix = list(range(100, 108))
    caches, tokens = [], []
    for backend in ("numba-cuda", "reference"):
        eng = il.Engine("tiny-d32", device=device, block_size=4, num_blocks=8, max_model_len=16,
                        attention_backend=backend)
        outs = eng.generate([prefix + [1], prefix + [3]],
                            il.SamplingParams(max_tokens=1, ignore_eos=True), use_tqdm=False)
        assert [o.metrics.num_cached_tokens for o in outs] == [0, 8]
        tokens.append([o.token_ids for o in outs])
        caches.append(torch.stack([eng.runner.k_cache, eng.runner.v_cache]).cpu())
    assert tokens[0] == tokens[1]
    torch.testing.assert_close(caches[0], caches[1], atol=1e-5, rtol=0)
