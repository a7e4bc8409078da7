"""The GPU probe's micro-kernels (``inferlab.bench.gpu_probe``, ``kernels/gpu_probe.sh``),
reached through ``inferlab.kernels.cuda_probe_kernels()``: a trivial kernel to time launches
(as the engine launches today, through ``cuda_launch.Launch``, or configured once), a scale
kernel to capture in a CUDA graph, and a bf16 read-and-sum at three load widths (one bf16 per
16-bit load, as the decode kernel reads today; two per 32-bit load; four per 64-bit load).
"""
from __future__ import annotations

import numpy as np
from numba import config, cuda, float32, int32

from inferlab.kernels.cuda_launch import Launch, install_simulator_extras
from inferlab.kernels.cuda_types import LOAD

if config.ENABLE_CUDASIM:
    install_simulator_extras()

_bf16 = LOAD["bfloat16"]
THREADS = 256


@cuda.jit
def add_one(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 1.0


@cuda.jit
def scale(x, y, a):
    i = cuda.grid(1)
    if i < x.size:
        y[i] = a * x[i]


def launch_today(x) -> None:
    """``add_one`` on a torch CUDA tensor the way the engine launches its kernels today: a
    ``Launch`` (torch's stream, a device view) made for the call."""
    lc = Launch(x)
    add_one[(x.numel() + THREADS - 1) // THREADS, THREADS, lc.stream](lc.dev(x, inplace=True))


def add_one_configured(n: int, stream=0):
    """``add_one`` for ``n`` elements with its launch configuration made once."""
    return add_one[(n + THREADS - 1) // THREADS, THREADS, stream]


@cuda.jit(device=True, inline=True)
def _pair(w):
    """The sum of the two bf16 in a 32-bit word (low half, high half) as float32."""
    return (cuda.libdevice.int_as_float(int32(w << 16))
            + cuda.libdevice.int_as_float(int32(w & int32(-65536))))


@cuda.jit(device=True, inline=True)
def _quad(w):
    """The sum of the four bf16 in a 64-bit word as float32."""
    return _pair(int32(w & 0xFFFFFFFF)) + _pair(int32(w >> 32))


def _summing(element):
    """A kernel summing ``element(x[i])`` over a grid-stride loop: out[t] gets thread t's
    partial sum (``element``: the float32 value of one load)."""
    @cuda.jit
    def kernel(x, out):
        t = cuda.grid(1)
        acc = float32(0.0)
        for i in range(t, x.size, cuda.gridsize(1)):
            acc += element(x[i])
        out[t] = acc
    return kernel


# each load width: (kernel, the element type the bf16 bits are read as); out[t] gets thread
# t's partial sum of the whole array
BF16_SUMS = {"16-bit loads (today)": (_summing(_bf16), np.int16),
             "32-bit loads (2 per load)": (_summing(_pair), np.int32),
             "64-bit loads (4 per load)": (_summing(_quad), np.int64)}
