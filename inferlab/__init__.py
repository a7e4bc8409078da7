"""inferlab: watch a real LLM inference engine work, from a Jupyter notebook.

    import inferlab as il
    eng = il.Engine()                       # SmolLM2-135M-Instruct on a paged KV cache
    out = eng.generate(["What is the capital of France?"], il.SamplingParams(max_tokens=32))
"""
from __future__ import annotations

from inferlab.errors import (CapacityError, InferlabError, InvalidInputError, InvalidTypeError,
                     ModelLoadError, TraceFormatError)
from inferlab.core.outputs import RequestMetrics, RequestOutput
from inferlab.core.params import SamplingParams

__version__ = "0.1.0"

__all__ = ["Engine", "SamplingParams", "RequestOutput", "RequestMetrics", "compare",
           "InferlabError", "InvalidInputError", "InvalidTypeError", "ModelLoadError",
           "TraceFormatError", "CapacityError", "__version__"]


def __getattr__(name):
    # torch and transformers load only when the engine is first needed
    if name == "Engine":
        from inferlab.engine import Engine
        return Engine
    if name == "compare":
        from inferlab.lab.compare import compare
        return compare
    if name in ("workloads", "figures", "trace", "metrics", "costmodel"):
        import importlib
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'inferlab' has no attribute {name!r}")
