"""The engine's own weight files inside a weights-cache entry (model/weights_cache.py): what
lets a later ``Engine()`` skip transformers entirely.

    <entry>/inferlab-engine/weights.safetensors   ModelWeights (fused q|k|v and gate|up, ...)
    <entry>/inferlab-engine/panels.safetensors    the numba GEMM's packed panels (once it ran)
    <entry>/inferlab-engine/manifest.json         size, full sha256 and sampled hash of each

A folder of their own: the entry is also a transformers directory that vLLM loads (it reads
every top-level *.safetensors as the model's weights).

Written once, atomically (temp file, fsync, rename; the manifest last), by the first process
that loads the entry. Read back memory-mapped. Verified on every read by size, by the
safetensors header, and by a sampled hash (SAMPLE bytes every STRIDE, ~1.6% of the file, read
in ~10 ms), before anything uses it: truncation and most corruption are caught at once. Every
byte is then re-hashed on a background thread (~0.4 s of one core, after the start instead of
in it): a flipped bit the samples missed is reported with a warning that this process's
outputs may be wrong, and the files are removed so the next start rebuilds them. Anything
wrong at load: the engine files are removed with a warning and the engine loads through
transformers as before (and writes them again). ``inferlab cache verify`` re-hashes all. INFERLAB_WEIGHTS_CACHE=0 turns them off with the rest of the cache;
INFERLAB_ENGINE_FILES=0 alone (the old path, for ``inferlab bench coldstart``'s A/B).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import threading
import warnings

from .hf_dir import sha256_file, write_file_atomically
from .weights_cache import CacheWarning

DIR = "inferlab-engine"
WEIGHTS, PANELS, MANIFEST = (os.path.join(DIR, n) for n in
                             ("weights.safetensors", "panels.safetensors", "manifest.json"))
SAMPLE, STRIDE = 1 << 16, 1 << 22


def enabled() -> bool:
    return os.environ.get("INFERLAB_ENGINE_FILES", "1").strip().lower() not in (
        "0", "false", "no", "off")


def sampled_hash(path: str) -> str:
    h = hashlib.sha256()
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        for off in range(0, size, STRIDE):
            f.seek(off)
            h.update(f.read(SAMPLE))
        f.seek(max(0, size - SAMPLE))
        h.update(f.read(SAMPLE))
    return h.hexdigest()


def _manifest(entry: str) -> dict:
    with contextlib.suppress(OSError, ValueError):
        with open(os.path.join(entry, MANIFEST)) as f:
            m = json.load(f)
            return m if isinstance(m, dict) else {}
    return {}


def _check(entry: str, name: str, full: bool = False) -> str | None:
    """None if ``entry/name`` matches its manifest record, else what is wrong."""
    rec = _manifest(entry).get(name)
    path = os.path.join(entry, name)
    if not isinstance(rec, dict) or not os.path.isfile(path):
        return "missing"
    if os.path.getsize(path) != rec.get("size"):
        return f"size {os.path.getsize(path)} != {rec.get('size')}"
    if sampled_hash(path) != rec.get("sampled"):
        return "sampled hash differs"
    if full and sha256_file(path) != rec.get("sha256"):
        return "sha256 differs"
    return None


def _write(entry: str, name: str, save) -> None:
    """``save(tmp_path)`` into the entry, fsynced and renamed; then its manifest record."""
    os.makedirs(os.path.join(entry, DIR), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.join(entry, DIR), prefix=".tmp-")
    os.close(fd)
    try:
        save(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        rec = {"size": os.path.getsize(tmp), "sha256": sha256_file(tmp),
               "sampled": sampled_hash(tmp)}
        os.replace(tmp, os.path.join(entry, name))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    manifest = {**_manifest(entry), name: rec}
    write_file_atomically(os.path.join(entry, MANIFEST), json.dumps(manifest, indent=1).encode())


def _forget(entry: str, problem: str) -> None:
    warnings.warn(f"the engine weight files in {entry} are damaged ({problem}); removing them, "
                  "loading through transformers instead", CacheWarning, stacklevel=4)
    for name in (WEIGHTS, PANELS, MANIFEST):
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(entry, name))


VERIFY_THREAD = "inferlab-verify-weights"
_verifying: set[str] = set()      # entries this process has checked in full (or is checking)


def _verify_later(entry: str) -> None:
    """Re-hash the weight file in the background, once per entry and process (each Engine
    loads it again; hashing ~0.5 GB on every load would take a core from what it measures)."""
    if entry in _verifying:
        return
    _verifying.add(entry)

    def check():
        problem = _check(entry, WEIGHTS, full=True)
        if problem is not None and problem != "missing":
            _verifying.discard(entry)      # a file written there anew is checked again
            warnings.warn(f"the engine weight file in {entry} failed its full check after it "
                          f"was loaded ({problem}): this process's outputs may be wrong; the "
                          "file is removed, restart to load clean weights", CacheWarning)
            for name in (WEIGHTS, PANELS, MANIFEST):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(entry, name))
    threading.Thread(target=check, name=VERIFY_THREAD, daemon=True).start()


def load_weights(entry: str | None, verify_in_background: bool = True):
    """ModelWeights from the entry's engine file (memory-mapped), or None when there is none
    or it fails its checks (then it is removed). Every byte is re-hashed afterwards on a
    background thread (``verify_in_background``)."""
    from . import weights
    if entry is None or not enabled() or not os.path.isfile(os.path.join(entry, WEIGHTS)):
        return None
    problem = _check(entry, WEIGHTS)
    if problem is None:
        try:
            w = weights.load(os.path.join(entry, WEIGHTS))
        except Exception as e:  # noqa: BLE001 - reported as the file's problem
            problem = f"{type(e).__name__}: {e}"
        else:
            if verify_in_background:
                _verify_later(entry)
            return w
    _forget(entry, problem)
    return None


def save_weights(entry: str | None, w) -> None:
    """Write the engine file for ``w`` into the entry (once; a failure only warns)."""
    from . import weights
    if entry is None or os.path.isfile(os.path.join(entry, WEIGHTS)):
        return
    try:
        _write(entry, WEIGHTS, lambda p: weights.save(w, p))
    except Exception as e:  # noqa: BLE001 - a full or read-only disk must not stop the lab
        warnings.warn(f"could not save the engine weights to {entry} ({e}); the next start "
                      "loads through transformers again", CacheWarning, stacklevel=3)


def load_panels(entry: str | None) -> dict:
    from . import weights
    if entry is None or not enabled() or _check(entry, PANELS) is not None:
        return {}
    try:
        return weights.load_panels(os.path.join(entry, PANELS))
    except Exception as e:  # noqa: BLE001
        _forget(entry, f"panels: {type(e).__name__}: {e}")
        return {}


def save_panels(entry: str | None, panels: dict) -> None:
    from . import weights
    if entry is None or not panels or os.path.isfile(os.path.join(entry, PANELS)):
        return
    try:
        _write(entry, PANELS, lambda p: weights.save_panels(panels, p))
    except Exception as e:  # noqa: BLE001
        warnings.warn(f"could not save the GEMM panels to {entry} ({e})", CacheWarning,
                      stacklevel=3)


def verify_all(entry: str) -> str | None:
    """Every engine file of the entry against its full sha256 (``inferlab cache verify``)."""
    for name in (WEIGHTS, PANELS):
        if os.path.isfile(os.path.join(entry, name)):
            problem = _check(entry, name, full=True)
            if problem:
                return f"{name}: {problem}"
    return None
