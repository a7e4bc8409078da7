"""Element types of the numba-CUDA kernels: device functions that load an element to float32
(``LOAD[dtype]``) and store a float32 as an element (``STORE[dtype]``), for dtype float32,
float16 or bfloat16. float16 is numba's own type (an array's setitem rounds a float32 to
nearest even); bfloat16 arrays are int16 bit patterns (cuda_launch.py), converted here with
integer ops and libdevice's bit casts (the simulator's: cuda_launch.install_simulator_extras).
"""
from __future__ import annotations

import functools

from numba import cuda, float32, int32


@cuda.jit(device=True, inline=True)
def _to_f32(x):              # a float32 or float16 element
    return float32(x)


@cuda.jit(device=True, inline=True)
def _bf16_to_f32(x):         # bf16 bits (int16): the upper half of a float32's bits
    return cuda.libdevice.int_as_float(int32(x) << 16)


@cuda.jit(device=True, inline=True)
def _as_is(x):               # into a float32 / float16 array: its setitem rounds to nearest even
    return x


@cuda.jit(device=True, inline=True)
def _f32_to_bf16(x):         # float32 -> bf16 bits, round to nearest even (ties to even)
    if x != x:
        return 0x7FC0                                    # NaN: the quiet NaN
    b = cuda.libdevice.float_as_int(x)                   # as int32: >> sign-extends, and the
    return (b + 0x7FFF + ((b >> 16) & 1)) >> 16          # low 16 bits of the result are the bf16


LOAD = {"float32": _to_f32, "float16": _to_f32, "bfloat16": _bf16_to_f32}
STORE = {"float32": _as_is, "float16": _as_is, "bfloat16": _f32_to_bf16}


@functools.cache
def converter(src: str, dst: str):
    """Device function: an element of type src -> an element of type dst (the same type: the
    bits as they are, NaN payloads too)."""
    if src == dst:
        return _as_is
    load, store = LOAD[src], STORE[dst]

    @cuda.jit(device=True, inline=True)
    def convert(x):
        return store(load(x))
    return convert
