"""The KV cache's pages resident as blocks are written, against all of them from the start.

    python -m inferlab.bench.kv_pages --repeats 5 --out docs/results/kv-pages-amd.json

``model/runner.kv_zeros`` allocates the KV cache as an anonymous mapping (zero pages), so
an engine holds the blocks it has written rather than its whole budget; ``torch.zeros``, as
before, writes every byte at the start. Two engines of SmolLM2 with 512 blocks in one
process, their cache tensors made anew one way each, A B A B on eight requests of 48 new
tokens: the seconds to allocate the two tensors, the KV bytes resident then and after the
runs (the pages of its two cache tensors that are in memory, from mincore), and tokens per
second (median, range).
"""
from __future__ import annotations

import argparse
import ctypes
import mmap
import statistics
import sys
import time

import torch

SIDES = ("pages as written", "all pages at start")


def resident(t: torch.Tensor) -> int:
    """Bytes of ``t``'s storage that are in memory (mincore over its pages)."""
    libc = ctypes.CDLL(None, use_errno=True)
    page = mmap.PAGESIZE
    start = t.data_ptr() // page * page
    end = t.data_ptr() + t.untyped_storage().nbytes()
    n = (end - start + page - 1) // page
    vec = (ctypes.c_ubyte * n)()
    if libc.mincore(ctypes.c_void_p(start), ctypes.c_size_t(n * page), vec) != 0:
        raise OSError(ctypes.get_errno(), "mincore failed")
    return sum(v & 1 for v in vec) * page


def run(repeats: int = 5, num_blocks: int = 512) -> dict:
    import inferlab as il
    from inferlab.model.runner import kv_zeros
    engines, out = {}, {s: {} for s in SIDES}
    for side in SIDES:
        engines[side] = il.Engine(num_blocks=num_blocks)
        r = engines[side].runner
        shape, dtype = tuple(r.k_cache.shape), r.k_cache.dtype
        make = (lambda: kv_zeros(shape, dtype, "cpu")) if side == SIDES[0] else \
            (lambda: torch.zeros(shape, dtype=dtype))
        t = time.perf_counter()
        r.k_cache, r.v_cache = make(), make()         # the engine's two cache tensors, anew
        out[side]["alloc_s"] = round(time.perf_counter() - t, 3)
        out[side]["kv_reserved_bytes"] = r.k_cache.nbytes + r.v_cache.nbytes
        out[side]["kv_resident_built_bytes"] = resident(r.k_cache) + resident(r.v_cache)
    p = il.SamplingParams(max_tokens=48, ignore_eos=True)
    prompts = [f"Tell me about the number {i}." for i in range(8)]
    rates: dict = {s: [] for s in SIDES}
    for i in range(repeats + 1):                     # round 0 warms both
        for side in (SIDES if i % 2 else SIDES[::-1]):
            t = time.perf_counter()
            outs = engines[side].generate(prompts, p, use_tqdm=False)
            if i:
                rates[side].append(sum(len(o.token_ids) for o in outs)
                                   / (time.perf_counter() - t))
    for side in SIDES:
        r = engines[side].runner
        out[side]["kv_resident_after_bytes"] = resident(r.k_cache) + resident(r.v_cache)
        out[side]["tok_s"] = {"median": statistics.median(rates[side]),
                              "min": min(rates[side]), "max": max(rates[side])}
    out["ratio"] = round(out[SIDES[0]]["tok_s"]["median"] / out[SIDES[1]]["tok_s"]["median"], 3)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m inferlab.bench.kv_pages", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    res = run(a.repeats)
    import json
    print(json.dumps(res, indent=1))
    from inferlab.bench.common import save_result
    save_result("inferlab.bench.kv_pages", argv, res, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
