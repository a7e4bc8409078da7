"""`inferlab cache info|warm|verify|clear`: the command line's view of the weights cache
(inferlab/model/weights_cache.py)."""
from __future__ import annotations


def run(action: str) -> int:
    """info | warm | verify | clear: the weights cache (inferlab/model/weights_cache.py)."""
    import time

    from inferlab.model import weights_cache
    if action == "warm":  # convert the default GGUF now (binder/postBuild), not at first use
        from inferlab.core.config import default_dtype
        from inferlab.model.loader import load_model_uncached
        t = time.perf_counter()
        dtype = default_dtype()             # what an Engine() will load (INFERLAB_DTYPE)
        loaded = load_model_uncached(None, dtype)
        how = {"converted": "converted and saved", "cache": "read from the cache (the engine's "
               "own file written)", "engine file": "already cached"}.get(loaded.origin,
                                                                          loaded.origin)
        print(f"{loaded.name} ({dtype}): {how} in {time.perf_counter() - t:.1f} s "
              f"({weights_cache.cache_root()})")
        import importlib.util
        if importlib.util.find_spec("numba") is not None:
            # numba compiles the fused forward and attention kernels on first use, ~30 s, and
            # caches them next to their sources: done here, a new Binder image starts warm
            import inferlab as il
            t = time.perf_counter()
            eng = il.Engine()                 # its warm-up: the one-token and prompt paths
            eng.generate(["Hello", "Hello there"], il.SamplingParams(max_tokens=2),
                         use_tqdm=False)      # and a batch: the multi-row decode path
            print(f"numba kernels compiled (or found in numba's cache) in "
                  f"{time.perf_counter() - t:.1f} s")
        return 0
    if action == "verify":     # every byte of every entry against its sha256
        from inferlab.model import engine_files, hf_dir
        bad = 0
        for e in weights_cache.info()["entries"]:
            problem = hf_dir.verify(e["path"]) or engine_files.verify_all(e["path"])
            bad += problem is not None
            print(f"  {e['name']}: {problem or 'whole'}")
        return 1 if bad else 0
    if action == "clear":
        freed = weights_cache.clear()
        print(f"removed {freed / 2**20:.1f} MiB from {weights_cache.cache_root()}")
        return 0
    st = weights_cache.info()
    state = "on" if st["enabled"] else "off: INFERLAB_WEIGHTS_CACHE=0"
    print(f"weights cache: {st['root']} ({state}), {len(st['entries'])} entries, "
          f"{st['bytes'] / 2**20:.1f} MiB")
    for e in st["entries"]:
        print(f"  {e['name']}  {e['bytes'] / 2**20:.1f} MiB  from {e['source']}  "
              f"(transformers {e['transformers']}, {e['created']})")
    return 0
