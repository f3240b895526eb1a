"""The compiled row decoder (cdc_sql/_rowdecode.c) behind the interface of rows.PyBuilder.

The C builder writes Arrow buffers; this wrapper describes the columns to it and turns its
buffers into Arrow arrays. Text that only Python (or the source) can decode exactly is handed
back as bytes and finished here with the reference decoder's own functions: ucs2/utf16/utf32
and server-converted charsets, MySQL's binary JSON, INET4/INET6/UUID, and utf8 columns in which
the C side met bytes that are not UTF-8 (rare: they become U+FFFD, as in the reference).

`CDC_SQL_DECODER=python` turns the compiled decoder off (the reference then decodes).
"""
from __future__ import annotations

import os
import re

import numpy as np
import pyarrow as pa

from cdc_sql.source import rows

try:
    from cdc_sql import _rowdecode
except ImportError:  # not built: the reference decoder serves
    _rowdecode = None

_OUT = {"BYTE": 1, "SHORT": 2, "INT": 3, "LONG": 4, "FLOAT": 6, "DOUBLE": 7, "DATE": 8,
        "TIMESTAMP": 9, "TIMESTAMP_NTZ": 9, "STRING": 10, "BINARY": 10}
F_STRIP, F_UTF8, F_KEY_TEXT, F_GEOMETRY, F_DECIMAL_TEXT, F_UNSIGNED = 1, 2, 4, 8, 16, 32
_PYTHON_FORMS = ("json_binary", "inet4", "inet6", "uuid")


def available() -> bool:
    return _rowdecode is not None and os.environ.get("CDC_SQL_DECODER", "") != "python"


def builder(decoder: rows.TableDecoder, compiled: bool | None = None, converter=None):
    """A row builder for the table: the compiled one when it was built (or asked for), else
    the reference decoder (rows.PyBuilder). `converter` (charsets.ServerConverter) converts
    text the source must convert."""
    if compiled is not False:
        if available():
            return Builder(decoder, converter)
        if compiled:
            raise RuntimeError("the compiled row decoder is not built")
    return rows.PyBuilder(decoder, converter)


def _finished_in_python(c: rows.ColumnSpec) -> bool:
    return c.form in _PYTHON_FORMS or (c.text is not None and c.text.kind in ("codec", "server"))


def _describe(c: rows.ColumnSpec) -> tuple:
    out = 5 if c.spark_type.startswith("DECIMAL") else _OUT[c.spark_type]
    python = _finished_in_python(c)
    flags = 0
    if c.strip and not python:
        flags |= F_STRIP
    if c.text is not None and c.text.kind == "utf8" and not python:
        flags |= F_UTF8
    if c.key_text:
        flags |= F_KEY_TEXT
    if c.form == "geometry":
        flags |= F_GEOMETRY
    if c.form == "decimal_text":
        flags |= F_DECIMAL_TEXT
    if c.unsigned:
        flags |= F_UNSIGNED
    scale = c.arrow.scale if pa.types.is_decimal(c.arrow) else 0
    members = [m.encode("utf-8") for m in c.members] if c.members else None
    table = [ch.encode("utf-8") for ch in c.text.table] \
        if c.text is not None and c.text.kind == "table" and not python else None
    pad = c.pad if not python else 0
    return (c.type, c.meta, out, flags, pad, scale, members, table)


class Builder:
    """rows.PyBuilder's twin: add() decodes in C, finish() gives the same Arrow batch."""

    def __init__(self, decoder: rows.TableDecoder, converter=None):
        self.decoder, self.converter = decoder, converter
        self._c = _rowdecode.Builder([_describe(c) for c in decoder.columns], decoder.key)
        self._python = {i: rows._bytes_finisher(c, converter)
                        for i, c in enumerate(decoder.columns) if _finished_in_python(c)}

    @property
    def rows(self) -> int:
        return self._c.rows

    @property
    def nbytes(self) -> int:
        return self._c.nbytes

    def add(self, body, start: int, op: str, file_seq: int, pos: int, timestamp: int,
            txn: int) -> int:
        try:
            return self._c.add(body, start, op, file_seq, pos, timestamp, txn)
        except ValueError as exc:
            raise self._error(exc) from None

    def count(self, body, start: int, op: str) -> int:
        """The row changes add() would add (a key-changing update is two), adding none."""
        try:
            return self._c.count(body, start, op)
        except ValueError as exc:
            raise self._error(exc) from None

    def _error(self, exc: ValueError) -> rows.DecodeError:
        """The C side numbers columns: name them."""
        return rows.DecodeError(re.sub(
            r"column (\d+) \(binlog type -?\d+, metadata -?\d+\)",
            lambda m: self.decoder.columns[int(m.group(1))].describe(), str(exc)))

    def finish(self, gtids: list[str]) -> pa.RecordBatch:
        n, columns, keys, offsets, ops, stamps, txns = self._c.finish()
        arrays = [self._array(i, c, n, *columns[i]) for i, c in enumerate(self.decoder.columns)]
        arrays += [_var(pa.string(), n, *keys[i]) for i, c in enumerate(self.decoder.columns)
                   if c.key_text]
        arrays += [
            _fixed_text(n, 26, offsets),
            _fixed_text(n, 1, ops),
            pa.Array.from_buffers(pa.timestamp("us", tz="UTC"), n, [None, pa.py_buffer(stamps)]),
            pa.DictionaryArray.from_arrays(
                pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(txns)]),
                pa.array(gtids or [""], pa.string())).cast(pa.string()),
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=self.decoder.schema)

    def _array(self, i: int, c: rows.ColumnSpec, n: int, values: bytes, offsets, validity: bytes,
               nulls: int, invalid_utf8: int) -> pa.Array:
        if offsets is None:
            return pa.Array.from_buffers(c.arrow, n, [_validity(validity, nulls),
                                                      pa.py_buffer(values)], null_count=nulls)
        raw = _var(pa.binary(), n, values, offsets, validity, nulls)
        if i in self._python:
            return self._finish_in_python(c, raw)
        if invalid_utf8:
            strip = c.strip
            return pa.array([None if v is None else
                             (v.decode("utf-8", "replace").rstrip(" ") if strip else
                              v.decode("utf-8", "replace")) for v in raw.to_pylist()],
                            pa.string())
        if c.arrow == pa.binary():
            return raw
        return _var(c.arrow, n, values, offsets, validity, nulls)  # UTF-8, checked in C

    def _finish_in_python(self, c: rows.ColumnSpec, raw: pa.Array) -> pa.Array:
        values = raw.to_pylist()
        if c.text is not None and c.text.kind == "server" and not c.form:
            present = [v for v in values if v is not None]
            converted = iter(self.converter.convert(c.text.charset, present))
            texts = [None if v is None else next(converted) for v in values]
            if c.strip:
                texts = [None if t is None else t.rstrip(" ") for t in texts]
            return pa.array(texts, c.arrow)
        finish = self._python[self.decoder.columns.index(c)]
        return pa.array([None if v is None else finish(v) for v in values], c.arrow)


def _fixed_text(n: int, width: int, data: bytes) -> pa.Array:
    """n ASCII strings of `width` characters each, laid end to end in `data`."""
    offsets = np.arange(0, width * (n + 1), width, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets.tobytes()),
                                                  pa.py_buffer(data)])


def _validity(validity: bytes, nulls: int):
    return pa.py_buffer(validity) if nulls else None


def _var(type_: pa.DataType, n: int, values: bytes, offsets: bytes, validity: bytes,
         nulls: int) -> pa.Array:
    return pa.Array.from_buffers(type_, n, [_validity(validity, nulls), pa.py_buffer(offsets),
                                            pa.py_buffer(values)], null_count=nulls)
