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
    """The source database cannot serve the pipeline (unreachable, missing table, binlog off...)."""


class StateError(CdcError):
    """The lakehouse state disagrees with the pipeline or the source."""
