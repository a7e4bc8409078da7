"""Clocks: the only face of ``sim/`` the engine sees.

A clock tells the time (``now``), advances by one step (``advance_step``: by the measured wall
time, or by the roofline price of the step on a named GPU) and skips idle gaps (``skip_to``).
"""
from __future__ import annotations

import time
from typing import Protocol

from ..core.shapes import ModelShape, model_shape
from ..errors import InvalidInputError, check_type
from .costmodel import step_time
from .gpus import GPUProfile
from .profiles import get_gpu
from .this_cpu import is_this_cpu


class Clock(Protocol):
    name: str

    def now(self) -> float: ...

    def advance_step(self, chunks: list[tuple[int, int]], wall_elapsed: float) -> float:
        """Account for one step of ``chunks`` [(new_tokens, context_after)]; returns its
        duration on this clock."""

    def skip_to(self, t: float) -> None: ...


class WallClock:
    """Measured time. Idle gaps before a future arrival are skipped, not slept through."""

    name = "wall"

    def __init__(self):
        self._start = time.perf_counter()
        self._skipped = 0.0

    def now(self) -> float:
        return time.perf_counter() - self._start + self._skipped

    def advance_step(self, chunks, wall_elapsed: float) -> float:
        return wall_elapsed   # real time has already passed

    def skip_to(self, t: float) -> None:
        self._skipped += max(0.0, t - self.now())


class SimulatedClock:
    """Time that advances by the roofline price of each step on ``gpu`` for ``shape``."""

    def __init__(self, gpu: GPUProfile | str, shape: ModelShape, dtype_bytes: int = 2, tp: int = 1):
        self.gpu = get_gpu(gpu) if isinstance(gpu, str) else gpu
        self.shape, self.dtype_bytes, self.tp = shape, dtype_bytes, tp
        tp_note = f", tp={tp}" if tp > 1 else ""
        self.name = f"{self.gpu.name} (simulated, {shape.name} shape{tp_note})"
        self._now = 0.0

    def now(self) -> float:
        return self._now

    def advance_step(self, chunks, wall_elapsed: float = 0.0) -> float:
        dt = step_time(self.gpu, self.shape, chunks, self.dtype_bytes, self.tp)
        self._now += dt
        return dt

    def skip_to(self, t: float) -> None:
        self._now = max(self._now, t)


def make_clock(clock: str = "wall", *, hf_config=None, sim_model: str | None = None,
               model_name: str | None = None, dtype_bytes: int | None = None, tp: int = 1):
    """The clock an engine config asks for: "wall", or a GPU pricing ``sim_model`` (a shape
    name) or else the real model's ``hf_config``. Simulated GPU steps are priced in bf16 (how
    the GPU would serve it), whatever dtype the CPU run uses; "this-cpu" (this machine,
    measured) prices the dtype the run really uses (the config's, float32 by default)."""
    check_type("clock", clock, str, "'wall', 'this-cpu' or a GPU name such as 'H100'")
    if clock == "wall":
        return WallClock()
    gpu = get_gpu(clock)
    if sim_model is not None:
        shape = model_shape(sim_model)
    elif hf_config is not None:
        shape = ModelShape.from_hf_config(hf_config, model_name)
    else:
        raise InvalidInputError("a simulated clock needs sim_model (a shape name) or hf_config")
    if dtype_bytes is None:
        dtype_bytes = _run_dtype_bytes(hf_config) if is_this_cpu(clock) else 2
    return SimulatedClock(gpu, shape, dtype_bytes, tp)


def _run_dtype_bytes(hf_config) -> int:
    """Bytes per element of the weights the run loaded (transformers records it in the
    config as ``dtype``/``torch_dtype``); 4 (float32, the engine's default) when unknown."""
    for attr in ("dtype", "torch_dtype"):
        d = str(getattr(hf_config, attr, None) or "")
        if d:
            d = d.removeprefix("torch.")
            return {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}.get(d, 4)
    return 4


def check_clock(clock: str) -> None:
    """Raise a clear error now for a clock name no profile knows (before any model loads).
    "this-cpu" is accepted without measuring (that happens when the clock is made)."""
    check_type("clock", clock, str, "'wall', 'this-cpu' or a GPU name such as 'H100'")
    if clock != "wall" and not is_this_cpu(clock):
        get_gpu(clock)
