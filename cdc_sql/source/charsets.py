"""Text of character columns in the binlog: bytes in the column's charset, turned into the text a
SELECT returns (the server converts to the connection's utf8mb4 there), whatever the charset.

How each charset is decoded, so that both paths agree:
- utf8mb4, utf8mb3, ascii: the bytes are already UTF-8;
- ucs2, utf16, utf16le, utf32: their Unicode encodings (Python's UTF-16/32 codecs);
- every other single-byte charset (latin1, macce, koi8r, armscii8, ...): a 256-entry table the
  server itself produces (`CONVERT(0x00..0xFF USING cs)`), so bytes it cannot map turn into
  the same '?' a SELECT shows;
- the other multi-byte charsets (sjis, cp932, big5, gbk, gb2312, euckr, ujis, eucjpms, ...):
  converted by the server, a batch of distinct values per query.
Bytes that are not valid UTF-8 in a utf8 column become U+FFFD (they cannot be stored in a Delta
string), in both paths.
"""
from __future__ import annotations

from dataclasses import dataclass, field

UTF8 = frozenset({"utf8mb4", "utf8mb3", "utf8", "ascii"})
UNICODE_CODECS = {"ucs2": "utf-16-be", "utf16": "utf-16-be", "utf16le": "utf-16-le",
                  "utf32": "utf-32-be"}
BINARY = "binary"
_SERVER_BATCH = 200


@dataclass(frozen=True)
class TextDecoding:
    """How one column's bytes become text: kind 'utf8', 'codec' (Python codec name), 'table'
    (256 strings, one per byte) or 'server' (converted by the source, charset name)."""

    kind: str
    charset: str
    codec: str = ""
    table: tuple[str, ...] = ()

    def python(self, converter=None):
        """A bytes -> str function for the reference decoder."""
        if self.kind == "utf8":
            return lambda b: b.decode("utf-8", "replace")
        if self.kind == "codec":
            codec = self.codec
            return lambda b: b.decode(codec, "replace")
        if self.kind == "table":
            table = self.table
            return lambda b: "".join(table[x] for x in b)
        if converter is None:
            raise ValueError(f"charset {self.charset} needs the source to convert it")
        return lambda b: converter.convert(self.charset, [b])[0]


@dataclass
class Charsets:
    """The source's collations and charsets, and one TextDecoding per charset (read once)."""

    collations: dict[int, str]          # collation id -> charset name
    max_length: dict[str, int]          # charset name -> bytes per character at most
    source: object = None               # a `SourceConnection`-like object with .query()
    _tables: dict[str, TextDecoding] = field(default_factory=dict)

    @classmethod
    def read(cls, cur, source=None) -> "Charsets":
        cur.execute("SELECT ID, CHARACTER_SET_NAME FROM information_schema.COLLATIONS "
                    "WHERE ID IS NOT NULL")
        collations = {int(i): str(name).lower() for i, name in cur.fetchall()}
        cur.execute("SELECT CHARACTER_SET_NAME, MAXLEN FROM information_schema.CHARACTER_SETS")
        max_length = {str(name).lower(): int(n) for name, n in cur.fetchall()}
        return cls(collations, max_length, source)

    def charset(self, collation: int | None) -> str:
        if collation is None:
            return "utf8mb4"
        return self.collations.get(collation, "utf8mb4")

    def decoding(self, charset: str, cur=None) -> TextDecoding | None:
        """None for binary columns."""
        charset = charset.lower()
        if charset == BINARY:
            return None
        if charset in UTF8:
            return TextDecoding("utf8", charset)
        if charset in UNICODE_CODECS:
            return TextDecoding("codec", charset, codec=UNICODE_CODECS[charset])
        if self.max_length.get(charset, 2) == 1:
            if charset not in self._tables:
                self._tables[charset] = TextDecoding("table", charset,
                                                     table=single_byte_table(cur, charset))
            return self._tables[charset]
        return TextDecoding("server", charset)


def single_byte_table(cur, charset: str) -> tuple[str, ...]:
    """The 256 characters the server shows for bytes 0x00..0xFF of a single-byte charset."""
    if cur is None:
        raise ValueError(f"charset {charset} needs the source to read its table")
    cur.execute(f"SELECT CONVERT(CONVERT(UNHEX(%s) USING {_charset_name(charset)}) USING utf8mb4)",
                (bytes(range(256)).hex(),))
    text = cur.fetchone()[0]
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    if len(text) != 256:
        raise ValueError(f"charset {charset}: the server mapped 256 bytes to {len(text)} "
                         f"characters")
    return tuple(text)


def _charset_name(charset: str) -> str:
    if not charset.replace("_", "").isalnum():
        raise ValueError(f"not a charset name: {charset!r}")
    return charset


class ServerConverter:
    """Converts text of charsets Python cannot decode exactly, on the source itself."""

    def __init__(self, cursor_factory):
        self._cursor = cursor_factory
        self._cache: dict[tuple[str, bytes], str] = {}

    def convert(self, charset: str, values: list[bytes]) -> list[str]:
        missing = sorted({v for v in values if (charset, v) not in self._cache})
        name = _charset_name(charset)
        for start in range(0, len(missing), _SERVER_BATCH):
            chunk = missing[start:start + _SERVER_BATCH]
            with self._cursor() as cur:
                cur.execute("SELECT " + ", ".join(
                    f"CONVERT(CONVERT(UNHEX(%s) USING {name}) USING utf8mb4)" for _ in chunk),
                    [raw.hex() for raw in chunk])
                row = cur.fetchone()
            for raw, text in zip(chunk, row):
                self._cache[(charset, raw)] = text.decode("utf-8") if isinstance(text, bytes) \
                    else text
        if len(self._cache) > 100_000:  # a long run sees many values: keep it bounded
            found = [self._cache[(charset, v)] for v in values]
            self._cache.clear()
            return found
        return [self._cache[(charset, v)] for v in values]
