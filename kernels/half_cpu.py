"""Half-precision rows for the numba CPU attention kernels (numba_cpu.py), without copies.

numba has no 16-bit float type on the CPU, so a half-precision array reaches the kernels as
its raw bits, and the dtype of those bits says which format they are:
  float32 -> float32 (read as is)
  uint16  -> bfloat16 bits (a torch bfloat16 tensor viewed as int16, then as numpy uint16)
  int16   -> float16 bits (a numpy float16 array viewed as int16)
``kernel_array`` makes that view on the host side (no copy). Inside a kernel, ``load_row``
gives one row as float32: the row itself for float32 (numba specialises per dtype, so the
float32 loads compile to nothing, as before), otherwise the row converted into a float32
scratch row. Conversion is exact (every half value is a float32 value) and vectorises:
  bfloat16: the 16 bits shifted left by 16 are the float32's bits.
  float16:  the bits without the sign, shifted left by 13, read as a float32 and multiplied by
            2^112 (the exponent bias 127 - 15), is the magnitude for normal and subnormal
            values alike; exponent 31 (inf, nan) gets float32's all-ones exponent; the sign
            bit moves to bit 31.
Accumulation stays float32 in the kernels; ``result_as`` rounds the result back to q's format.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic, overload

_F16_SCALE = np.float32(2.0 ** 112)


_F32, _F16 = np.dtype(np.float32), np.dtype(np.float16)
_BF16_BITS, _F16_BITS = np.dtype(np.uint16), np.dtype(np.int16)


def bits_view(x):
    """``x`` as a numpy array, a float16 one viewed as its int16 bits (no copy)."""
    x = np.asarray(x)
    return x.view(np.int16) if x.dtype == _F16 else x


def kernel_array(x):
    """``x`` as the kernels read it, C-contiguous (no copy when it is): float32 and half bits
    as they are, a float16 array as its bits; any other dtype cast to float32."""
    x = np.asarray(x)
    dt = x.dtype
    if dt == _F16:
        x = x.view(np.int16)
    elif not (dt == _F32 or dt == _BF16_BITS or dt == _F16_BITS):
        return np.ascontiguousarray(x, np.float32)
    return np.ascontiguousarray(x)


def like_cache(x, cache):
    """New keys or values ``x`` for ``cache`` (a ``bits_view``): half bits of the cache's own
    format, float16 values converted to them; other caches take any float dtype (numba casts)."""
    x = bits_view(x)
    if x.dtype == cache.dtype:
        return x
    if cache.dtype == np.int16 and not is_half(x):
        return np.asarray(x, np.float16).view(np.int16)
    if is_half(x) or is_half(cache):
        raise TypeError(f"k/v bits {x.dtype} do not match the cache's {cache.dtype} "
                        "(uint16 = bfloat16 bits, int16 = float16 bits)")
    return x


def is_half(x) -> bool:
    """Whether a kernel array holds half-precision bits (see the module docstring)."""
    return x.dtype == _BF16_BITS or x.dtype == _F16_BITS


def result_as(out, q):
    """float32 results ``out`` in the dtype of the query ``q`` as given, rounded to nearest
    even: bfloat16 bits by ``_bf16_bits`` (one vectorised pass), float16 through numpy."""
    dt = np.asarray(q).dtype
    if dt == _F32:
        return out
    if dt == _BF16_BITS:
        bits = np.empty(out.shape, np.uint16)
        _bf16_bits(np.ascontiguousarray(out, np.float32).reshape(-1), bits.reshape(-1))
        return bits
    if dt == _F16_BITS:
        return out.astype(np.float16).view(np.int16)
    return out.astype(dt)                           # float16 rounds


@njit(cache=True)
def _bf16_bits(x, out):
    # float32 -> bfloat16 bits: add 0x7FFF plus the lowest kept bit, keep the top 16 bits
    # (round to nearest, ties to even; overflow rounds to inf); nan stays a quiet nan
    b = x.view(np.uint32)
    for i in range(b.shape[0]):
        u = b[i]
        r = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
        if u & np.uint32(0x7FFFFFFF) > np.uint32(0x7F800000):
            r = (u >> np.uint32(16)) | np.uint32(0x40)
        out[i] = np.uint16(r)


def load_row(src, dst):
    """Row ``src`` [D] as float32: ``src`` itself when it is float32, else its values
    converted into the float32 scratch row ``dst`` [D], which is returned. numba only."""
    raise NotImplementedError("load_row runs only inside numba-compiled code")


@overload(load_row)
def _load_row(src, dst):
    if src.dtype == types.float32:
        def same(src, dst):
            return src
        return same
    if src.dtype == types.uint16:                       # bfloat16 bits
        def from_bf16(src, dst):
            bits = dst.view(np.uint32)
            for d in range(src.shape[0]):
                bits[d] = np.uint32(src[d]) << np.uint32(16)
            return dst
        return from_bf16
    if src.dtype == types.int16:                        # float16 bits
        def from_f16(src, dst):
            bits = dst.view(np.uint32)
            n = src.shape[0]
            for d in range(n):                          # magnitude bits into place
                bits[d] = (np.uint32(np.uint16(src[d])) & np.uint32(0x7FFF)) << np.uint32(13)
            for d in range(n):                          # rebias the exponent (and subnormals)
                dst[d] *= _F16_SCALE
            for d in range(n):                          # inf / nan, then the sign
                h = np.uint32(np.uint16(src[d]))
                b = bits[d]
                if h & np.uint32(0x7C00) == np.uint32(0x7C00):
                    b = ((h & np.uint32(0x03FF)) << np.uint32(13)) | np.uint32(0x7F800000)
                bits[d] = b | ((h & np.uint32(0x8000)) << np.uint32(16))
            return dst
        return from_f16
    return None


# --- scalars: one weight or cache element at a time (the one-call decode, decode_cpu.py) -----
@intrinsic
def _f32_of_bits(typingctx, u):
    """float32 whose bits are the low 32 bits of the integer ``u`` (an LLVM bitcast: free,
    and it vectorises; numba widens uint32 arithmetic to 64 bits, hence the truncation)."""
    if not isinstance(u, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        v, width = args[0], sig.args[0].bitwidth
        i32 = ir.IntType(32)
        v = builder.trunc(v, i32) if width > 32 else builder.zext(v, i32) if width < 32 else v
        return builder.bitcast(v, ir.FloatType())
    return types.float32(u), codegen


@intrinsic
def _bits_of_f32(typingctx, f):
    """The uint32 bits of the float32 ``f``."""
    if f != types.float32:
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.IntType(32))
    return types.uint32(types.float32), codegen


def f32(v):
    """One element as float32: a float32 as is, bfloat16 bits (uint16) widened exactly.
    numba only."""
    raise NotImplementedError("f32 runs only inside numba-compiled code")


@overload(f32)
def _f32(v):
    if v == types.float32:
        return lambda v: v
    if v == types.uint16:
        return lambda v: _f32_of_bits(np.uint32(v) << np.uint32(16))
    return None


def stored(v, like):
    """float32 ``v`` as an element of array ``like``: itself for float32, bfloat16 bits
    rounded to nearest even for uint16 (as ``_bf16_bits``, as torch rounds). numba only."""
    raise NotImplementedError("stored runs only inside numba-compiled code")


@overload(stored)
def _stored(v, like):
    if like.dtype == types.float32:
        return lambda v, like: np.float32(v)

    if like.dtype == types.uint16:
        def to_bf16(v, like):
            u = _bits_of_f32(np.float32(v))
            if u & np.uint32(0x7FFFFFFF) > np.uint32(0x7F800000):
                return np.uint16((u >> np.uint32(16)) | np.uint32(0x40))      # quiet nan
            r = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
            return np.uint16(r)
        return to_bf16
    return None
