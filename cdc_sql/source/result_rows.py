"""A SELECT's rows as Arrow batches, read in the binary protocol and decoded in C.

The statement is prepared and executed (COM_STMT_PREPARE, COM_STMT_EXECUTE) on a pymysql
connection that stays in its transaction (a snapshot read's own consistent snapshot); its rows
arrive as "ProtocolBinary::ResultsetRow" packets: integers and floats as their bytes, dates
as their parts, everything else as length-encoded bytes. The socket is read in large chunks
(`CHUNK`) into one buffer, and `cdc_sql._resultrows` decodes every whole row packet of it
without the GIL into column buffers that become Arrow arrays, in the types the columns'
definitions give (`arrow_field`): what the server sends, as it is. The end of the result set,
an error packet and a row of 16 MB or more (several packets) are read here.

Optional: without a C compiler the module is not built and `available()` says so."""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa
import pymysql
from pymysql.constants import CR, FIELD_TYPE, FLAG
from pymysql.protocol import FieldDescriptorPacket

try:
    from cdc_sql import _resultrows
except ImportError:  # not built: no compiler where the package was installed
    _resultrows = None

COM_STMT_PREPARE, COM_STMT_EXECUTE, COM_STMT_CLOSE = 0x16, 0x17, 0x19
CHUNK = 1 << 20  # bytes asked of the socket at a time, at most
START = 1 << 16  # a result's first buffer: a small table's rows fit, a large one's double it
LONG_PACKET = 0xFFFFFF  # a packet of this length continues in the next
BINARY_CHARSET = 63

_FIXED = {FIELD_TYPE.TINY: (1, pa.int8(), pa.uint8()),
          FIELD_TYPE.SHORT: (2, pa.int16(), pa.uint16()),
          FIELD_TYPE.YEAR: (2, pa.int16(), pa.uint16()),
          FIELD_TYPE.INT24: (4, pa.int32(), pa.uint32()),
          FIELD_TYPE.LONG: (4, pa.int32(), pa.uint32()),
          FIELD_TYPE.LONGLONG: (8, pa.int64(), pa.uint64()),
          FIELD_TYPE.FLOAT: (4, pa.float32(), pa.float32()),
          FIELD_TYPE.DOUBLE: (8, pa.float64(), pa.float64())}
_DATES = {FIELD_TYPE.DATE: (10, pa.date32()), FIELD_TYPE.NEWDATE: (10, pa.date32()),
          FIELD_TYPE.DATETIME: (12, pa.timestamp("us")),
          FIELD_TYPE.TIMESTAMP: (12, pa.timestamp("us"))}
_BYTES = 15
_UTF8 = 1
_TEXT = {FIELD_TYPE.DECIMAL, FIELD_TYPE.NEWDECIMAL}  # digits, whatever the charset says
_NOT_READ = {FIELD_TYPE.TIME, FIELD_TYPE.BIT}  # (the snapshot's SELECT casts TIME to text)


class Failed(Exception):
    """The rows could not be decoded (a value no column definition allows): a bug or a server
    this reader does not know, never a row to skip."""


def available() -> bool:
    return _resultrows is not None


@dataclass(frozen=True)
class Field:
    """A result column as its definition describes it: how its values are decoded."""
    name: str
    kind: int
    flags: int
    type: pa.DataType


def arrow_field(type_code: int, flags: int, charset: int, name: str) -> Field:
    """How a column of this wire type is decoded, and its Arrow type. Pure."""
    if type_code in _FIXED:
        width, signed, unsigned = _FIXED[type_code]
        return Field(name, width, 0, unsigned if flags & FLAG.UNSIGNED else signed)
    if type_code in _DATES:
        kind, type_ = _DATES[type_code]
        return Field(name, kind, 0, type_)
    if type_code in _NOT_READ:
        raise Failed(f"column {name}: type {type_code} is not read in the binary protocol")
    if type_code in _TEXT or charset != BINARY_CHARSET:
        return Field(name, _BYTES, _UTF8, pa.string())
    return Field(name, _BYTES, 0, pa.binary())


def read(conn: pymysql.connections.Connection, sql: str, batch_rows: int,
         batch_bytes: int) -> Iterator[pa.RecordBatch]:
    """The rows of `sql`, in batches of at most `batch_rows` rows and about `batch_bytes` of
    values; pymysql's errors as pymysql raises them (a lost connection, an error packet)."""
    statement, fields = _execute(conn, sql)
    stream = Stream(conn)
    try:
        yield from batches(stream, fields, batch_rows, batch_bytes)
    finally:
        if not stream.ended:
            conn._force_close()  # noqa: SLF001 - the rest of a result set is not read
    conn._execute_command(COM_STMT_CLOSE, struct.pack("<I", statement))  # noqa: SLF001
    conn._next_seq_id = 0  # noqa: SLF001 - COM_STMT_CLOSE has no answer


def batches(stream: "Stream", fields: list[Field], batch_rows: int,
            batch_bytes: int) -> Iterator[pa.RecordBatch]:
    """The row packets of `stream` up to its result set's end, as batches."""
    schema = pa.schema([(f.name, f.type) for f in fields])
    decoder = _resultrows.Rows([(f.kind, f.flags) for f in fields])
    while True:
        status = stream.decode(decoder, batch_rows, batch_bytes)
        if status == _resultrows.FULL:
            yield _batch(decoder, schema)
        elif status == _resultrows.LONG:
            _decoded(decoder.add, stream.long_packet())
        elif status == _resultrows.ERROR:
            stream.raise_error()
        else:
            stream.end()
            break
    if decoder.rows:
        yield _batch(decoder, schema)


def _execute(conn, sql: str) -> tuple[int, list[Field]]:
    """Prepare and execute `sql` (no parameters): the statement's id and its columns."""
    conn._execute_command(COM_STMT_PREPARE, sql)  # noqa: SLF001
    ok = conn._read_packet()  # noqa: SLF001 - raises the server's error
    _, statement, columns, params = struct.unpack("<BIHH", ok.read(9))
    for _ in range(params + (1 if params else 0)):  # their definitions, then EOF
        conn._read_packet()  # noqa: SLF001
    for _ in range(columns + (1 if columns else 0)):
        conn._read_packet()  # noqa: SLF001
    conn._execute_command(COM_STMT_EXECUTE, struct.pack("<IBI", statement, 0, 1))  # noqa: SLF001
    count = conn._read_packet().read_length_encoded_integer()  # noqa: SLF001
    fields = []
    for _ in range(count):
        d = conn._read_packet(FieldDescriptorPacket)  # noqa: SLF001
        fields.append(arrow_field(d.type_code, d.flags, d.charsetnr, d.name))
    eof = conn._read_packet()  # noqa: SLF001
    if not eof.is_eof_packet():
        raise Failed("the column definitions of a result set end without EOF")
    return statement, fields


def _decoded(decode, *args):
    """The C decoder's answer; what it could not decode, as Failed."""
    try:
        return decode(*args)
    except ValueError as exc:
        raise Failed(f"a result row that cannot be decoded: {exc}") from None


def _batch(decoder, schema: pa.Schema) -> pa.RecordBatch:
    rows, columns = decoder.finish()
    arrays = []
    for field, (values, offsets, validity, nulls, invalid_utf8) in zip(schema, columns):
        if invalid_utf8:
            raise Failed(f"column {field.name}: text that is not UTF-8")
        buffers = [pa.py_buffer(validity) if nulls else None]
        if offsets is not None:
            buffers.append(pa.py_buffer(offsets))
        buffers.append(pa.py_buffer(values))
        arrays.append(pa.Array.from_buffers(field.type, rows, buffers, null_count=nulls))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class Stream:
    """The socket's bytes of one result set, held in one buffer between decodes. What pymysql's
    buffered reader holds already is taken first; then the socket is read directly, a chunk at
    a time (the buffered reader would ask the socket for more than it has already, and wait
    for bytes the server never sends once the result set has ended)."""

    def __init__(self, conn):
        self.conn, self.socket = conn, conn._sock  # noqa: SLF001 - pymysql's socket
        held = conn._rfile.peek()  # noqa: SLF001 - what pymysql's reader has read ahead
        self.buffer = bytearray(max(START, len(held)))  # grows as a large result streams in
        self.view = memoryview(self.buffer)
        self.view[:len(held)] = held
        conn._rfile.read(len(held))  # noqa: SLF001
        self.start, self.end_at = 0, len(held)
        self.ended = False

    def decode(self, decoder, batch_rows: int, batch_bytes: int) -> int:
        while True:
            self.start, status = _decoded(decoder.decode, self.view[:self.end_at], self.start,
                                          batch_rows, batch_bytes)
            if status != _resultrows.MORE:
                return status
            self._fill()

    def _fill(self, need: int = 1) -> None:
        """At least `need` more bytes after those held, read from the socket."""
        held = self.end_at - self.start
        if self.start:  # the part of a packet held moves to the front
            self.view[:held] = self.view[self.start:self.end_at]
            self.start, self.end_at = 0, held
        while (wanted := need - (self.end_at - held)) > 0:
            free = len(self.buffer) - self.end_at
            if free < wanted or free < min(CHUNK, len(self.buffer)):  # doubled, up to CHUNK free
                self.view.release()
                self.buffer.extend(bytes(max(len(self.buffer), wanted)))
                self.view = memoryview(self.buffer)
            try:
                got = self.socket.recv_into(self.view[self.end_at:],
                                            min(CHUNK, len(self.buffer) - self.end_at))
            except OSError as exc:
                self.conn._force_close()  # noqa: SLF001
                raise pymysql.err.OperationalError(
                    CR.CR_SERVER_LOST, f"Lost connection to server during query ({exc})"
                ) from None
            if not got:
                self.conn._force_close()  # noqa: SLF001
                raise pymysql.err.OperationalError(
                    CR.CR_SERVER_LOST, "Lost connection to server during query")
            self.end_at += got

    def _packet(self) -> bytes:
        """The next packet's payload (one packet), read whole."""
        if self.end_at - self.start < 4:
            self._fill(4 - (self.end_at - self.start))
        length = int.from_bytes(self.view[self.start:self.start + 3], "little")
        if self.end_at - self.start < 4 + length:
            self._fill(4 + length - (self.end_at - self.start))
        payload = bytes(self.view[self.start + 4:self.start + 4 + length])
        self.start += 4 + length
        return payload

    def long_packet(self) -> bytes:
        """A row of several packets, put together."""
        parts = [self._packet()]
        while len(parts[-1]) == LONG_PACKET:
            parts.append(self._packet())
        return b"".join(parts)

    def raise_error(self) -> None:
        payload = self._packet()
        self.ended = True  # the server ends the result set with its error
        self._resync()
        pymysql.err.raise_mysql_exception(payload)

    def end(self) -> None:
        self._packet()
        self.ended = True
        self._resync()

    def _resync(self) -> None:
        if self.start != self.end_at:
            raise Failed("bytes after the end of a result set")
