"""Profiles by name: the datasheet GPUs (gpus.py) and this machine, measured (this_cpu.py)."""
from __future__ import annotations

from ..core.shapes import norm_name
from ..errors import InvalidInputError, check_type
from .gpus import ALIASES, GPUS, GPUProfile
from .this_cpu import is_this_cpu, this_cpu_profile


def get_gpu(name: str) -> GPUProfile:
    """The profile called ``name`` (case-insensitive; "H100", "h100-sxm", "A100 80GB" ...),
    or "this-cpu": this machine, measured on first use (``this_cpu.py``)."""
    check_type("gpu", name, str, f"a GPU name, one of {sorted(GPUS)}")
    key = norm_name(name)
    if is_this_cpu(name):
        return this_cpu_profile()
    for canon in GPUS:
        if norm_name(canon) == key:
            return GPUS[canon]
    if key in ALIASES:
        return GPUS[ALIASES[key]]
    raise InvalidInputError(f"unknown GPU {name!r}; known: {sorted(GPUS)}, 'this-cpu' "
                            "(this machine, measured) or clock='wall'")
