"""A Parquet file made of other files' column chunks, copied as they are, never decoded.

Silver's first version holds the snapshot rows bronze holds, in the same columns, beside
cdc-sql's own: its files can be bronze's files' column chunks (pages of encoded, compressed
values) next to those of a small file of silver's columns (one value repeated per file),
under a footer that names silver's columns. Encoding the rows a second time cost a snapshot
a tenth of its CPU (docs/performance.md).

`splice(parts, schema, out)`: each part a file, how many of its leading columns to take and
which of its row groups makes each row group of `out` (by default each in turn: a file of
one value repeated needs a row group per size, not per group), the row groups so made of
equal rows; `schema` the Arrow schema of the columns taken, in that order. The footer is the
one pyarrow writes for `schema` (its Parquet schema, the Arrow schema it stores, column
orders) with the parts' row groups, each chunk's offsets moved to where its bytes now stand.
Page indexes and Bloom filters are not carried over (pyarrow writes neither by default); an
encrypted file, or parts whose columns are not the schema's as Parquet has them, are refused
(`Unspliceable`), and the caller writes the rows itself.

The footer is Thrift's compact protocol (parquet.thrift): read here into fields as they are
(`_read_struct`), a few changed, written back (`_write_struct`).
"""
from __future__ import annotations

import contextlib
import io
import os
import struct
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

MAGIC = b"PAR1"
# Thrift compact protocol's types
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)
# Field ids (parquet.thrift)
FILE_SCHEMA, FILE_ROWS, FILE_GROUPS = 2, 3, 4
GROUP_COLUMNS, GROUP_BYTES, GROUP_ROWS, GROUP_SORTING, GROUP_OFFSET, GROUP_COMPRESSED, \
    GROUP_ORDINAL = 1, 2, 3, 4, 5, 6, 7
CHUNK_FILE_PATH, CHUNK_FILE_OFFSET, CHUNK_META = 1, 2, 3
CHUNK_INDEXES = (4, 5, 6, 7)  # offset and column index offsets and lengths
CHUNK_ENCRYPTED = (8, 9)
META_TYPE, META_PATH, META_UNCOMPRESSED, META_COMPRESSED, META_DATA_PAGE, META_INDEX_PAGE, \
    META_DICTIONARY_PAGE = 1, 3, 6, 7, 9, 10, 11
META_BLOOM = (14, 15)
ELEMENT_TYPE, ELEMENT_NAME, ELEMENT_CHILDREN = 1, 4, 5


class Unspliceable(Exception):
    """The parts cannot be spliced as they are (the caller writes the rows itself)."""


@dataclass(frozen=True)
class Part:
    path: str
    columns: int  # its leading top-level columns taken
    groups: tuple[int, ...] | None = None  # its row group for each of out's; None: in turn


def splice(parts: list[Part], schema: pa.Schema, out: str) -> pq.FileMetaData:
    """Write `out` from the parts' column chunks (module docstring); its footer. Nothing is
    left at `out` when it cannot be."""
    try:
        return _splice(parts, schema, out)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(out)
        raise


def _splice(parts: list[Part], schema: pa.Schema, out: str) -> pq.FileMetaData:
    footers = [_footer(part.path) for part in parts]
    groups = []  # of each part, its row group for each of out's
    for part, footer in zip(parts, footers):
        found = _field(footer, FILE_GROUPS)[1]
        groups.append([found[i] for i in part.groups] if part.groups is not None else found)
    if len({len(g) for g in groups}) != 1 or \
            any(len({_field(g[i], GROUP_ROWS) for g in groups}) != 1 for i in range(len(groups[0]))):
        raise Unspliceable("the parts' row groups differ")
    template = _footer_of(_empty(schema))
    elements = _field(template, FILE_SCHEMA)[1]
    leaves = _leaves(elements)
    taken, columns = [], []
    for part, footer in zip(parts, footers):
        found = _field(footer, FILE_SCHEMA)[1]
        end, count = _columns_end(part, found)
        taken.append(count)
        columns += found[1:end]
    if columns != elements[1:]:  # (names, types, repetition: what the pages were encoded as)
        raise Unspliceable("the parts' columns are not the schema's")
    rows = 0
    with open(out, "wb") as written:
        written.write(MAGIC)
        sources = [open(part.path, "rb") for part in parts]
        try:
            new_groups = []
            for index in range(len(groups[0])):
                chunks = []
                for source, part_groups, count in zip(sources, groups, taken):
                    for chunk in _field(part_groups[index], GROUP_COLUMNS)[1][:count]:
                        chunks.append(_copy_chunk(chunk, source, written))
                for chunk, (name, kind) in zip(chunks, leaves):
                    meta = _field(chunk, CHUNK_META)
                    if _field(meta, META_TYPE) != kind or \
                            [p.decode() for p in _field(meta, META_PATH)[1]] != name:
                        raise Unspliceable(f"column {'.'.join(name)} is not where the schema "
                                           "puts it")
                group_rows = _field(groups[0][index], GROUP_ROWS)
                rows += group_rows
                new_groups.append(_struct(
                    (GROUP_COLUMNS, _LIST, (_STRUCT, chunks)),
                    (GROUP_BYTES, _I64, sum(_field(_field(c, CHUNK_META), META_UNCOMPRESSED)
                                            for c in chunks)),
                    (GROUP_ROWS, _I64, group_rows),
                    (GROUP_OFFSET, _I64, _chunk_start(_field(chunks[0], CHUNK_META))
                     if chunks else written.tell()),
                    (GROUP_COMPRESSED, _I64, sum(_field(_field(c, CHUNK_META), META_COMPRESSED)
                                                 for c in chunks)),
                    (GROUP_ORDINAL, _I16, index)))
        finally:
            for source in sources:
                source.close()
        _set(template, FILE_ROWS, _I64, rows)
        _set(template, FILE_GROUPS, _LIST, (_STRUCT, new_groups))
        footer = io.BytesIO()
        _write_struct(footer, template)
        written.write(footer.getvalue())
        written.write(struct.pack("<I", len(footer.getvalue())))
        written.write(MAGIC)
    return pq.read_metadata(out)


def _copy_chunk(chunk: list, source, out) -> list:
    """Copy a column chunk's bytes to the end of `out`; the chunk, its offsets moved there."""
    if any(_field(chunk, f) is not None for f in CHUNK_ENCRYPTED) or \
            _field(chunk, CHUNK_FILE_PATH) is not None:
        raise Unspliceable("an encrypted column, or one in another file")
    meta = _field(chunk, CHUNK_META)
    start, length = _chunk_start(meta), _field(meta, META_COMPRESSED)
    moved = out.tell() - start
    _copy_range(source, out, start, length)
    meta = [list(f) for f in meta if f[0] not in META_BLOOM]  # (copies: a chunk may be taken
    for fid in (META_DATA_PAGE, META_INDEX_PAGE, META_DICTIONARY_PAGE):  # more than once)
        if _field(meta, fid) is not None:
            _set(meta, fid, _I64, _field(meta, fid) + moved)
    chunk = [list(f) for f in chunk if f[0] not in CHUNK_INDEXES]
    _set(chunk, CHUNK_META, _STRUCT, meta)
    if _field(chunk, CHUNK_FILE_OFFSET):
        _set(chunk, CHUNK_FILE_OFFSET, _I64, _field(chunk, CHUNK_FILE_OFFSET) + moved)
    return chunk


def _chunk_start(meta: list) -> int:
    dictionary = _field(meta, META_DICTIONARY_PAGE)
    data = _field(meta, META_DATA_PAGE)
    return min(dictionary, data) if dictionary else data


def _copy_range(source, out, start: int, length: int) -> None:
    out.flush()
    done = 0
    try:
        while done < length:
            step = os.copy_file_range(source.fileno(), out.fileno(), length - done,
                                      start + done)
            if step == 0:
                raise Unspliceable("a column chunk past the end of its file")
            done += step
    except (AttributeError, OSError):  # no copy_file_range here: through this process
        source.seek(start + done)
        out.seek(0, os.SEEK_END)
        while done < length:
            block = source.read(min(length - done, 8 * 2**20))
            if not block:
                raise Unspliceable("a column chunk past the end of its file") from None
            out.write(block)
            done += len(block)
    out.seek(0, os.SEEK_END)


def _columns_end(part: Part, elements: list) -> tuple[int, int]:
    """The index past the schema elements of the part's leading `columns` top-level columns,
    and their Parquet leaf columns."""
    leaves, index = 0, 1
    for _ in range(part.columns):
        if index >= len(elements):
            raise Unspliceable(f"{part.path} has fewer columns than taken")
        index, count = _skip_element(elements, index)
        leaves += count
    return index, leaves


def _skip_element(elements: list, index: int) -> tuple[int, int]:
    """The index past the schema element at `index` and its children; its leaves."""
    children = _field(elements[index], ELEMENT_CHILDREN)
    if not children:
        return index + 1, 1
    index, leaves = index + 1, 0
    for _ in range(children):
        index, count = _skip_element(elements, index)
        leaves += count
    return index, leaves


def _leaves(elements: list) -> list[tuple[list[str], int]]:
    """(path, physical type) of each leaf column of a flattened Parquet schema."""
    found: list = []

    def walk(index: int, path: list[str]) -> int:
        element = elements[index]
        name = _field(element, ELEMENT_NAME).decode()
        children = _field(element, ELEMENT_CHILDREN)
        if not children:
            found.append(([*path, name], _field(element, ELEMENT_TYPE)))
            return index + 1
        index += 1
        for _ in range(children):
            index = walk(index, [*path, name])
        return index

    index = 1  # the root
    while index < len(elements):
        index = walk(index, [])
    return found


def _empty(schema: pa.Schema) -> bytes:
    """What pyarrow writes for `schema` and no rows."""
    sink = io.BytesIO()
    pq.write_table(schema.empty_table(), sink, compression="snappy")
    return sink.getvalue()


def _footer(path: str) -> list:
    with open(path, "rb") as found:
        found.seek(-8, os.SEEK_END)
        length, magic = struct.unpack("<I4s", found.read(8))
        if magic != MAGIC:
            raise Unspliceable(f"{path} is not a Parquet file, or an encrypted one")
        found.seek(-8 - length, os.SEEK_END)
        return _read_struct(_Reader(found.read(length)))


def _footer_of(data: bytes) -> list:
    (length,) = struct.unpack("<I", data[-8:-4])
    return _read_struct(_Reader(data[-8 - length:-8]))


# -- Thrift's compact protocol: a struct is a list of [field id, type, value] ---------------
def _struct(*fields) -> list:
    return [list(f) for f in fields]


def _field(fields: list, fid: int):
    for found in fields:
        if found[0] == fid:
            return found[2]
    return None


def _set(fields: list, fid: int, kind: int, value) -> None:
    for found in fields:
        if found[0] == fid:
            found[1], found[2] = kind, value
            return
    fields.append([fid, kind, value])
    fields.sort(key=lambda f: f[0])


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def byte(self) -> int:
        self.at += 1
        return self.data[self.at - 1]

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def take(self, n: int) -> bytes:
        self.at += n
        if self.at > len(self.data):
            raise Unspliceable("a Parquet footer cut short")
        return self.data[self.at - n:self.at]


def _read_struct(reader: _Reader) -> list:
    fields, last = [], 0
    while True:
        head = reader.byte()
        kind = head & 0x0F
        if kind == 0:
            return fields
        delta = head >> 4
        fid = last + delta if delta else reader.zigzag()
        if kind in (_TRUE, _FALSE):
            value = kind == _TRUE
        else:
            value = _read_value(reader, kind)
        fields.append([fid, kind, value])
        last = fid


def _read_value(reader: _Reader, kind: int):
    if kind in (_BYTE,):
        return reader.byte()
    if kind in (_I16, _I32, _I64):
        return reader.zigzag()
    if kind == _DOUBLE:
        return reader.take(8)
    if kind == _BINARY:
        return reader.take(reader.varint())
    if kind in (_LIST, _SET):
        head = reader.byte()
        size, element = head >> 4, head & 0x0F
        if size == 15:
            size = reader.varint()
        if element in (_TRUE, _FALSE):  # a list's booleans: a byte each, kept as it is
            return element, [reader.byte() for _ in range(size)]
        return element, [_read_value(reader, element) for _ in range(size)]
    if kind == _MAP:
        size = reader.varint()
        kinds = reader.byte() if size else 0
        return kinds, [(_read_value(reader, kinds >> 4), _read_value(reader, kinds & 0x0F))
                       for _ in range(size)]
    if kind == _STRUCT:
        return _read_struct(reader)
    raise Unspliceable(f"a Parquet footer with an unknown Thrift type {kind}")


def _write_struct(out: io.BytesIO, fields: list) -> None:
    last = 0
    for fid, kind, value in fields:
        written = kind if kind not in (_TRUE, _FALSE) else (_TRUE if value else _FALSE)
        if 0 < fid - last <= 15:
            out.write(bytes([(fid - last) << 4 | written]))
        else:
            out.write(bytes([written]))
            _write_varint(out, _zig(fid))
        if kind not in (_TRUE, _FALSE):
            _write_value(out, kind, value)
        last = fid
    out.write(b"\x00")


def _write_value(out: io.BytesIO, kind: int, value) -> None:
    if kind == _BYTE:
        out.write(bytes([value]))
    elif kind in (_I16, _I32, _I64):
        _write_varint(out, _zig(value))
    elif kind == _DOUBLE:
        out.write(value)
    elif kind == _BINARY:
        _write_varint(out, len(value))
        out.write(value)
    elif kind in (_LIST, _SET):
        element, values = value
        if len(values) < 15:
            out.write(bytes([len(values) << 4 | element]))
        else:
            out.write(bytes([0xF0 | element]))
            _write_varint(out, len(values))
        for item in values:
            if element in (_TRUE, _FALSE):
                out.write(bytes([item]))
            else:
                _write_value(out, element, item)
    elif kind == _MAP:
        kinds, pairs = value
        _write_varint(out, len(pairs))
        if pairs:
            out.write(bytes([kinds]))
        for key, item in pairs:
            _write_value(out, kinds >> 4, key)
            _write_value(out, kinds & 0x0F, item)
    elif kind == _STRUCT:
        _write_struct(out, value)
    else:
        raise Unspliceable(f"an unknown Thrift type {kind}")


def _zig(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def _write_varint(out: io.BytesIO, n: int) -> None:
    while True:
        if n < 0x80:
            out.write(bytes([n]))
            return
        out.write(bytes([n & 0x7F | 0x80]))
        n >>= 7
