"""Binlog event bodies: one small parser per event kind cdc-sql reads.

Formats as MariaDB and MySQL write them (binlog version 4): a table map describes the columns of
the rows events that follow it in the same transaction (binary types, their metadata, and with
`binlog_row_metadata=FULL` names, signedness, charsets and ENUM/SET members); a GTID event opens
a transaction, an XID event or a COMMIT query closes it; a query event outside a transaction is
DDL. Row images themselves are decoded by rows.py.
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

# Event types
QUERY, STOP, ROTATE, FORMAT_DESCRIPTION, XID = 2, 3, 4, 15, 16
BEGIN_LOAD_QUERY, EXECUTE_LOAD_QUERY, XA_PREPARE = 17, 18, 38
TABLE_MAP, HEARTBEAT, ROWS_QUERY = 19, 27, 29
WRITE_V1, UPDATE_V1, DELETE_V1 = 23, 24, 25
WRITE_V2, UPDATE_V2, DELETE_V2 = 30, 31, 32
MYSQL_GTID, MYSQL_ANONYMOUS_GTID, MYSQL_PREVIOUS_GTIDS = 33, 34, 35
MYSQL_TRANSACTION_PAYLOAD, MYSQL_PARTIAL_UPDATE_ROWS = 40, 39
MARIADB_ANNOTATE_ROWS, MARIADB_BINLOG_CHECKPOINT, MARIADB_GTID, MARIADB_GTID_LIST = 160, 161, 162, 163
MARIADB_START_ENCRYPTION = 164
ARTIFICIAL = 0x20  # LOG_EVENT_ARTIFICIAL_F: made up by the server, not in the binlog file
NO_FOREIGN_KEY_CHECKS = 0x0002  # a rows event's flag: written with foreign_key_checks=0
MARIADB_COMPRESSED_QUERY = 165
MARIADB_COMPRESSED_ROWS = range(166, 172)
# MariaDB's compressed rows events and the plain ones they stand for (V1: 166-168, V2: 169-171)
_UNCOMPRESSED = {166: 23, 167: 24, 168: 25, 169: 30, 170: 31, 171: 32}
MARIADB_PREPARED_XA, MARIADB_COMPLETED_XA = 0x40, 0x80  # GTID event flags
ROWS_EVENTS = {WRITE_V1: "c", UPDATE_V1: "u", DELETE_V1: "d",
               WRITE_V2: "c", UPDATE_V2: "u", DELETE_V2: "d"}

# Column types (binlog codes)
T_DECIMAL, T_TINY, T_SHORT, T_LONG, T_FLOAT, T_DOUBLE, T_NULL, T_TIMESTAMP = 0, 1, 2, 3, 4, 5, 6, 7
T_LONGLONG, T_INT24, T_DATE, T_TIME, T_DATETIME, T_YEAR, T_NEWDATE, T_VARCHAR = \
    8, 9, 10, 11, 12, 13, 14, 15
T_BIT, T_TIMESTAMP2, T_DATETIME2, T_TIME2 = 16, 17, 18, 19
T_VARCHAR_COMPRESSED, T_BLOB_COMPRESSED = 140, 141
T_JSON, T_NEWDECIMAL, T_ENUM, T_SET = 245, 246, 247, 248
T_TINY_BLOB, T_MEDIUM_BLOB, T_LONG_BLOB, T_BLOB, T_VAR_STRING, T_STRING, T_GEOMETRY = \
    249, 250, 251, 252, 253, 254, 255
NUMERIC = {T_TINY, T_SHORT, T_INT24, T_LONG, T_LONGLONG, T_NEWDECIMAL, T_FLOAT, T_DOUBLE, T_YEAR}
# Columns the table map's charset metadata covers (MariaDB counts geometry among them).
CHARACTER = {T_STRING, T_VAR_STRING, T_VARCHAR, T_BLOB, T_VARCHAR_COMPRESSED, T_BLOB_COMPRESSED}
_META_BYTES = {T_FLOAT: 1, T_DOUBLE: 1, T_TIMESTAMP2: 1, T_DATETIME2: 1, T_TIME2: 1,
               T_BLOB: 1, T_GEOMETRY: 1, T_JSON: 1, T_BLOB_COMPRESSED: 1,
               T_VARCHAR: 2, T_VAR_STRING: 2, T_VARCHAR_COMPRESSED: 2, T_NEWDECIMAL: 2, T_BIT: 2,
               T_STRING: 2, T_ENUM: 2, T_SET: 2}


class EventError(ValueError):
    """A malformed event body."""


def packed_int(data, pos: int) -> tuple[int, int]:
    """A length-encoded integer at `pos`: (value, position after it)."""
    first = data[pos]
    if first < 251:
        return first, pos + 1
    if first == 252:
        return data[pos + 1] | data[pos + 2] << 8, pos + 3
    if first == 253:
        return data[pos + 1] | data[pos + 2] << 8 | data[pos + 3] << 16, pos + 4
    if first == 254:
        return struct.unpack_from("<Q", data, pos + 1)[0], pos + 9
    raise EventError(f"bad length-encoded integer (first byte {first})")


@dataclass(frozen=True)
class ColumnInfo:
    """One column as the table map describes it."""

    type: int            # the real type: ENUM/SET/STRING resolved from STRING's metadata
    meta: int            # type metadata (length, precision/scale, fsp, pack length ...)
    nullable: bool
    name: str | None = None
    unsigned: bool = False
    collation: int | None = None   # collation id of a character, ENUM or SET column
    members: tuple[bytes, ...] | None = None   # ENUM or SET members, in the column's charset


@dataclass(frozen=True)
class TableMap:
    table_id: int
    db: str
    table: str
    columns: tuple[ColumnInfo, ...]
    primary_key: tuple[int, ...] = ()

    @property
    def names(self) -> tuple[str | None, ...]:
        return tuple(c.name for c in self.columns)


def table_id(data, pos: int = 0) -> int:
    return int.from_bytes(bytes(data[pos:pos + 6]), "little")


def parse_table_map(body: memoryview, mariadb: bool = True) -> TableMap:
    data = bytes(body)
    tid = table_id(data)
    pos = 8
    db_len = data[pos]
    db = data[pos + 1:pos + 1 + db_len].decode("utf-8", "replace")
    pos += 2 + db_len
    tbl_len = data[pos]
    table = data[pos + 1:pos + 1 + tbl_len].decode("utf-8", "replace")
    pos += 2 + tbl_len
    count, pos = packed_int(data, pos)
    types = list(data[pos:pos + count])
    pos += count
    meta_len, pos = packed_int(data, pos)
    meta_end = pos + meta_len
    metas = []
    for t in types:
        size = _META_BYTES.get(t, 0)
        if t in (T_VARCHAR, T_VAR_STRING, T_VARCHAR_COMPRESSED):
            metas.append(data[pos] | data[pos + 1] << 8)
        elif size == 2:  # big end first: (real type, length), (precision, scale), (bits, bytes)
            metas.append(data[pos] << 8 | data[pos + 1])
        elif size == 1:
            metas.append(data[pos])
        else:
            metas.append(0)
        pos += size
    if pos != meta_end:
        raise EventError(f"table map of {db}.{table}: metadata is {meta_len} bytes, read "
                         f"{pos - meta_end + meta_len}")
    nulls = data[pos:pos + (count + 7) // 8]
    pos += (count + 7) // 8
    real = [_real_type(t, m) for t, m in zip(types, metas)]
    optional = _optional_metadata(data, pos, [t for t, _ in real], mariadb)
    columns = []
    for i, ((t, m), nullable) in enumerate(zip(real, _bits(nulls, count))):
        columns.append(ColumnInfo(
            type=t, meta=m, nullable=nullable, name=optional["names"][i],
            unsigned=optional["unsigned"][i], collation=optional["collations"][i],
            members=optional["members"][i]))
    return TableMap(tid, db, table, tuple(columns), tuple(optional["primary_key"]))


def _real_type(t: int, meta: int) -> tuple[int, int]:
    """STRING columns carry their real type (CHAR, ENUM, SET) in the metadata's first byte; a
    CHAR longer than 255 bytes borrows two of its bits for the length."""
    if t != T_STRING:
        return t, meta
    byte0, byte1 = meta >> 8, meta & 0xFF
    if byte0 and (byte0 & 0x30) != 0x30:
        return T_STRING, byte1 | (((byte0 & 0x30) ^ 0x30) << 4)
    if byte0 in (T_ENUM, T_SET):
        return byte0, byte1
    return T_STRING, byte1


def _bits(data: bytes, count: int, msb_first: bool = False) -> list[bool]:
    if msb_first:
        return [bool(data[i // 8] & (0x80 >> (i % 8))) for i in range(count)]
    return [bool(data[i // 8] & (1 << (i % 8))) for i in range(count)]


def _optional_metadata(data: bytes, pos: int, types: list[int], mariadb: bool) -> dict:
    """The TLV fields after the null bitmap (binlog_row_metadata=MINIMAL or FULL)."""
    count = len(types)
    out = {"names": [None] * count, "unsigned": [False] * count, "collations": [None] * count,
           "members": [None] * count, "primary_key": []}
    character = [i for i, t in enumerate(types)
                 if t in CHARACTER or (mariadb and t == T_GEOMETRY)]
    enum_set = [i for i, t in enumerate(types) if t in (T_ENUM, T_SET)]
    numeric = [i for i, t in enumerate(types) if t in NUMERIC]
    by_kind = {1: numeric, 2: character, 3: character, 5: [i for i, t in enumerate(types)
                                                          if t == T_SET],
               6: [i for i, t in enumerate(types) if t == T_ENUM], 10: enum_set, 11: enum_set}
    while pos < len(data):
        kind = data[pos]
        length, pos = packed_int(data, pos + 1)
        value, pos = data[pos:pos + length], pos + length
        columns = by_kind.get(kind, [])
        if kind == 1:  # SIGNEDNESS: one bit per numeric column, most significant first
            for i, unsigned in zip(columns, _bits(value, len(columns), msb_first=True)):
                out["unsigned"][i] = unsigned
        elif kind in (2, 10):  # DEFAULT_CHARSET, ENUM_AND_SET_DEFAULT_CHARSET
            default, exceptions = _default_charset(value)
            for n, i in enumerate(columns):
                out["collations"][i] = exceptions.get(n, default)
        elif kind in (3, 11):  # COLUMN_CHARSET, ENUM_AND_SET_COLUMN_CHARSET
            for i, collation in zip(columns, _ints(value)):
                out["collations"][i] = collation
        elif kind == 4:  # COLUMN_NAME
            names, p = [], 0
            while p < len(value):
                size, p = packed_int(value, p)
                names.append(value[p:p + size].decode("utf-8", "replace"))
                p += size
            out["names"][:len(names)] = names
        elif kind in (5, 6):  # SET_STR_VALUE, ENUM_STR_VALUE
            p = 0
            for i in columns:
                if p >= len(value):
                    break
                members_count, p = packed_int(value, p)
                members = []
                for _ in range(members_count):
                    size, p = packed_int(value, p)
                    members.append(bytes(value[p:p + size]))
                    p += size
                out["members"][i] = tuple(members)
        elif kind == 8:  # SIMPLE_PRIMARY_KEY
            out["primary_key"] = _ints(value)
        elif kind == 9:  # PRIMARY_KEY_WITH_PREFIX: (index, prefix) pairs
            out["primary_key"] = _ints(value)[0::2]
    return out


def _default_charset(value: bytes) -> tuple[int, dict[int, int]]:
    default, p = packed_int(value, 0)
    exceptions = {}
    while p < len(value):
        index, p = packed_int(value, p)
        collation, p = packed_int(value, p)
        exceptions[index] = collation
    return default, exceptions


def _ints(value: bytes) -> list[int]:
    out, p = [], 0
    while p < len(value):
        n, p = packed_int(value, p)
        out.append(n)
    return out


# -- other events -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Query:
    schema: str
    statement: str
    error_code: int = 0


def parse_query(body: memoryview, type_: int = QUERY) -> Query:
    """A query event, a MariaDB compressed one (the statement zlib-compressed), or the
    statement of a LOAD DATA written in statement form (EXECUTE_LOAD_QUERY: 13 more bytes of
    post-header: file id, start and end of the file name, duplicate handling)."""
    data = bytes(body)
    db_len = data[8]
    error_code, status_len = struct.unpack_from("<HH", data, 9)
    pos = 13 + (13 if type_ == EXECUTE_LOAD_QUERY else 0) + status_len
    schema = data[pos:pos + db_len].decode("utf-8", "replace")
    text = data[pos + db_len + 1:]
    if type_ == MARIADB_COMPRESSED_QUERY:
        text = uncompress(text)
    return Query(schema, text.decode("utf-8", "replace"), error_code)


def uncompress(data: bytes) -> bytes:
    """MariaDB's compressed binlog payload (log_bin_compress): a header byte (0x80, and in its
    low three bits how many bytes of big-endian length follow), the length, then zlib."""
    if not data or not data[0] & 0x80:
        raise EventError("a compressed binlog event without its compression header")
    width = data[0] & 0x07
    length = int.from_bytes(data[1:1 + width], "big")
    try:
        out = zlib.decompress(data[1 + width:])
    except zlib.error as exc:
        raise EventError(f"a compressed binlog event that zlib cannot read: {exc}") from None
    if len(out) != length:
        raise EventError(f"a compressed binlog event of {len(out)} bytes, {length} announced")
    return out


def uncompressed_rows(type_: int, body: memoryview) -> tuple[int, bytes]:
    """A MariaDB compressed rows event as the plain rows event it stands for: (type, body).
    The header, the column count and the column bitmaps are as they are; the row images
    after them are compressed."""
    plain = _UNCOMPRESSED[type_]
    start = parse_rows_header(body, plain).start
    count, pos = packed_int(body, start)
    pos += (count + 7) // 8 * (2 if plain in (UPDATE_V1, UPDATE_V2) else 1)
    return plain, bytes(body[:pos]) + uncompress(bytes(body[pos:]))


def parse_xa_prepare(body: memoryview) -> tuple[bool, str]:
    """XA_PREPARE_LOG_EVENT: (one phase, the XID as XA COMMIT names it: X'gtrid',X'bqual',n)."""
    one_phase = bool(body[0])
    format_id, gtrid, bqual = struct.unpack_from("<iii", body, 1)
    data = bytes(body[13:13 + gtrid + bqual])
    return one_phase, xid_text(format_id, data[:gtrid], data[gtrid:])


def xid_text(format_id: int, gtrid: bytes, bqual: bytes) -> str:
    return f"X'{gtrid.hex()}',X'{bqual.hex()}',{format_id}"


def parse_rotate(body: memoryview) -> tuple[str, int]:
    data = bytes(body)
    return data[8:].decode("utf-8", "replace"), struct.unpack_from("<Q", data, 0)[0]


@dataclass(frozen=True)
class Gtid:
    text: str             # MariaDB domain-server-seq, or MySQL uuid:n
    mariadb: bool
    standalone: bool = False  # MariaDB: no BEGIN/COMMIT follows (DDL, non-transactional)
    xa: bool = False  # MariaDB: an XA transaction's prepared part (XA START ... XA PREPARE)
    domain: int = 0
    server_id: int = 0
    seq: int = 0


def parse_mariadb_gtid(body: memoryview, server_id: int) -> Gtid:
    seq, domain, flags = struct.unpack_from("<QIB", body, 0)
    return Gtid(f"{domain}-{server_id}-{seq}", True, bool(flags & 1),
                bool(flags & MARIADB_PREPARED_XA), domain, server_id, seq)


def parse_mysql_gtid(body: memoryview) -> Gtid:
    data = bytes(body)
    sid = data[1:17].hex()
    uuid = f"{sid[:8]}-{sid[8:12]}-{sid[12:16]}-{sid[16:20]}-{sid[20:]}"
    gno = struct.unpack_from("<q", data, 17)[0]
    return Gtid(f"{uuid}:{gno}", False, seq=gno)


def parse_previous_gtids(body: memoryview) -> dict[str, list[tuple[int, int]]]:
    """MySQL's PREVIOUS_GTIDS event (at the head of every binlog file): the GTIDs of the files
    before it, as inclusive intervals per server UUID (stored half-open)."""
    count, = struct.unpack_from("<Q", body, 0)
    at, out = 8, {}
    for _ in range(count):
        sid = bytes(body[at:at + 16]).hex()
        uuid = f"{sid[:8]}-{sid[8:12]}-{sid[12:16]}-{sid[16:20]}-{sid[20:]}"
        intervals, = struct.unpack_from("<Q", body, at + 16)
        at += 24
        for _ in range(intervals):
            low, end = struct.unpack_from("<qq", body, at)
            out.setdefault(uuid, []).append((low, end - 1))
            at += 16
    return out


@dataclass(frozen=True)
class RowsHeader:
    table_id: int
    op: str               # c, u or d
    start: int            # where the column count begins in the body
    flags: int = field(default=0)


def parse_rows_header(body: memoryview, type_: int) -> RowsHeader:
    tid = table_id(body)
    flags = body[6] | body[7] << 8
    start = 8
    if type_ in (WRITE_V2, UPDATE_V2, DELETE_V2):
        extra = body[8] | body[9] << 8
        start = 8 + extra  # the length counts its own two bytes
    return RowsHeader(tid, ROWS_EVENTS[type_], start, flags)
