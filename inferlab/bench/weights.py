"""``inferlab export-hf`` and ``inferlab cache ...``: the command-line face of the weights
cache (inferlab/model/weights_cache.py), here because the CLI does not import model/ itself."""
from __future__ import annotations


def export_hf(out_dir: str, model: str | None = None, dtype: str = "float32", out=print) -> int:
    from inferlab.model.loader import export_hf as export
    path = export(model, out_dir, dtype)
    out(f"wrote {path} (a transformers directory with safetensors; load it with "
        f"vllm.LLM(model={path!r}) or transformers' from_pretrained)")
    return 0


def cache(action: str, out=print) -> int:
    from inferlab.model import weights_cache
    if action == "warm":     # convert the default GGUF now (binder/postBuild), not at first use
        import time

        from inferlab.model.loader import _load_model
        t = time.perf_counter()
        loaded = _load_model(None)
        how = "already cached" if loaded.cache_path else "converted and saved"
        out(f"{loaded.name}: {how} in {time.perf_counter() - t:.1f} s "
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
            out(f"numba kernels compiled (or found in numba's cache) in "
                f"{time.perf_counter() - t:.1f} s")
        return 0
    if action == "clear":
        freed = weights_cache.clear()
        out(f"removed {freed / 2**20:.1f} MiB from {weights_cache.cache_root()}")
        return 0
    st = weights_cache.info()
    state = "on" if st["enabled"] else "off: INFERLAB_WEIGHTS_CACHE=0"
    out(f"weights cache: {st['root']} ({state}), {len(st['entries'])} entries, "
        f"{st['bytes'] / 2**20:.1f} MiB")
    for e in st["entries"]:
        out(f"  {e['name']}  {e['bytes'] / 2**20:.1f} MiB  from {e['source']}  "
            f"(transformers {e['transformers']}, {e['created']})")
    return 0
