"""Plumbing for the numba CUDA kernels: device views of torch/numpy/device arrays on the right
stream, scratch allocation, results handed back as the caller's kind and dtype; and what
numba's CUDA simulator lacks and the kernels use (warp shuffles, two libdevice bit casts).

Element types: float32, float16 (numba has a float16 type, on the GPU and in the simulator),
bfloat16 (numba has none that arrays, the simulator or torch's ``__cuda_array_interface__``
take): a bf16 array travels as its int16 bit pattern (``t.view(torch.int16)``), and the
kernels convert (``numba_cuda.LOAD`` / ``STORE``)."""
from __future__ import annotations

import threading

import numpy as np
from numba import cuda


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch")


DTYPES = ("float32", "float16", "bfloat16")     # what the kernels take
BITS_DTYPE = np.int16                            # how a bfloat16 array travels to numba


def dtype_name(x) -> str:
    """"float32", "float16", "bfloat16", ... of a torch tensor, numpy or numba array."""
    return str(x.dtype).rsplit(".", 1)[-1]


def _bits(x):
    """x itself, or for bfloat16 (torch, or numpy's ml_dtypes.bfloat16) its int16 bits."""
    if dtype_name(x) != "bfloat16":
        return x
    if _is_torch(x):
        import torch
        return x.view(torch.int16)
    return x.view(BITS_DTYPE)


class _SimLibdevice:
    """The two libdevice bit casts the kernels use, for the simulator (numpy scalar views)."""

    @staticmethod
    def int_as_float(i):
        return np.uint32(int(i) & 0xFFFFFFFF).view(np.float32)

    @staticmethod
    def float_as_int(f):
        return np.float32(f).view(np.int32)


def install_simulator_extras():
    """What numba's CUDA simulator lacks and the kernels use, so that the simulator runs the
    very kernels the GPU runs: ``cuda.libdevice.int_as_float`` / ``float_as_int`` (numpy
    views), and warp shuffles: ``shfl_xor_sync`` with a barrier per simulated warp (every
    lane of a warp reaches each shuffle in these kernels)."""
    from numba.cuda.simulator import kernelapi
    if not hasattr(kernelapi.FakeCUDAModule, "libdevice"):
        kernelapi.FakeCUDAModule.libdevice = _SimLibdevice
    if hasattr(kernelapi.FakeCUDAModule, "shfl_xor_sync"):
        return
    lock = threading.Lock()

    def shfl_xor_sync(self, mask, value, lane_mask):
        th = threading.current_thread()              # a simulator BlockThread
        with lock:                                   # one (barrier, 2 x slots) per warp
            warps = th._manager.__dict__.setdefault("_warps", {})
            barrier, slots = warps.setdefault(th.thread_id // 32,
                                              (threading.Barrier(32),
                                               ([None] * 32, [None] * 32)))
        # One barrier per shuffle, the slots double-buffered: a lane writes the other buffer
        # next time, and can only pass that shuffle's barrier once every lane has read this
        # one (every lane of a warp reaches each shuffle in these kernels).
        phase = th.__dict__.get("_shfl_phase", 0)
        th._shfl_phase = phase ^ 1
        lane = th.thread_id % 32
        slots[phase][lane] = value
        barrier.wait()
        return slots[phase][lane ^ lane_mask]

    kernelapi.FakeCUDAModule.shfl_xor_sync = shfl_xor_sync


class Launch:
    """Device views of the arguments, the stream to run on, and how to hand results back."""

    def __init__(self, like):
        self.torch = _is_torch(like) and like.is_cuda
        self.host = not self.torch and not hasattr(like, "__cuda_array_interface__")
        if self.torch:
            import torch
            self.device = like.device
            self.stream = cuda.external_stream(torch.cuda.current_stream(like.device).cuda_stream)
        else:
            self.stream = cuda.default_stream()

    def dev(self, x, dtype=None, inplace=False):
        """A device view of x (bfloat16: of its int16 bits); ``inplace`` (the caches of
        write_kv) never copies."""
        if self.torch:
            import torch
            x = x.detach()
            if not inplace:                              # no-ops when already right
                x = x.to(self.device, getattr(torch, np.dtype(dtype).name) if dtype else None)
                x = x.contiguous()
            return cuda.as_cuda_array(_bits(x), sync=False)
        if _is_torch(x):
            x = _bits(x).numpy()                         # CPU tensor into a numba launch
        if self.host:
            return cuda.to_device(np.ascontiguousarray(_bits(x), dtype), stream=self.stream)
        return x

    def empty(self, shape, dtype: str = "float32"):
        """(handle to give back, device view) of a new array of ``dtype`` (a DTYPES name)."""
        if self.torch:
            import torch                                 # caching allocator, no cudaMalloc
            t = torch.empty(shape, dtype=getattr(torch, dtype), device=self.device)
            return t, cuda.as_cuda_array(_bits(t), sync=False)
        np_dtype = BITS_DTYPE if dtype == "bfloat16" else np.dtype(dtype)
        d = cuda.device_array(shape, np_dtype, stream=self.stream)
        return d, d

    def result(self, handle, like):
        if self.host:
            out = handle.copy_to_host(stream=self.stream)
            self.stream.synchronize()
            return _to_like(out, like)
        return handle


def _to_like(out, like):
    """Host result ``out`` as ``like``'s kind and dtype (bfloat16 comes back as int16 bits)."""
    if _is_torch(like):
        import torch
        t = torch.from_numpy(out)
        return t.view(torch.bfloat16) if dtype_name(like) == "bfloat16" else t
    return out.view(like.dtype) if dtype_name(like) == "bfloat16" else out


def host_view(x):
    """The host memory of x as numpy (bfloat16: its int16 bits), shared, not copied."""
    x = _bits(x)
    return x.numpy() if _is_torch(x) else x
