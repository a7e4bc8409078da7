"""A cache of converted weights: a GGUF dequantized once, then read back as safetensors.

transformers spends ~20 s (more on a busy machine) dequantizing SmolLM2's GGUF to fp32 in
every new process. After the first load the result is saved as a transformers directory
(config, model.safetensors, tokenizer, generation config) that later processes load instead.
``hf_dir.write_hf_dir`` is the one writer of such directories; ``inferlab export-hf`` uses
it too.

Under INFERLAB_CACHE_DIR, else $XDG_CACHE_HOME/inferlab, else ~/.cache/inferlab: entries
``weights/<gguf stem>-<sha256[:16]>-<dtype>-tf<major>/`` (+ inferlab-manifest.json), their
``.lock`` files, ``.tmp-*`` dirs being written, and ``file-hashes.json`` (source hashes by
path, size and mtime, so the 93 MB GGUF is not re-hashed every start: 0.15 s).

- Key: the GGUF's content hash (not its path), the dtype and transformers' major version.
- Atomic: written into a temp dir beside the entry, every file fsynced, the manifest last,
  then renamed into place. A rename onto an existing entry fails: the loser discards its copy.
- Verified on every read: the manifest holds each file's size and sha256, all re-hashed
  (~0.7 s of CPU for the 538 MB file, on a second thread while the load runs). A corrupt or
  unloadable entry is never used: it is removed and rebuilt from the GGUF with a warning.
- Concurrency: a process that finds no entry takes the entry's lock before converting; a
  second one waits, then reads what the first wrote instead of converting again.
- INFERLAB_WEIGHTS_CACHE=0 turns it off. ``clear()`` / ``info()`` (``inferlab cache ...``).
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import shutil
import tempfile
import time
import warnings

from .hf_dir import MANIFEST, verify, write_dir_atomically, write_file_atomically
from .hf_dir import sha256_file as _sha256

try:
    import fcntl
except ImportError:          # not POSIX: rename-wins alone keeps entries whole
    fcntl = None

LOCK_WAIT_S = 600.0          # longer than any conversion; then go on without the lock


class CacheWarning(UserWarning):
    """Something about the weights cache went wrong; loading goes on without it."""


def cache_root() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.abspath(os.environ.get("INFERLAB_CACHE_DIR") or os.path.join(base, "inferlab"))


def weights_dir() -> str:
    return os.path.join(cache_root(), "weights")


def enabled() -> bool:
    return os.environ.get("INFERLAB_WEIGHTS_CACHE", "1").strip().lower() not in (
        "0", "false", "no", "off")


def file_sha256(path: str) -> str:
    """sha256 of a file; remembered by (path, size, mtime) so a 93 MB GGUF is hashed once."""
    path = os.path.abspath(path)
    st = os.stat(path)
    stamp = [st.st_size, st.st_mtime_ns]
    book_path = os.path.join(cache_root(), "file-hashes.json")
    book = {}
    with contextlib.suppress(OSError, ValueError):
        with open(book_path) as f:
            book = json.load(f)
    book = book if isinstance(book, dict) else {}
    hit = book.get(path)
    if isinstance(hit, dict) and hit.get("stamp") == stamp and isinstance(hit.get("sha256"), str):
        return hit["sha256"]
    digest = _sha256(path)
    with contextlib.suppress(OSError):   # a read-only cache still works, it just re-hashes
        os.makedirs(cache_root(), exist_ok=True)
        book = {p: v for p, v in book.items() if os.path.exists(p)}   # forget files gone
        book[path] = {"stamp": stamp, "sha256": digest}
        write_file_atomically(book_path, json.dumps(book, indent=1).encode())
    return digest


def entry_name(source: str, dtype: str, sha256: str | None = None) -> str:
    """The entry for this source file: its content hash, the dtype, transformers' major."""
    import transformers
    stem = os.path.basename(source).rsplit(".", 1)[0].lower()
    major = transformers.__version__.split(".")[0]
    return f"{stem}-{(sha256 or file_sha256(source))[:16]}-{dtype}-tf{major}"


def existing_entry(source: str, dtype: str) -> str | None:
    """The entry directory for ``source`` and ``dtype`` if there is one (not verified)."""
    if not enabled():
        return None
    with contextlib.suppress(OSError):
        entry = os.path.join(weights_dir(), entry_name(source, dtype))
        return entry if os.path.isdir(entry) else None
    return None


# ---- reading -------------------------------------------------------------------------------

def _read_verified(entry: str, expect: dict, read):
    """(what ``read(entry)`` returned, None) for a whole entry, else (None, the problem).

    The hashes are checked on a second thread while ``read`` runs (hashlib releases the GIL;
    loading is mostly imports), and the result is dropped unless they match: a corrupt entry
    is never used, and verifying costs little wall time on two cores."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        checked = pool.submit(verify, entry, expect)
        try:
            loaded, failure = read(entry), None
        except Exception as e:  # noqa: BLE001 - reported as the entry's problem
            loaded, failure = None, f"it does not load: {type(e).__name__}: {e}"
        problem = checked.result()
    if problem or failure:
        return None, problem or failure
    return loaded, None


def tokenizer_entry(source: str) -> str | None:
    """An entry converted from ``source`` (any dtype) whose tokenizer and config files match
    their manifest, or None. Reading a tokenizer from it takes ~0.3 s and little memory;
    parsing the GGUF's vocabulary takes ~4 s and a ~0.25 GB peak. Only looks: with no
    entries at all it neither hashes the source nor writes anything."""
    if not enabled() or not os.path.isdir(weights_dir()):
        return None
    with contextlib.suppress(OSError):
        sha = file_sha256(source)
        head, _, tail = entry_name(source, "*", sha).partition("*")
        for name in sorted(os.listdir(weights_dir())):
            entry = os.path.join(weights_dir(), name)
            if name.startswith(head) and name.endswith(tail) and verify(
                    entry, {"source_sha256": sha}, skip_hash=".safetensors") is None:
                return entry
    return None


def _remove(path: str) -> None:
    """Rename away first, so a half-deleted directory never looks like an entry."""
    if not os.path.exists(path):
        return
    trash = tempfile.mkdtemp(dir=os.path.dirname(path), prefix=".trash-")
    try:
        os.rename(path, os.path.join(trash, "x"))
    except FileNotFoundError:          # someone else removed it first
        pass
    shutil.rmtree(trash, ignore_errors=True)


@contextlib.contextmanager
def _locked(path: str, wait_s: float = LOCK_WAIT_S):
    """An exclusive flock on ``path`` (released when the file closes, also if we crash).
    After ``wait_s``, or where no lock file can be made, go on without it: rename-wins still
    keeps every entry whole."""
    try:
        f = open(path, "a+")
    except OSError:
        yield
        return
    with f:
        deadline = time.monotonic() + wait_s
        while fcntl is not None:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() > deadline:
                    warnings.warn(f"waited {wait_s:.0f} s for {path}; going on without it",
                                  CacheWarning, stacklevel=4)
                    break
                time.sleep(0.2)
        yield


def load_cached(source: str, dtype: str, build, read):
    """Load through the cache: ``read(entry_dir)`` when a whole entry exists for ``source``;
    else ``build()`` (the slow conversion), saved as a new entry. Both return (model,
    tokenizer). Returns (model, tokenizer, entry dir or None when built / not cached)."""
    if not enabled():
        return (*build(), None)
    try:
        sha = file_sha256(source)
        entry = os.path.join(weights_dir(), entry_name(source, dtype, sha))
        os.makedirs(weights_dir(), exist_ok=True)
    except OSError as e:
        warnings.warn(f"weights cache unavailable ({e}); loading {source} without it",
                      CacheWarning, stacklevel=3)
        return (*build(), None)
    expect = {"source_sha256": sha, "dtype": dtype}
    if os.path.isdir(entry):
        loaded, _ = _read_verified(entry, expect, read)
        if loaded is not None:
            return (*loaded, entry)
    with _locked(entry + ".lock"):
        if os.path.isdir(entry):        # written by another process while we waited, or bad
            loaded, problem = _read_verified(entry, expect, read)
            if loaded is not None:
                return (*loaded, entry)
            warnings.warn(f"weights cache entry {entry} is corrupt ({problem}); removing it "
                          "and rebuilding it from the source", CacheWarning, stacklevel=3)
            with contextlib.suppress(OSError):
                _remove(entry)
        model, tokenizer = build()
        import transformers
        meta = {"source": os.path.abspath(source), **expect,
                "transformers": transformers.__version__}
        try:
            write_dir_atomically(model, tokenizer, entry, meta)
        except Exception as e:  # noqa: BLE001 - a full disk must not stop the lab
            warnings.warn(f"could not save the converted weights to {entry} ({e}); the next "
                          "process will convert again", CacheWarning, stacklevel=3)
        return model, tokenizer, None


# ---- managing ------------------------------------------------------------------------------

def _size(path: str) -> int:
    return os.path.getsize(path) if os.path.isfile(path) else sum(
        os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def info() -> dict:
    """What the cache holds: root, enabled, and each entry's name, size and source."""
    wd = weights_dir()
    entries = []
    for name in sorted(os.listdir(wd)) if os.path.isdir(wd) else []:
        p = os.path.join(wd, name)
        if name.startswith(".") or not os.path.isdir(p):
            continue
        try:
            with open(os.path.join(p, MANIFEST)) as f:
                m = json.load(f)
        except (OSError, ValueError):
            m = {}
        entries.append({"name": name, "path": p, "bytes": _size(p),
                        **{k: m.get(k) for k in ("source", "created", "transformers")}})
    return {"root": cache_root(), "enabled": enabled(), "entries": entries,
            "bytes": sum(e["bytes"] for e in entries)}


def clear() -> int:
    """Remove every entry, half-written leftovers and the file-hash book; bytes freed."""
    freed = 0
    for path in (weights_dir(), os.path.join(cache_root(), "file-hashes.json")):
        if os.path.exists(path):
            freed += _size(path)
            _remove(path)
    return freed
