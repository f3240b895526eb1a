"""User-facing errors: each says what is wrong, where, and what to do. The CLI maps them to exit 1.

Values that came from the job's environment (`${VAR}` in a pipeline file) are never repeated in
a message: `hide` registers them, and every error message, log line and recorded error goes
through `redacted`, which shows the `${VAR}` they came from instead (docs/security.md).
"""
from __future__ import annotations

import errno

_HIDDEN: dict[str, str] = {}  # value -> what is shown instead
# Shorter values would hide every occurrence of a common word or name (`root`, `db`); secrets
# (keys, tokens, passwords) are longer. A password is hidden from 4 characters on.
MIN_HIDDEN = 8


def hide(value: str, shown: str, minimum: int = MIN_HIDDEN) -> None:
    """Never show `value` in a message, but `shown` (the ${VAR} it came from, or ***)."""
    if len(value) >= minimum and value != shown:
        _HIDDEN[value] = shown


def redacted(text: str) -> str:
    """`text` with every hidden value replaced, the longest first (one may contain another)."""
    for value in sorted((v for v in _HIDDEN if v in text), key=len, reverse=True):
        text = text.replace(value, _HIDDEN[value])
    return text


class CdcError(Exception):
    """An error a user can act on; its message is shown as is (never with secrets).
    `transient`: the same work can succeed later without a person (follow mode retries)."""

    transient = False

    def __init__(self, message: str = ""):
        super().__init__(redacted(message))


class ConfigError(CdcError):
    """A pipeline file is wrong: names the file, the key path and the line."""

    def __init__(self, message: str, file: str | None = None, path: str | None = None,
                 line: int | None = None):
        self.file, self.path, self.line, self.detail = file, path, line, redacted(message)
        where = ":".join(str(part) for part in (file, line) if part is not None)
        key = f" at `{path}`" if path else ""
        super().__init__(f"{where}{key}: {message}" if where or key else message)


class SourceError(CdcError):
    """The source database cannot serve the pipeline (unreachable, missing table, binlog off...).
    `transient`: the connection was lost or refused (a restart, a KILL, a network blip), so
    the same work can succeed later; everything else needs a person."""

    def __init__(self, message: str, transient: bool = False):
        super().__init__(message)
        self.transient = transient


# Client and server errors that mean "the connection went away", not "the request is wrong":
# can't connect, lost connection, server gone, connection killed, shutdown in progress,
# query interrupted.
TRANSIENT_CODES = frozenset({2003, 2006, 2013, 2055, 1927, 1053, 1317, 1152, 1158, 1159,
                             1160, 1161})
_TRANSIENT_TEXT = ("lost connection", "lost the binlog connection", "server has gone away",
                   "connection refused", "connection was killed", "connection reset",
                   "broken pipe", "shutdown in progress", "can't connect", "unexpected eof",
                   "bytes remaining on stream")  # the last: connectorx, its read broken off


def is_transient(code: int | None, text: str) -> bool:
    return code in TRANSIENT_CODES or any(t in text.lower() for t in _TRANSIENT_TEXT)


class StateError(CdcError):
    """The lakehouse state disagrees with the pipeline or the source."""


class TargetError(CdcError):
    """The lakehouse storage cannot take a write (it is full): what was committed stands, and
    the run can be repeated once it can (follow mode waits and retries)."""

    transient = True


_OUT_OF_SPACE = ("no space left on device", "os error 28", "disk quota exceeded",
                 "os error 122")


def out_of_space(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it) says the storage is full: an OSError from Python or
    pyarrow, or a delta-rs or Spark error carrying the system's message."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if any(text in str(exc).lower() for text in _OUT_OF_SPACE):
            return True
        exc = exc.__cause__ or exc.__context__
    return False
