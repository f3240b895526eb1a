"""Row images of rows events, decoded into typed Arrow columns: one batch per source table.

A `TableDecoder` describes the columns of one table as its table map gives them (binary layout,
names) and as the contract wants them (docs/types.md: the Spark type, text of ENUM/SET/TIME,
charsets, zero dates); the same definition drives both decoders:
- the compiled one (`cdc_sql._rowdecode`, C), built by the project's install: it reads the
  event bytes and writes Arrow buffers directly, without the GIL;
- the reference, in this module, pure Python: the fallback where the compiled one could not be
  built, and what it is tested against (tests/unit/test_rowdecode.py: both must give the same
  Arrow arrays, byte for byte, for every type family, charset and random row images).

Each row change becomes one row: the row image silver needs (the after-image of an insert or
update, the before-image of a delete) and `_cdc_offset`, `_cdc_op`, `_cdc_ts`, `_cdc_gtid`. An
UPDATE that changes the key (its bytes) becomes a delete of the old key and an insert of the
new one at the same offset. DATE, DATETIME and TIMESTAMP columns of the key also get their MySQL
text in `_cdc_key_<column>`: zero dates are NULL in the typed column, but keys must stay unique.
"""
from __future__ import annotations

import datetime as dt
import decimal
import ipaddress
import struct
from dataclasses import dataclass, field

import pyarrow as pa

from cdc_sql.source import binlog_events as ev
from cdc_sql.source.binary_values import (WIDE, date_parts, datetime2_parts, decimal_from_binary,
                                          decimal_size, inet6_text, json_text, time2_micros,
                                          time_text, timestamp2_parts, uuid_text)
from cdc_sql.source.charsets import TextDecoding
from cdc_sql.source.offsets import Offset
from cdc_sql.source.schema import arrow_type, key_text_name

META_COLUMNS = (("_cdc_offset", pa.string()), ("_cdc_op", pa.string()),
                ("_cdc_ts", pa.timestamp("us", tz="UTC")), ("_cdc_gtid", pa.string()))
SPECIAL_FORMS = ("inet4", "inet6", "uuid")  # MariaDB types stored as binary, shown as text


class DecodeError(ValueError):
    """A row image that does not fit its table map."""


@dataclass(frozen=True)
class ColumnSpec:
    """One column of a rows event: how to read it, and what to make of it."""

    name: str
    type: int                       # binlog type (ENUM/SET/STRING resolved)
    meta: int
    unsigned: bool
    spark_type: str                 # the contract's type of the output column
    text: TextDecoding | None = None   # character data shown as text (None: bytes)
    pad: int = 0                    # BINARY(n): zero bytes appended up to n
    strip: bool = False             # CHAR: trailing spaces dropped
    members: tuple[str, ...] = ()   # ENUM and SET members, in definition order
    form: str = ""                  # time, decimal_text, geometry, json_binary, inet4/6, uuid
    key_text: bool = False          # a temporal key column: its MySQL text as well

    def describe(self) -> str:
        """The column as an error message names it."""
        charset = f", charset {self.text.charset}" if self.text is not None else ""
        return f"column `{self.name}` ({self.spark_type}, binlog type {self.type}{charset})"

    @property
    def fsp(self) -> int:
        return self.meta if self.type in (ev.T_TIME2, ev.T_DATETIME2, ev.T_TIMESTAMP2) else 0

    @property
    def arrow(self) -> pa.DataType:
        return arrow_type(self.spark_type)


@dataclass(frozen=True, eq=False)  # a dict key per rows event: hashed by identity, cheaply
class TableDecoder:
    db: str
    table: str
    columns: tuple[ColumnSpec, ...]
    key: tuple[int, ...]            # positions of the key columns among `columns`

    @property
    def qualified(self) -> str:
        return f"{self.db}.{self.table}"

    @property
    def schema(self) -> pa.Schema:
        fields = [pa.field(c.name, c.arrow) for c in self.columns]
        fields += [pa.field(key_text_name(c.name), pa.string()) for c in self.columns
                   if c.key_text]
        return pa.schema(fields + [pa.field(n, t) for n, t in META_COLUMNS])


# -- the decoder definition, from a table map and the source's own column definitions ----------
def table_decoder(table_map: ev.TableMap, source_table, charsets, cur=None,
                  converter=None) -> TableDecoder:
    """`source_table` (schema.SourceTable) gives the contract types of the columns it knows;
    a column of the event it does not know (written under an older definition) gets the type
    its table map implies."""
    names = list(table_map.names)
    known = {c.name: c for c in source_table.columns} if source_table else {}
    if any(n is None for n in names):  # no binlog_row_metadata=FULL: by position
        if source_table is None or len(source_table.columns) != len(names):
            raise DecodeError(
                f"the binlog has no column names for {table_map.db}.{table_map.table} and its "
                f"column count ({len(names)}) differs from the table's: set "
                f"binlog_row_metadata=FULL on the source")
        names = [c.name for c in source_table.columns]
    key_names = list(source_table.key) if source_table else []
    temporal_key = {c.name for c in source_table.key_text_columns} if source_table else set()
    specs = tuple(column_spec(info, name, known.get(name), charsets, cur, name in temporal_key,
                              converter) for info, name in zip(table_map.columns, names))
    missing = [k for k in key_names if k not in names]
    if missing:
        raise DecodeError(f"rows of {table_map.db}.{table_map.table} lack the key column "
                          f"`{missing[0]}` (written before it existed): re-snapshot the table")
    return TableDecoder(table_map.db, table_map.table, specs,
                        tuple(names.index(k) for k in key_names))


def column_spec(info: ev.ColumnInfo, name: str, column, charsets, cur, key_text: bool,
                converter=None) -> ColumnSpec:
    charset = charsets.charset(info.collation) if charsets else "utf8mb4"
    binary = charset == "binary"
    derived = spark_type_of(info, binary)
    if column is not None and (column.spark_type == derived or column.data_type in SPECIAL_FORMS
                               or _compatible(derived, column.spark_type)):
        spark, data_type = column.spark_type, column.data_type
        unsigned = column.unsigned or info.unsigned
    else:
        spark, data_type, unsigned = derived, "", info.unsigned
    text = None
    if not binary and info.type in (ev.T_STRING, ev.T_VARCHAR, ev.T_VAR_STRING, ev.T_BLOB,
                                    ev.T_ENUM, ev.T_SET):
        text = charsets.decoding(charset, cur) if charsets else TextDecoding("utf8", "utf8mb4")
    members: tuple[str, ...] = ()
    if info.type in (ev.T_ENUM, ev.T_SET):
        # The table map's own bytes: information_schema shows 4-byte characters as '?'.
        members = tuple(text.python(converter)(m) for m in info.members) if info.members \
            else tuple(column.set_members) if column is not None else ()
        text = None if info.members or column is not None else text
    form = ""
    if data_type in SPECIAL_FORMS:
        form = data_type
    elif info.type in (ev.T_TIME, ev.T_TIME2):
        form = "time"
    elif info.type == ev.T_NEWDECIMAL and spark == "STRING":
        form = "decimal_text"
    elif info.type == ev.T_GEOMETRY:
        form = "geometry"
    elif info.type == ev.T_JSON:
        form = "json_binary"
    elif info.type in (ev.T_TINY, ev.T_SHORT, ev.T_INT24, ev.T_LONG, ev.T_LONGLONG) and \
            spark.startswith("DECIMAL"):
        form = "unsigned_decimal"
    return ColumnSpec(
        name=name, type=info.type, meta=info.meta, unsigned=unsigned, spark_type=spark,
        text=text, pad=info.meta if info.type == ev.T_STRING and binary else 0,
        strip=info.type == ev.T_STRING and not binary, members=members, form=form,
        key_text=key_text)


def _compatible(derived: str, wanted: str) -> bool:
    """The event's values fit the contract type losslessly (an older, narrower definition)."""
    order = ["BYTE", "SHORT", "INT", "LONG"]
    if derived in order and wanted in order:
        return order.index(derived) <= order.index(wanted)
    return derived == "FLOAT" and wanted == "DOUBLE"


def spark_type_of(info: ev.ColumnInfo, binary: bool) -> str:
    """The contract type a table-map column implies on its own (schema.spark_type's twin)."""
    t, unsigned = info.type, info.unsigned
    integers = {ev.T_TINY: ("BYTE", "SHORT"), ev.T_SHORT: ("SHORT", "INT"),
                ev.T_INT24: ("INT", "INT"), ev.T_LONG: ("INT", "LONG"),
                ev.T_LONGLONG: ("LONG", "DECIMAL(20,0)")}
    if t in integers:
        return integers[t][1 if unsigned else 0]
    if t == ev.T_NEWDECIMAL:
        precision, scale = info.meta >> 8, info.meta & 0xFF
        return f"DECIMAL({precision},{scale})" if precision <= 38 else "STRING"
    simple = {ev.T_FLOAT: "FLOAT", ev.T_DOUBLE: "DOUBLE", ev.T_DATE: "DATE",
              ev.T_NEWDATE: "DATE", ev.T_DATETIME: "TIMESTAMP_NTZ",
              ev.T_DATETIME2: "TIMESTAMP_NTZ", ev.T_TIMESTAMP: "TIMESTAMP",
              ev.T_TIMESTAMP2: "TIMESTAMP", ev.T_YEAR: "SHORT", ev.T_GEOMETRY: "BINARY"}
    if t in simple:
        return simple[t]
    if t == ev.T_BIT:
        return "LONG" if bit_width(info.meta) <= 63 else "BINARY"
    if t in (ev.T_STRING, ev.T_VARCHAR, ev.T_VAR_STRING, ev.T_BLOB):
        return "BINARY" if binary else "STRING"
    if t in (ev.T_VARCHAR_COMPRESSED, ev.T_BLOB_COMPRESSED):
        raise DecodeError("MariaDB COMPRESSED columns are not supported by cdc-sql yet: "
                          "remove the COMPRESSED attribute, or leave the table out")
    return "STRING"  # TIME, ENUM, SET, JSON


def bit_width(meta: int) -> int:
    """BIT(n) from its table-map metadata (first byte: bits over whole bytes; second: bytes)."""
    return (meta & 0xFF) * 8 + (meta >> 8)


# -- the reference decoder --------------------------------------------------------------------
@dataclass
class PyBuilder:
    """Decodes rows events of one table into lists, then one Arrow batch (the reference)."""

    decoder: TableDecoder
    converter: object = None       # charsets.ServerConverter for 'server' text
    rows: int = 0
    nbytes: int = 0
    _values: list[list] = field(default_factory=list)
    _key_texts: list[list] = field(default_factory=list)
    _meta: list[list] = field(default_factory=lambda: [[], [], [], []])
    _readers: list = field(default_factory=list)

    def __post_init__(self):
        self._values = [[] for _ in self.decoder.columns]
        self._key_texts = [[] for c in self.decoder.columns if c.key_text]
        self._readers = [_reader(c, self.converter) for c in self.decoder.columns]

    def add(self, body, start: int, op: str, file_seq: int, pos: int, timestamp: int,
            txn: int) -> int:
        """Decode every row of one rows event (`body` from the column count on, at `start`);
        returns the row changes added."""
        data = bytes(body)
        count, p = ev.packed_int(data, start)
        if count != len(self.decoder.columns):
            raise DecodeError(f"rows event of {self.decoder.qualified} has {count} columns, "
                              f"its table map {len(self.decoder.columns)}")
        width = (count + 7) // 8
        present = data[p:p + width]
        p += width
        if op == "u":
            present_after = data[p:p + width]
            p += width
            _check_full(present_after, count, self.decoder.qualified)
        _check_full(present, count, self.decoder.qualified)
        added, row = 0, 0
        ts = timestamp * 1_000_000
        while p < len(data):
            offset = Offset(file_seq, pos, row).text
            first, first_key, p = self._image(data, p)
            if op == "u":
                second, second_key, p = self._image(data, p)
                if first_key != second_key:
                    self._emit(first, "d", offset, ts, txn)
                    self._emit(second, "c", offset, ts, txn)
                    added += 2
                else:
                    self._emit(second, "u", offset, ts, txn)
                    added += 1
            else:
                self._emit(first, op, offset, ts, txn)
                added += 1
            row += 1
        self.nbytes += len(data) - start
        return added

    def _image(self, data: bytes, p: int) -> tuple[list, list, int]:
        """One row image: its values, the key columns' bytes (None for NULL), the position
        after it."""
        columns = self.decoder.columns
        nulls = data[p:p + (len(columns) + 7) // 8]
        p += len(nulls)
        values, raw = [], {}
        for i, read in enumerate(self._readers):
            if nulls[i // 8] & (1 << (i % 8)):
                values.append(None)
                continue
            start = p
            try:
                value, p = read(data, p)
            except (IndexError, struct.error):
                raise DecodeError(f"{columns[i].describe()} runs past the end of its rows "
                                  f"event") from None
            if p > len(data):
                raise DecodeError(f"{columns[i].describe()} runs past the end of its rows "
                                  f"event")
            values.append(value)
            if i in self.decoder.key:
                raw[i] = data[start:p]
        return values, [raw.get(i) for i in self.decoder.key], p

    def _emit(self, image: list, op: str, offset: str, ts: int, txn: int) -> None:
        texts = iter(self._key_texts)
        for column, value, out in zip(self.decoder.columns, image, self._values):
            if column.key_text:
                next(texts).append(None if value is None else value[1])
                value = None if value is None else value[0]
            out.append(value)
        for out, value in zip(self._meta, (offset, op, ts, txn)):
            out.append(value)
        self.rows += 1

    def finish(self, gtids: list[str]) -> pa.RecordBatch:
        """The rows so far as one Arrow batch; the builder starts empty again."""
        schema = self.decoder.schema
        arrays = [pa.array(values, type=column.arrow)
                  for column, values in zip(self.decoder.columns, self._values)]
        arrays += [pa.array(values, pa.string()) for values in self._key_texts]
        offsets, ops, stamps, txns = self._meta
        arrays += [pa.array(offsets, pa.string()), pa.array(ops, pa.string()),
                   pa.array(stamps, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                   pa.array([gtids[t] for t in txns], pa.string())]
        self.__post_init__()
        self._meta = [[], [], [], []]
        self.rows = self.nbytes = 0
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _check_full(present: bytes, count: int, table: str) -> None:
    if any(not present[i // 8] & (1 << (i % 8)) for i in range(count)):
        raise DecodeError(f"rows event of {table} does not carry every column: the source must "
                          f"log full row images (binlog_row_image=FULL)")


# Readers: (data, position) -> (value, position after it). Key-text columns give (value, text).
def _reader(c: ColumnSpec, converter):  # noqa: C901 - one branch per binlog type
    t, meta = c.type, c.meta
    if t in (ev.T_TINY, ev.T_SHORT, ev.T_INT24, ev.T_LONG, ev.T_LONGLONG):
        size = {ev.T_TINY: 1, ev.T_SHORT: 2, ev.T_INT24: 3, ev.T_LONG: 4, ev.T_LONGLONG: 8}[t]
        signed = not c.unsigned
        as_decimal = c.form == "unsigned_decimal"

        def integer(data, p):
            value = int.from_bytes(data[p:p + size], "little", signed=signed)
            return (decimal.Decimal(value) if as_decimal else value), p + size
        return integer
    if t == ev.T_YEAR:
        return lambda data, p: ((0 if data[p] == 0 else 1900 + data[p]), p + 1)
    if t == ev.T_FLOAT:
        return lambda data, p: (struct.unpack_from("<f", data, p)[0], p + 4)
    if t == ev.T_DOUBLE:
        return lambda data, p: (struct.unpack_from("<d", data, p)[0], p + 8)
    if t == ev.T_NEWDECIMAL:
        precision, scale = meta >> 8, meta & 0xFF
        size = decimal_size(precision, scale)

        def dec(data, p):
            value = decimal_from_binary(data[p:p + size], precision, scale)
            if c.form == "decimal_text":
                exponent = decimal.Decimal(1).scaleb(-scale)
                value = abs(value) if value == 0 else value  # no "-0.00"
                return format(value.quantize(exponent, context=WIDE), "f"), p + size
            return value, p + size
        return dec
    if t == ev.T_BIT:
        nbytes = (bit_width(meta) + 7) // 8

        def bit(data, p):
            number = int.from_bytes(data[p:p + nbytes], "big")
            return (number if c.spark_type == "LONG" else number.to_bytes(8, "big")), p + nbytes
        return bit
    if t in (ev.T_DATE, ev.T_NEWDATE):
        return _temporal(c, lambda data, p: (date_parts(data, p), p + 3))
    if t == ev.T_DATETIME2:
        size = 5 + (c.fsp + 1) // 2
        return _temporal(c, lambda data, p: (datetime2_parts(data[p:p + size], c.fsp), p + size))
    if t == ev.T_DATETIME:
        def old_datetime(data, p):
            n = int.from_bytes(data[p:p + 8], "little")
            d, t_ = divmod(n, 1_000_000)
            return (d // 10000, d // 100 % 100, d % 100, t_ // 10000, t_ // 100 % 100,
                    t_ % 100, 0), p + 8
        return _temporal(c, old_datetime)
    if t == ev.T_TIMESTAMP2:
        size = 4 + (c.fsp + 1) // 2
        return _timestamp(c, lambda data, p: (timestamp2_parts(data[p:p + size], c.fsp),
                                              p + size))
    if t == ev.T_TIMESTAMP:
        return _timestamp(c, lambda data, p: ((int.from_bytes(data[p:p + 4], "little"), 0),
                                              p + 4))
    if t == ev.T_TIME2:
        size = 3 + (c.fsp + 1) // 2
        return lambda data, p: (time_text(time2_micros(data[p:p + size], c.fsp), c.fsp),
                                p + size)
    if t == ev.T_TIME:
        def old_time(data, p):
            n = int.from_bytes(data[p:p + 3], "little", signed=True)
            sign, n = ("-", -n) if n < 0 else ("", n)
            micros = ((n // 10000) * 3600 + (n // 100 % 100) * 60 + n % 100) * 1_000_000
            return time_text(-micros if sign else micros, 0), p + 3
        return old_time
    if t == ev.T_ENUM:
        def enum(data, p):
            index = int.from_bytes(data[p:p + meta], "little")
            return (c.members[index - 1] if 0 < index <= len(c.members) else ""), p + meta
        return enum
    if t == ev.T_SET:
        def set_(data, p):
            mask = int.from_bytes(data[p:p + meta], "little")
            return ",".join(m for i, m in enumerate(c.members) if mask >> i & 1), p + meta
        return set_
    if t in (ev.T_STRING, ev.T_VARCHAR, ev.T_VAR_STRING, ev.T_BLOB, ev.T_GEOMETRY, ev.T_JSON):
        if t in (ev.T_BLOB, ev.T_GEOMETRY, ev.T_JSON):
            prefix = meta
        else:
            prefix = 1 if meta < 256 else 2
        finish = _bytes_finisher(c, converter)

        def var(data, p):
            size = int.from_bytes(data[p:p + prefix], "little")
            p += prefix
            return finish(data[p:p + size]), p + size
        return var
    raise DecodeError(f"{c.describe()}: binlog type {t} is not supported")


def _bytes_finisher(c: ColumnSpec, converter):
    """What a length-prefixed value's bytes become."""
    if c.form == "geometry":
        return lambda raw: raw[4:]  # MySQL's internal form: a 4-byte SRID, then WKB
    if c.form == "json_binary":
        return json_text
    if c.form == "inet6":
        return lambda raw: inet6_text(raw.ljust(16, b"\0"))
    if c.form == "inet4":
        return lambda raw: str(ipaddress.IPv4Address(raw.ljust(4, b"\0")))
    if c.form == "uuid":
        return lambda raw: uuid_text(raw.ljust(16, b"\0"))
    if c.text is None:
        return (lambda raw: raw.ljust(c.pad, b"\0")) if c.pad else (lambda raw: raw)
    decode = c.text.python(converter)
    if c.strip:
        return lambda raw: decode(raw).rstrip(" ")
    return decode


def _temporal(c: ColumnSpec, read):
    """DATE and DATETIME: a value, or NULL for zero, partly-zero and invalid dates; key columns
    also give their MySQL text."""
    date_only = c.spark_type == "DATE"

    def temporal(data, p):
        (y, m, d, hh, mi, ss, us), p = read(data, p)
        try:  # zero, partly zero and invalid dates (ALLOW_INVALID_DATES) are NULL
            value = dt.date(y, m, d) if date_only else dt.datetime(y, m, d, hh, mi, ss, us)
        except ValueError:
            value = None
        if not c.key_text:
            return value, p
        text = f"{y:04d}-{m:02d}-{d:02d}"
        if not date_only:
            text += f" {hh:02d}:{mi:02d}:{ss:02d}" + (f".{us:06d}"[:c.fsp + 1] if c.fsp else "")
        return (value, text), p
    return temporal


def _timestamp(c: ColumnSpec, read):
    """TIMESTAMP: the UTC instant, or NULL for the zero timestamp (0 seconds)."""
    def timestamp(data, p):
        (seconds, us), p = read(data, p)
        value = None if seconds == 0 else \
            dt.datetime.fromtimestamp(seconds, dt.timezone.utc).replace(microsecond=us)
        if not c.key_text:
            return value, p
        shown = value.replace(tzinfo=None) if value else None
        text = shown.strftime("%Y-%m-%d %H:%M:%S") if shown else "0000-00-00 00:00:00"
        text += f".{us:06d}"[:c.fsp + 1] if c.fsp else ""
        return (value, text), p
    return timestamp
