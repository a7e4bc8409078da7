"""numba-CUDA kernels vs the torch reference.

- With a real GPU: the tests below run in-process at real (SmolLM2 / Llama) shapes.
- Without one: ``test_cuda_kernels_in_simulator`` reruns this file in a subprocess with
  NUMBA_ENABLE_CUDASIM=1 (it must be set before numba is imported), where the same tests run
  at tiny shapes -- the simulator runs every CUDA thread as a Python thread.
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


def test_cuda_kernels_in_simulator():
    if SIM:
        pytest.skip("already inside the simulator run")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    here = os.path.dirname(__file__)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           os.path.join(here, "test_kernels_cudasim.py")],
                          env=env, cwd=here, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert " passed" in proc.stdout and " failed" not in proc.stdout


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
    compile_ptx(nc._write_kv_kernel.py_func, (types.float32[:, :, ::1],) * 2 +
                (types.float32[:, :, :, ::1],) * 2 + (types.int64[::1],), cc=(9, 0))
    f3, f4 = types.float32[:, :, ::1], types.float32[:, :, :, ::1]
    i1, i2 = types.int32[::1], types.int32[:, ::1]
    sig = (f3, f4, f4, i2, i1, i1, types.boolean, types.float32, types.int64, f3, f3, f3, f4)
    for group, j in [(1, 2), (3, 2), (8, 4), (4, 4)]:
        ptx, _ = compile_ptx(nc._attention_kernel(group, j).py_func, sig, cc=(9, 0))
        assert ".f64" not in ptx                                  # stays in fp32
    compile_ptx(nc._merge_partitions_kernel.py_func, (f3, f3, f4, f3), cc=(9, 0))


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
