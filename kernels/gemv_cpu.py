"""A numba GEMV: ``y[N] = w[N, K] @ x[K]`` in float32, the rows of ``w`` split over all cores.

One sequence decoding multiplies every weight matrix by a single row: memory-bound, so each
core streams its own rows of the plain weights (~1.6x oneDNN's packed GEMV here, BENCHMARKS.md).
The reference is ``torch.nn.functional.linear``; tests/test_parity.py compares the two.
"""
from __future__ import annotations

import numba
import numpy as np

from .numba_cpu import LOCK        # also chooses numba's threading layer


@numba.njit(parallel=True, fastmath=True, cache=True)
def _gemv(w, x, y):                  # y[n] = sum_k w[n, k] * x[k]; rows split over cores
    n, k = w.shape
    for i in numba.prange(n):
        acc = np.float32(0.0)
        for j in range(k):
            acc += w[i, j] * x[j]
        y[i] = acc


def gemv(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``y = w @ x`` for float32 ``w`` [N, K] (C-contiguous), ``x`` [K], ``y`` [N]."""
    with LOCK:                       # one parallel launch at a time
        _gemv(w, x, y)
    return y


@numba.njit(parallel=True, fastmath=True, cache=True)
def _read_all(a):                    # a [n] float32: the sum reads every element once
    s = np.float32(0.0)
    for i in numba.prange(a.size):
        s += a[i]
    return s


def read_all(a: np.ndarray) -> float:
    """Sum of float32 ``a`` over all cores: one streaming read, the memory roof GEMV meets."""
    with LOCK:
        return float(_read_all(a))
