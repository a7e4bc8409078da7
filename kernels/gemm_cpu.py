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

bfloat16 (the same driver, the tile specialised on the panels' dtype): the weights' bf16 bits
(uint16) packed in pairs of k, ``panels[p, i, 2 j + t] = w[32 p + j, 2 i + t]``, so one 32-bit
lane holds two neighbouring products' weights; x comes as its bf16 bits too. Per k pair the
tile loads two 64-byte vectors of the panel, broadcasts R pairs of x and issues 2R AVX512-BF16
dot products (``vdpbf16ps``: two bf16 products added into each fp32 lane), twice the
multiply-adds of an fp32 FMA per instruction and half the bytes. It runs only where the CPU has
AVX512-BF16 (``bf16_dot_available``; on any other CPU LLVM cannot emit it, so ``gemm`` refuses
before compiling), and K must be even.

The readable reference is ``x @ w.T`` (``torch.nn.functional.linear``); the tests compare the
two, and greedy tokens through this backend against transformers (tests/test_gemm.py,
tests/test_parity.py).
"""
from __future__ import annotations

import functools

import llvmlite.ir as ir
import numpy as np
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from .numba_cpu import LOCK   # also chooses numba's threading layer

PANEL = 32                                  # output columns per panel: two 16-float vectors
_VEC = ir.VectorType(ir.FloatType(), 16)
_I32 = ir.IntType(32)


class _BFloat(ir.Type):
    """LLVM's ``bfloat`` (llvmlite.ir has no class for it): the element of vdpbf16ps' inputs."""

    def _to_string(self):
        return "bfloat"

    def __eq__(self, other):
        return isinstance(other, _BFloat)

    def __hash__(self):
        return hash("bfloat")


_BF16X32 = ir.VectorType(_BFloat(), 32)


@functools.cache
def bf16_dot_available() -> bool:
    """Whether the bfloat16 GEMM can run here: the CPU has AVX512-BF16 and numba's LLVM
    compiles for it (NUMBA_CPU_FEATURES or NUMBA_CPU_NAME may say otherwise)."""
    import llvmlite.binding as llvm
    from numba.core import config
    try:
        with open("/proc/cpuinfo") as f:
            has = any(line.startswith("flags") and " avx512_bf16" in line for line in f)
    except OSError:
        has = False
    if config.CPU_FEATURES is not None:
        features = config.CPU_FEATURES
    elif config.CPU_NAME not in (None, "host"):
        return False
    else:
        features = llvm.get_host_cpu_features().flatten()
    return has and "+avx512bf16" in features.split(",")


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
            half = arrays[3].dtype == types.uint16        # bf16 pairs: k runs in twos
            if half:
                fma = cgutils.get_or_insert_function(
                    builder.module, ir.FunctionType(_VEC, [_VEC, _BF16X32, _BF16X32]),
                    "llvm.x86.avx512bf16.dpbf16ps.512")
                px = builder.bitcast(px, _I32.as_pointer())  # a pair of x is one 32-bit word
                wvec = _BF16X32
            else:
                fma = cgutils.get_or_insert_function(
                    builder.module, ir.FunctionType(_VEC, [_VEC] * 3), "llvm.fma.v16f32")
                wvec = _VEC
            steps = builder.sdiv(k, ir.Constant(k.type, 2)) if half else k
            zero = ir.Constant(_VEC, [0.0] * 16)
            acc = [[cgutils.alloca_once_value(builder, zero) for _ in range(2)]
                   for _ in range(rows)]                       # promoted to registers by LLVM
            for r in range(rows):
                for h in range(2):
                    builder.store(zero, acc[r][h])
            lane = _I32 if half else ir.FloatType()
            undef = ir.Constant(ir.VectorType(lane, 16), ir.Undefined)
            splat = ir.Constant(ir.VectorType(_I32, 16), [0] * 16)

            def const(v):
                return ir.Constant(x_off.type, v)

            def vec_ptr(base, offset, vec=_VEC):
                return builder.bitcast(builder.gep(base, [offset]), vec.as_pointer())

            with cgutils.for_range(builder, steps) as loop:
                i = loop.index              # k (float32) or the k pair (bf16: 64 values a line)
                line = builder.add(p_off, builder.mul(i, const(2 * PANEL if half else PANEL)))
                w = [builder.load(vec_ptr(pp, builder.add(line, const(32 * h if half else 16 * h)),
                                          wvec), align=4) for h in range(2)]
                for r in range(rows):
                    xi = builder.add(builder.add(x_off, builder.mul(const(r), ldx)),
                                     builder.mul(i, const(2)) if half else i)
                    if half:            # x's pair (uint16 offsets) as one 32-bit word
                        xi = builder.sdiv(xi, const(2))
                    xv = builder.insert_element(undef, builder.load(builder.gep(px, [xi])),
                                                ir.Constant(_I32, 0))
                    xv = builder.shuffle_vector(xv, undef, splat)      # x[r, i] in every lane
                    if half:
                        xv = builder.bitcast(xv, _BF16X32)
                    for h in range(2):
                        builder.store(builder.call(fma, [builder.load(acc[r][h]), xv, w[h]]
                                                   if half else
                                                   [xv, w[h], builder.load(acc[r][h])]),
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
def row_panel(x, panels, p, y):
    """``y[32 p : 32 p + 32] = panel p`` times the one row ``x`` [K] (y [N] float32, x in the
    panels' dtype; the last panel may be partial). For a caller's own ``prange`` over the
    panels: the one-call decode's matrix-vector products (decode_cpu.py)."""
    k = x.shape[0]
    n = y.shape[0]
    if (p + 1) * PANEL <= n:
        _tile1(x, 0, k, panels, p * k * PANEL, y, p * PANEL, 0, k)
    else:
        part = np.empty(PANEL, dtype=np.float32)
        _tile1(x, 0, k, panels, p * k * PANEL, part, 0, 0, k)
        for j in range(n - p * PANEL):
            y[p * PANEL + j] = part[j]


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
    # panels[p, i // g, g j + i % g] = w[32 p + j, i], g = 1 (float32) or 2 (bf16 pairs)
    n, k = w.shape
    g = panels.shape[2] // PANEL
    for p in prange(panels.shape[0]):
        for j in range(PANEL):
            r = p * PANEL + j
            for i in range(k):
                panels[p, i // g, g * j + i % g] = w[r, i] if r < n else 0


def _bits(a: np.ndarray) -> np.ndarray:
    """float32 as it is; bfloat16 bits (uint16) as they are; anything else as float32."""
    a = np.asarray(a)
    return np.ascontiguousarray(a, dtype=np.uint16 if a.dtype == np.uint16 else np.float32)


def _check_half(k: int):
    if not bf16_dot_available():
        raise RuntimeError("the bfloat16 GEMM needs a CPU with AVX512-BF16 (and numba compiling "
                           "for it); this one has not: use oneDNN (model/linear.py)")
    if k % 2:
        raise ValueError(f"the bfloat16 GEMM takes an even K (pairs of k), got K={k}")


def pack(w: np.ndarray) -> np.ndarray:
    """The weights ``w`` [N, K] as panels: float32 -> [ceil(N / 32), K, 32]; bfloat16 bits
    (uint16) -> [ceil(N / 32), K / 2, 64], k in pairs; zero-padded past N. Over all cores:
    0.07 s for SmolLM2's 0.54 GB where numpy's one-thread copy took 0.5-0.8 s (most of it
    faulting in the new pages), which every ``Engine()`` pays."""
    w = _bits(w)
    g = 2 if w.dtype == np.uint16 else 1
    if g == 2:
        _check_half(w.shape[1])
    panels = np.empty((-(-w.shape[0] // PANEL), w.shape[1] // g, PANEL * g), dtype=w.dtype)
    with LOCK:
        _pack(w, panels)
    return panels


def gemm(x: np.ndarray, panels: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out[M, N] = x[M, K] @ w.T`` for ``panels = pack(w)``; C-contiguous, ``out`` float32;
    ``x`` float32 for float32 panels, bfloat16 bits (uint16) for bfloat16 ones."""
    g = panels.shape[2] // PANEL
    if x.shape[1] != panels.shape[1] * g or out.shape[0] != x.shape[0] \
            or -(-out.shape[1] // PANEL) != panels.shape[0] or x.dtype != panels.dtype:
        raise ValueError(f"gemm: x {x.shape} {x.dtype}, panels {panels.shape} {panels.dtype}, "
                         f"out {out.shape} disagree")
    if g == 2:
        _check_half(x.shape[1])
    with LOCK:                                  # one parallel launch at a time
        _gemm(x, panels, out)
    return out
