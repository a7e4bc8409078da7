"""Writing a model as a transformers directory with safetensors: the one writer, used by the
weights cache (weights_cache.py) and by ``inferlab export-hf`` (loader.export_hf).

Directories are written whole or not at all: into a temp dir beside the target, every file
fsynced, a manifest of each file's size and sha256 last, then renamed into place; ``verify``
re-checks a directory against its manifest.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time

MANIFEST = "inferlab-manifest.json"
FORMAT = 1


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def write_hf_dir(model, tokenizer, out_dir: str) -> list[str]:
    """Write ``model`` (and ``tokenizer``) as a transformers directory with safetensors.

    A GGUF-loaded model refuses ``save_pretrained`` ("quantized with GGUF, not serializable")
    though every weight is plain fp32/bf16 after loading: its quantizer marker and
    quantization_config are set aside while saving and put back after."""
    from transformers.utils import logging as hf_logging
    quantizer = getattr(model, "hf_quantizer", None)
    qconfig = getattr(model.config, "quantization_config", None)
    bars_were_on = hf_logging.is_progress_bar_enabled()
    try:
        model.hf_quantizer = None
        if qconfig is not None:
            del model.config.quantization_config
        hf_logging.disable_progress_bar()   # no tqdm widget left in a notebook's output
        model.save_pretrained(out_dir)
        if tokenizer is not None:
            tokenizer.save_pretrained(out_dir)
    finally:
        model.hf_quantizer = quantizer
        if qconfig is not None:
            model.config.quantization_config = qconfig
        if bars_were_on:
            hf_logging.enable_progress_bar()
    return sorted(os.listdir(out_dir))


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file_atomically(path: str, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        os.chmod(tmp, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_dir_atomically(model, tokenizer, final_dir: str, meta: dict | None = None) -> bool:
    """Write a transformers directory plus a manifest into a temp dir beside ``final_dir``,
    fsync it, rename it into place. False when ``final_dir`` already exists (someone else won
    the race, or an export target is taken): this copy is discarded."""
    parent = os.path.dirname(os.path.abspath(final_dir))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=parent, prefix=f".tmp-{os.path.basename(final_dir)}-")
    try:
        write_hf_dir(model, tokenizer, tmp)
        files = {}
        for name in sorted(os.listdir(tmp)):
            p = os.path.join(tmp, name)
            with open(p, "rb+") as f:
                os.fsync(f.fileno())
            os.chmod(p, 0o644)
            files[name] = {"size": os.path.getsize(p), "sha256": sha256_file(p)}
        manifest = {"format": FORMAT, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    **(meta or {}), "files": files}
        write_file_atomically(os.path.join(tmp, MANIFEST),
                              json.dumps(manifest, indent=1).encode())
        _fsync_dir(tmp)
        os.chmod(tmp, 0o755)
        try:
            os.rename(tmp, final_dir)    # onto an existing non-empty dir: fails, the loser
        except OSError:                  # discards its copy below
            if os.path.isdir(final_dir) and os.listdir(final_dir):
                return False
            raise
        _fsync_dir(parent)
        return True
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp, ignore_errors=True)


def verify(entry: str, expect: dict | None = None, skip_hash: str | None = None) -> str | None:
    """None when ``entry`` is whole (every file's size and sha256 as in its manifest, and the
    manifest's fields equal to ``expect``); else what is wrong. Files whose names end with
    ``skip_hash`` are checked by size only (reading a tokenizer needs no weights hashed)."""
    try:
        with open(os.path.join(entry, MANIFEST)) as f:
            manifest = json.load(f)
        if manifest.get("format") != FORMAT:
            return f"manifest format {manifest.get('format')!r}, expected {FORMAT}"
        for k, v in (expect or {}).items():
            if manifest.get(k) != v:
                return f"manifest {k} is {manifest.get(k)!r}, expected {v!r}"
        files = manifest["files"]
        if not any(n.endswith(".safetensors") for n in files) or "config.json" not in files:
            return "manifest lists no config.json or no *.safetensors"
        for name, want in files.items():
            p = os.path.join(entry, name)
            if not os.path.isfile(p):
                return f"{name} is missing"
            if os.path.getsize(p) != want["size"]:
                return f"{name} is {os.path.getsize(p)} bytes, expected {want['size']}"
            if not (skip_hash and name.endswith(skip_hash)) and sha256_file(p) != want["sha256"]:
                return f"{name} does not match its sha256"
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        return f"unreadable manifest: {type(e).__name__}: {e}"
    return None
