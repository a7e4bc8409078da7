"""Plumbing for the numba CUDA kernels: device views of torch/numpy/device arrays on the right
stream, scratch allocation, results handed back as the caller's kind; and a warp-shuffle
emulation for numba's CUDA simulator."""
from __future__ import annotations

import threading

import numpy as np
from numba import cuda


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch")


def install_simulator_shuffle():
    """numba's CUDA simulator has no warp shuffles. Emulate shfl_xor_sync with a barrier per
    simulated warp (every lane of a warp reaches each shuffle in these kernels), so the
    simulator runs the very kernels the GPU runs."""
    from numba.cuda.simulator import kernelapi
    if hasattr(kernelapi.FakeCUDAModule, "shfl_xor_sync"):
        return
    lock = threading.Lock()

    def shfl_xor_sync(self, mask, value, lane_mask):
        th = threading.current_thread()              # a simulator BlockThread
        with lock:                                   # one (barrier, slots) per warp of a block
            warps = th._manager.__dict__.setdefault("_warps", {})
            barrier, slots = warps.setdefault(th.thread_id // 32,
                                              (threading.Barrier(32), [None] * 32))
        lane = th.thread_id % 32
        slots[lane] = value
        barrier.wait()
        result = slots[lane ^ lane_mask]
        barrier.wait()
        return result

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
        """A device view of x; ``inplace`` (the caches of write_kv) never copies."""
        if self.torch:
            import torch
            x = x.detach()
            if not inplace:                              # no-ops when already right
                x = x.to(self.device, getattr(torch, np.dtype(dtype).name) if dtype else None)
                x = x.contiguous()
            return cuda.as_cuda_array(x, sync=False)
        if _is_torch(x):
            x = x.numpy()                                # CPU tensor into a numba launch
        if self.host:
            return cuda.to_device(np.ascontiguousarray(x, dtype), stream=self.stream)
        return x

    def empty(self, shape):
        if self.torch:
            import torch                                 # caching allocator, no cudaMalloc
            t = torch.empty(shape, dtype=torch.float32, device=self.device)
            return t, cuda.as_cuda_array(t, sync=False)
        d = cuda.device_array(shape, np.float32, stream=self.stream)
        return d, d

    def result(self, handle, like):
        if self.host:
            out = handle.copy_to_host(stream=self.stream)
            self.stream.synchronize()
            return _to_like(out, like)
        return handle


def _to_like(out, like):
    if _is_torch(like):
        import torch
        return torch.from_numpy(out)
    return out


def host_view(x):
    return x.numpy() if _is_torch(x) else x
