"""``inferlab bench sweep PARAMS.json``: a grid of engine knobs from a file in the shape of
vLLM's ``vllm bench sweep serve --serve-params``, run on the real model, one result file.

vLLM's shape (vllm/benchmarks/sweep/param_sweep.py, ``ParameterSweep.read_json``; the docs'
benchmarking/sweeps.md): either a list of dicts, each one server configuration::

    [{"max_num_seqs": 32, "max_num_batched_tokens": 1024},
     {"max_num_seqs": 64, "max_num_batched_tokens": 2048}]

or a dict whose keys name the configurations (vLLM's ``_benchmark_name``)::

    {"small": {"max_num_seqs": 32}, "large": {"max_num_seqs": 64}}

Keys are ``vllm serve``'s arguments with ``_`` or ``-`` (``max-num-seqs``); a boolean is the
flag on or off (``--enable-prefix-caching`` / ``--no-enable-prefix-caching``). Each key maps
to the lab's knob (``VLLM_NAMES``); one with no counterpart in the lab's engine
(``gpu_memory_utilization``, ``tensor_parallel_size`` ...) is a clear error, never ignored.
"""
from __future__ import annotations

import json
import os
import shlex

from inferlab.errors import InvalidInputError
from inferlab.lab.sweep import Sweep
from inferlab.lab.sweep_grid import KNOBS

# vLLM's `vllm serve` argument -> the lab engine's keyword (same meaning)
VLLM_NAMES = {
    "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "enable_chunked_prefill": "enable_chunked_prefill",
    "enable_prefix_caching": "enable_prefix_caching",
    "block_size": "block_size",
    "max_model_len": "max_model_len",
    "long_prefill_token_threshold": "long_prefill_token_threshold",
    "scheduling_policy": "scheduling_policy",
    "num_gpu_blocks_override": "num_blocks",        # vLLM's override of the KV block count
    "kv_cache_memory_bytes": "kv_cache_memory",     # vLLM's KV budget in bytes
    "dtype": "dtype",
}
# vLLM's dtype spellings -> the lab's
VLLM_DTYPES = {"float32": "float32", "float": "float32", "float16": "float16",
               "half": "float16", "bfloat16": "bfloat16"}
NAME_KEY = "_benchmark_name"


def _knob(key: str, value):
    k = key.replace("-", "_")
    if k in VLLM_NAMES:
        k = VLLM_NAMES[k]
    elif k not in KNOBS:                 # the lab's own knobs (scheduler, kv_layout ...)
        raise InvalidInputError(
            f"--serve-params key {key!r} has no counterpart in the lab's engine; vLLM names it "
            f"maps: {sorted(VLLM_NAMES)}; the lab's own knobs: {list(KNOBS)}")
    if k == "dtype":
        if value == "auto":
            from inferlab.core.config import default_dtype
            value = default_dtype()
        elif value not in VLLM_DTYPES:
            raise InvalidInputError(f"dtype {value!r}: the lab runs {sorted(VLLM_DTYPES)} "
                                    "or 'auto'")
        value = VLLM_DTYPES.get(value, value)
    return k, value


def parse_serve_params(data) -> tuple[list[dict], list[str | None]]:
    """(points as the lab's knobs, their names) from vLLM's --serve-params value: a list of
    dicts, or a dict of name -> dict."""
    if isinstance(data, dict):
        records = []
        for name, params in data.items():
            if not isinstance(params, dict):
                raise InvalidInputError(f"--serve-params entry {name!r} must be a dict of "
                                        f"arguments, got {type(params).__name__}")
            records.append({NAME_KEY: name, **params})
    elif isinstance(data, list):
        records = data
    else:
        raise InvalidInputError("--serve-params must be a list of dicts or a dict of "
                                f"name -> dict (vLLM's shape), got {type(data).__name__}")
    if not records:
        raise InvalidInputError("--serve-params holds no configuration")
    points, names = [], []
    for k, rec in enumerate(records):
        if not isinstance(rec, dict):
            raise InvalidInputError(f"--serve-params item {k} must be a dict, got "
                                    f"{type(rec).__name__}")
        names.append(rec.get(NAME_KEY))
        points.append(dict(_knob(key, v) for key, v in rec.items() if key != NAME_KEY))
    given = [n for n in names if n is not None]
    if len(given) != len(set(given)):
        raise InvalidInputError(f"--serve-params names repeat: {given}")
    return points, names


def load_params(path):
    """A ``--serve-params`` file's JSON, or an error that names the file and what is wrong."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise InvalidInputError(f"cannot read {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise InvalidInputError(f"{path} is not JSON: {e}") from None


def read_serve_params(path) -> tuple[list[dict], list[str | None]]:
    return parse_serve_params(load_params(path))


def main(params: str, *, workload: str = "chat", requests: int | None = None,
         repeats: int = 1, out: str | None = None, model: str | None = None,
         clock: str = "wall", rate: float = 0.0, argv=None, progress=None):
    """Run the sweep; print one line per point and the frontier; write ``out`` (default
    build/bench/sweep.json) with the command, CPU, flags, date and load."""
    points, names = read_serve_params(params)
    command = "inferlab " + shlex.join(argv) if argv else f"inferlab bench sweep {params}"
    out = out or os.path.join("build", "bench", "sweep.json")
    traces = os.path.splitext(out)[0] + "-traces"
    sw = Sweep(points, workload=workload, model=model, repeats=repeats, clock=clock,
               out_dir=traces, num_requests=requests or 12, rate=rate, command=command)
    res = sw.run(progress=progress)
    res.meta["names"] = names
    front = set(res.frontier())
    for i, r in enumerate(res.rows):
        name = names[r["point"]] or ", ".join(f"{k}={v}" for k, v in r["knobs"].items())
        if r["error"]:
            print(f"point {r['point']:2d} {name}: error: {r['error']}")
            continue
        m = r["metrics"]
        print(f"point {r['point']:2d} {name}: {m['output_tok_s']:.1f} output tok/s, "
              f"{m['output_tok_s_per_user']:.2f} per user, TTFT p50 {m['ttft_p50_ms']:.0f} ms"
              + ("  (frontier)" if i in front else ""))
    if res.meta.get("warning"):
        print(res.meta["warning"])
    print(f"{res.meta['label']}\nwritten to {res.to_json(out)} (traces in {traces})")
    return res
