"""inferlab: watch a real LLM inference engine work, from a Jupyter notebook.

    import inferlab as il
    eng = il.Engine()                       # SmolLM2-135M-Instruct on a paged KV cache
    out = eng.generate(["What is the capital of France?"], il.SamplingParams(max_tokens=32))

The package is built in floors, each with one rule (docs/architecture.md):
core/ (bookkeeping, pure Python) -> model/ (tensors) -> engine.py (wires core, model and a
sim/ clock) -> observe/ (traces, metrics) -> lab/ (chapters, figures) and widgets/ (views);
bench/ holds the ``inferlab bench`` commands.
"""
from __future__ import annotations

import importlib.metadata

from . import threads as _threads

_threads.apply()          # OpenMP's wait policy, before anything loads torch (threads.py)

from .core.outputs import RequestMetrics, RequestOutput
from .core.params import SamplingParams
from .errors import (CapacityError, InferlabError, InvalidInputError, InvalidTypeError,
                     ModelLoadError, TraceFormatError)

try:                                        # one source: pyproject.toml, as installed
    __version__ = importlib.metadata.version("inferlab")
except importlib.metadata.PackageNotFoundError:     # run from a source tree, not installed
    __version__ = "0+unknown"

__all__ = ["Engine", "SamplingParams", "RequestOutput", "RequestMetrics",
           "InferlabError", "InvalidInputError", "InvalidTypeError", "ModelLoadError",
           "TraceFormatError", "CapacityError", "__version__"]


def __getattr__(name):
    # torch and transformers load only when the engine is first needed
    if name == "Engine":
        from .engine import Engine
        return Engine
    raise AttributeError(f"module 'inferlab' has no attribute {name!r}")
