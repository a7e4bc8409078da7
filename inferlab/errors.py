"""One error base for everything inferlab raises on purpose.

Bad input raises a subclass of both :class:`InferlabError` and the builtin a caller
would expect (``ValueError`` or ``TypeError``), with a message naming the field and
the allowed values. The engine is never left half-changed by one of these.
"""
from __future__ import annotations


class InferlabError(Exception):
    """Base of every error inferlab raises deliberately."""


class InvalidInputError(InferlabError, ValueError):
    """A value is out of range or malformed (names the field and what is allowed)."""


class InvalidTypeError(InferlabError, TypeError):
    """A value has the wrong type (names the field and the expected type)."""


class ModelLoadError(InferlabError, ValueError):
    """The model could not be found or read; the message says what to do."""


class TraceFormatError(InferlabError, ValueError):
    """A trace file is malformed, foreign, or from a newer inferlab."""


class CapacityError(InvalidInputError):
    """A request can never fit the engine (context length or whole KV cache)."""


def check_type(name: str, value, types, what: str):
    """Raise InvalidTypeError unless ``value`` is an instance of ``types`` (bools are not ints)."""
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise InvalidTypeError(f"{name} must be {what}, got bool {value!r}")
    if not isinstance(value, types):
        raise InvalidTypeError(f"{name} must be {what}, got {type(value).__name__} {value!r}")
    return value


class OutputWriteError(InferlabError, OSError):
    """A file could not be written (unwritable path, full disk): the message names the path,
    why, and what was kept. ``errno`` and ``filename`` are set as on the OSError behind it."""

    def __init__(self, message: str, errno: int | None = None, filename: str | None = None):
        super().__init__(message)
        self.errno, self.filename = errno, filename

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""
