"""User-facing errors: each says what is wrong, where, and what to do. The CLI maps them to exit 1."""
from __future__ import annotations


class CdcError(Exception):
    """An error a user can act on; its message is shown as is (never with secrets)."""


class ConfigError(CdcError):
    """A pipeline file is wrong: names the file, the key path and the line."""

    def __init__(self, message: str, file: str | None = None, path: str | None = None,
                 line: int | None = None):
        self.file, self.path, self.line, self.detail = file, path, line, message
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
