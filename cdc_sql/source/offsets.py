"""Binlog offsets: totally ordered, and comparable as plain strings in Spark SQL.

An offset is (file sequence, event position, row index in the event), written as
`FFFFFF:PPPPPPPPPPPP:RRRRRR`, zero-padded so that string order is offset order. A watermark is a
position between transactions, written with row index 0; every row event of a later transaction
starts after it, so `offset > watermark` means "after the watermark".
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_TEXT = re.compile(r"(\d{6}):(\d{12}):(\d{6})")


@dataclass(frozen=True, order=True)
class Offset:
    file_seq: int
    pos: int
    row: int = 0

    def __post_init__(self):
        if not (0 <= self.file_seq < 10**6 and 0 <= self.pos < 10**12 and 0 <= self.row < 10**6):
            raise ValueError(f"offset out of range: {self.file_seq}, {self.pos}, {self.row}")

    @property
    def text(self) -> str:
        return f"{self.file_seq:06d}:{self.pos:012d}:{self.row:06d}"

    @classmethod
    def parse(cls, text: str) -> "Offset":
        match = _TEXT.fullmatch(text)
        if not match:
            raise ValueError(f"not an offset: {text!r}")
        return cls(*(int(part) for part in match.groups()))

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, order=True)
class Position:
    """A place in the binlog between events: where a reader resumes or a watermark stands.

    `base` is added to the file's number in offsets: zero on the server a pipeline first read;
    on a server capture moved to after a failover, what makes its offsets follow the old
    server's (source/failover.py). Written `file:pos@base` when not zero."""

    file: str
    pos: int
    base: int = 0

    @property
    def offset(self) -> Offset:
        return Offset(file_sequence(self.file) + self.base, self.pos, 0)

    def __str__(self) -> str:
        return f"{self.file}:{self.pos}" + (f"@{self.base}" if self.base else "")

    @classmethod
    def parse(cls, text: str) -> "Position":
        file, _, rest = text.rpartition(":")
        pos, _, base = rest.partition("@")
        return cls(file, int(pos), int(base or 0))


def file_sequence(file: str) -> int:
    """The number a binlog file name ends with: binlog.000042 -> 42."""
    match = re.search(r"\.(\d+)$", file)
    if not match:
        raise ValueError(f"not a binlog file name: {file!r}")
    return int(match.group(1))
