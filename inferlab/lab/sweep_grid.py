"""The sweep's vocabulary: which knobs a grid may vary (the engine's own keyword names), how
a grid becomes points, and which workloads a sweep plays (``inferlab.lab.sweep``)."""
from __future__ import annotations

import itertools
import os

from inferlab.errors import InvalidInputError
from inferlab.lab.runs import WORKLOADS, lab_workload

# the knobs a grid may vary: the engine's own keyword names (core/config.py)
KNOBS = ("scheduler", "kv_layout", "max_num_seqs", "max_num_batched_tokens",
         "enable_chunked_prefill", "enable_prefix_caching", "block_size", "num_blocks",
         "kv_cache_memory", "dtype", "max_model_len", "long_prefill_token_threshold",
         "scheduling_policy")
ALIASES = {"chunked_prefill": "enable_chunked_prefill", "prefix_caching": "enable_prefix_caching",
           "kv_blocks": "num_blocks"}
KV_BUDGET = ("num_blocks", "kv_cache_memory")
WORKLOAD_NAMES = {"chat": "chat requests", "synthetic": "random tokens: synthetic",
                  "chat sessions": "random tokens: chat sessions",
                  "agent loops": "random tokens: agent loops"}
SIM_MODEL = "llama-3-8b"     # the shape the chapters' GPU projections price


def knob_name(name: str) -> str:
    """The engine's keyword for a knob name (``chunked_prefill`` -> ``enable_chunked_prefill``);
    an unknown name is an InvalidInputError listing the known ones."""
    if not isinstance(name, str):
        raise InvalidInputError(f"a knob name must be a string, got {name!r}")
    n = ALIASES.get(name, name)
    if n not in KNOBS:
        raise InvalidInputError(f"unknown sweep knob {name!r}; known: {list(KNOBS)} (or "
                                f"{sorted(ALIASES)})")
    return n


def grid_points(grid) -> list[dict]:
    """The points of a grid: a dict of lists (every combination, the last knob fastest) or a
    list of dicts (those points, in order). Names become the engine's keywords."""
    if isinstance(grid, dict):
        if not grid:
            raise InvalidInputError("an empty grid: give at least one knob and its values")
        names = [knob_name(k) for k in grid]
        if len(set(names)) < len(names):
            raise InvalidInputError(f"a knob is named twice in the grid: {list(grid)}")
        values = []
        for k, v in grid.items():
            vs = list(v) if isinstance(v, (list, tuple, range)) else [v]
            if not vs:
                raise InvalidInputError(f"knob {k!r} has no values")
            values.append(vs)
        return [dict(zip(names, combo)) for combo in itertools.product(*values)]
    if isinstance(grid, (list, tuple)) and grid and all(isinstance(p, dict) for p in grid):
        return [{knob_name(k): v for k, v in p.items()} for p in grid]
    raise InvalidInputError("grid must be a dict of lists ({'max_num_seqs': [2, 8]}) or a "
                            f"non-empty list of dicts ([{{'max_num_seqs': 2}}, ...]), got {grid!r}")


def resolve_workload(spec, tokenizer, *, num_requests: int, max_tokens: int | None,
                     rate: float, seed: int):
    """A Workload from ``spec``: a Workload; a callable(tokenizer) -> Workload; one of the
    Lab's workloads (``WORKLOADS``, or ``chat``, ``synthetic``, ``chat sessions``, ``agent
    loops``); or the path of a request log (``sim/request_log.py``)."""
    from inferlab.sim.workloads import Workload
    if isinstance(spec, Workload):
        return spec
    if callable(spec):
        return spec(tokenizer)
    if isinstance(spec, str) and (spec in WORKLOADS or spec in WORKLOAD_NAMES):
        return lab_workload(WORKLOAD_NAMES.get(spec, spec), num_requests, rate,
                            max_tokens or 64, tokenizer, seed)
    if isinstance(spec, (str, os.PathLike)) and os.path.isfile(spec):
        from inferlab.sim.request_log import workload_from_log
        return workload_from_log(spec, tokenizer, max_tokens_cap=max_tokens, seed=seed)
    raise InvalidInputError(f"workload {spec!r} is not a Workload, a Lab workload "
                            f"({sorted(WORKLOAD_NAMES)} or {list(WORKLOADS)}) or a request log "
                            "file that exists")
