"""A numba GEMM for the linear layers: ``y[M, N] = x[M, K] @ w[N, K].T`` on the CPU.

Why not oneDNN: at the row counts a decode step has (8-64 sequences) oneDNN's packed sgemm
ran at 75-170 GFLOP/s here, with the weights streaming from memory, against a ~215 GFLOP/s
ceiling; this kernel runs the same GEMMs at 118-210 (BENCHMARKS.md, "Speed, round 4"). The
idea is the textbook one (a register-tiled micro-kernel over prepacked weights):

- ``pack(w)`` copies the weights once into panels of ``PANEL`` = 32 output columns:
  ``panels[p, k, j] = w[32 p + j, k]`` (zeros past N). A panel is read front to back, one
  128-byte line per k, which the hardware prefetcher streams from memory.
- The micro-kernel computes an R x 32 tile of y (R = 8, 4 or 1 rows): 2R accumulators of 16
  floats live in AVX-512 registers for the whole k loop; per k it loads two vectors of the
  panel, broadcasts R values of x and issues 2R fused multiply-adds. It is written as LLVM
  vector IR through a numba intrinsic, because numba cannot keep an array in registers.
- The driver splits the panels over all cores (``prange``); every panel walks the rows of x
  (in L2 at these sizes) in tiles of 8. A last, partial panel goes through a 32-wide scratch.

The readable reference is ``x @ w.T`` (``torch.nn.functional.linear``); the tests compare the
two, and greedy tokens through this backend against transformers (tests/test_gemm.py,
tests/test_parity.py).
"""
from __future__ import annotations

import llvmlite.ir as ir
import numpy as np
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from .numba_cpu import LOCK   # also chooses numba's threading layer

PANEL = 32                                  # output columns per panel: two 16-float vectors
_VEC = ir.VectorType(ir.FloatType(), 16)
_I32 = ir.IntType(32)


def _tile_kernel(rows: int):
    """An intrinsic ``tile(x, x_off, ldx, panels, p_off, y, y_off, ldy, k)``: y[rows, 32] (at
    flat offset y_off, row stride ldy) = x[rows, k] (x_off, ldx) times the panel at p_off."""
    @intrinsic
    def tile(typingctx, x, x_off, ldx, panels, p_off, y, y_off, ldy, k):
        ip = types.intp
        sig = types.void(x, ip, ip, panels, ip, y, ip, ip, ip)

        def codegen(context, builder, signature, args):
            x, x_off, ldx, panels, p_off, y, y_off, ldy, k = args
            arrays = signature.args
            px = context.make_array(arrays[0])(context, builder, x).data
            pp = context.make_array(arrays[3])(context, builder, panels).data
            py = context.make_array(arrays[5])(context, builder, y).data
            fma = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(_VEC, [_VEC] * 3), "llvm.fma.v16f32")
            zero = ir.Constant(_VEC, [0.0] * 16)
            acc = [[cgutils.alloca_once_value(builder, zero) for _ in range(2)]
                   for _ in range(rows)]                       # promoted to registers by LLVM
            for r in range(rows):
                for h in range(2):
                    builder.store(zero, acc[r][h])
            undef = ir.Constant(_VEC, ir.Undefined)
            splat = ir.Constant(ir.VectorType(_I32, 16), [0] * 16)

            def const(v):
                return ir.Constant(x_off.type, v)

            def vec_ptr(base, offset):
                return builder.bitcast(builder.gep(base, [offset]), _VEC.as_pointer())

            with cgutils.for_range(builder, k) as loop:
                i = loop.index
                line = builder.add(p_off, builder.mul(i, const(PANEL)))
                w = [builder.load(vec_ptr(pp, builder.add(line, const(16 * h))), align=4)
                     for h in range(2)]
                for r in range(rows):
                    xi = builder.add(builder.add(x_off, builder.mul(const(r), ldx)), i)
                    xv = builder.insert_element(undef, builder.load(builder.gep(px, [xi])),
                                                ir.Constant(_I32, 0))
                    xv = builder.shuffle_vector(xv, undef, splat)      # x[r, i] in every lane
                    for h in range(2):
                        builder.store(builder.call(fma, [xv, w[h], builder.load(acc[r][h])]),
                                      acc[r][h])
            for r in range(rows):
                row = builder.add(y_off, builder.mul(const(r), ldy))
                for h in range(2):
                    builder.store(builder.load(acc[r][h]),
                                  vec_ptr(py, builder.add(row, const(16 * h))), align=4)
            return context.get_dummy_value()
        return sig, codegen
    return tile


_tile8 = _tile_kernel(8)
_tile4 = _tile_kernel(4)
_tile1 = _tile_kernel(1)


@njit(cache=True)
def _panel(x, panels, p, y, y_col, ldy):
    # y[:, y_col:y_col + 32] = x @ panel p, all rows, 8 at a time
    m, k = x.shape
    p_off = p * k * PANEL
    r = 0
    while r + 8 <= m:
        _tile8(x, r * k, k, panels, p_off, y, r * ldy + y_col, ldy, k)
        r += 8
    while r + 4 <= m:
        _tile4(x, r * k, k, panels, p_off, y, r * ldy + y_col, ldy, k)
        r += 4
    while r < m:
        _tile1(x, r * k, k, panels, p_off, y, r * ldy + y_col, ldy, k)
        r += 1


@njit(cache=True, parallel=True)
def _gemm(x, panels, y):
    # x [M, K] and y [M, N] C-contiguous; panels [P, K, 32] with P = ceil(N / 32)
    m = x.shape[0]
    n = y.shape[1]
    full = n // PANEL
    for p in prange(panels.shape[0]):
        if p < full:
            _panel(x, panels, p, y, p * PANEL, n)
        else:                                   # the last panel, partial: through a scratch
            part = np.empty((m, PANEL), dtype=np.float32)
            _panel(x, panels, p, part, 0, PANEL)
            for r in range(m):
                for j in range(n - p * PANEL):
                    y[r, p * PANEL + j] = part[r, j]


@njit(cache=True, parallel=True)
def _pack(w, panels):
    n, k = w.shape
    for p in prange(panels.shape[0]):
        for j in range(PANEL):
            r = p * PANEL + j
            for i in range(k):
                panels[p, i, j] = w[r, i] if r < n else np.float32(0.0)


def pack(w: np.ndarray) -> np.ndarray:
    """The weights ``w`` [N, K] (float32) as panels [ceil(N / 32), K, 32], zero-padded. Over
    all cores: 0.07 s for SmolLM2's 0.54 GB where numpy's one-thread copy took 0.5-0.8 s
    (most of it faulting in the new pages), which every ``Engine()`` pays."""
    panels = np.empty((-(-w.shape[0] // PANEL), w.shape[1], PANEL), dtype=np.float32)
    with LOCK:
        _pack(np.ascontiguousarray(w, dtype=np.float32), panels)
    return panels


def gemm(x: np.ndarray, panels: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out[M, N] = x[M, K] @ w.T`` for ``panels = pack(w)``; float32, C-contiguous."""
    if x.shape[1] != panels.shape[1] or out.shape[0] != x.shape[0] \
            or -(-out.shape[1] // PANEL) != panels.shape[0]:
        raise ValueError(f"gemm: x {x.shape}, panels {panels.shape}, out {out.shape} disagree")
    with LOCK:                                  # one parallel launch at a time
        _gemm(x, panels, out)
    return out
