"""Writing the files a user asks for: only at the path given, and a clear error when it fails.

Every file inferlab writes for a user (a saved trace, a recording, a Chrome trace, a figure)
goes through here or through ``TraceWriter``: nothing is written beside it (no temp files, no
backups). A failure (an unwritable or missing directory, a full disk) raises
``OutputWriteError``, an ``OSError`` whose message names the path, the reason in words and
what was kept; ``errno`` and ``filename`` are those of the error behind it.
"""
from __future__ import annotations

import errno as E
import os

from ..errors import OutputWriteError

HINTS = {
    E.EACCES: "the directory is not writable here: choose another path",
    E.EPERM: "the directory is not writable here: choose another path",
    E.EROFS: "the file system is read-only: choose another path",
    E.ENOSPC: "the disk is full: free some space or choose another disk",
    E.EDQUOT: "the disk quota is used up: free some space or choose another disk",
    E.EFBIG: "the file grew past the size this process may write (ulimit -f)",
    E.ENOENT: "its directory does not exist: create it first",
    E.ENOTDIR: "a part of the path is a file, not a directory",
    E.EISDIR: "the path is a directory: give a file name",
}


def write_error(path, exc: OSError, doing: str, kept: str) -> OutputWriteError:
    """The error for a failed write of ``path``: ``inferlab: could not <doing> '<path>': <why>
    (<hint>); <kept>``."""
    path = os.fspath(path)
    why = exc.strerror or str(exc) or type(exc).__name__
    hint = HINTS.get(exc.errno)
    msg = f"inferlab: could not {doing} {path!r}: {why}" + (f" ({hint})" if hint else "")
    return OutputWriteError(f"{msg}; {kept}" if kept else msg, exc.errno, path)


def write_file(path, data: bytes, what: str) -> str:
    """Write ``data`` to ``path`` (created or replaced). On failure the incomplete file is
    removed (a half-written JSON or image is worse than none) and OutputWriteError says so."""
    path = os.fspath(path)
    created = False
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0),
                     0o666)
        created = True
        try:
            with memoryview(data) as view:
                done = 0
                while done < len(view):
                    done += os.write(fd, view[done:])
        finally:
            os.close(fd)
    except OSError as e:
        if created:
            try:
                os.unlink(path)
            except OSError:
                pass
        raise write_error(path, e, f"write {what} to",
                          "nothing was kept there (the incomplete file was removed); "
                          "what you were saving is unchanged in memory") from e
    return path
