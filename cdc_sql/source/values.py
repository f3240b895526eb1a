"""One normal form per type, whether a value came from a snapshot SELECT or from the binlog.

`normalize` turns what pymysql or python-mysql-replication returned into the Python value of the
column's Spark type (DESIGN section 4 lists where the two paths differ). Snapshot rows then go to
Arrow as they are; binlog images travel through bronze as text (`encode`) and are cast back in
Spark SQL (`decode_sql`), so a value reads the same whichever way it came.
"""
from __future__ import annotations

import base64
import datetime as dt
import decimal
import json

import pyarrow as pa

from cdc_sql.source.schema import GEOMETRY_TYPES, Column

_EPOCH = dt.datetime(1970, 1, 1)

_WIDE = decimal.Context(prec=100)  # DECIMAL(65,30) needs more than the default 28 digits
_ARROW = {
    "BYTE": pa.int8(), "SHORT": pa.int16(), "INT": pa.int32(), "LONG": pa.int64(),
    "FLOAT": pa.float32(), "DOUBLE": pa.float64(), "STRING": pa.string(), "BINARY": pa.binary(),
    "DATE": pa.date32(), "TIMESTAMP_NTZ": pa.timestamp("us"), "TIMESTAMP": pa.timestamp("us", tz="UTC"),
}


def arrow_type(column: Column) -> pa.DataType:
    t = column.spark_type
    if t.startswith("DECIMAL("):
        return pa.decimal128(column.precision if column.data_type == "decimal" else 20,
                             column.scale if column.data_type == "decimal" else 0)
    return _ARROW[t]


def normalize(column: Column, value):
    """The canonical value of `column` (None for NULL and for zero dates)."""
    if value is None:
        return None
    t = column.data_type
    if t == "bit":
        if isinstance(value, str):  # binlog: '0101...'
            number = int(value, 2) if value else 0
        else:
            number = int.from_bytes(value, "big")
        width = column.precision or 1
        return number if width <= 63 else number.to_bytes(8, "big")
    if t in GEOMETRY_TYPES:  # MySQL's internal form: a 4-byte SRID, then WKB
        return (value.encode("latin1") if isinstance(value, str) else bytes(value))[4:]
    if t in ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"):
        data = value.encode("latin1") if isinstance(value, str) else bytes(value)
        if t == "binary" and column.length:
            data = data.ljust(column.length, b"\x00")  # binlog strips trailing zero bytes
        return data
    if t == "decimal":
        value = decimal.Decimal(value)
        if column.precision > 38:  # exact text, as MySQL prints it
            exponent = decimal.Decimal(1).scaleb(-column.scale)
            return format(value.quantize(exponent, context=_WIDE), "f")
        return value
    if t in ("date", "datetime", "timestamp"):
        return _temporal(t, value)
    if t == "time":
        return _time_text(value, column.fsp or 0)
    if t == "set":
        members = value if isinstance(value, (set, frozenset)) else set(value.split(",")) - {""}
        return ",".join(m for m in column.set_members if m in members)
    if t in ("char",) and isinstance(value, str):
        return value.rstrip(" ")
    if t == "json" and not isinstance(value, str):
        return json.dumps(value, separators=(", ", ": "))
    if t in ("float",):
        return float(value)
    if isinstance(value, bytes) and column.spark_type == "STRING":
        return value.decode("utf-8", errors="surrogateescape")
    return value


def _temporal(t: str, value):
    if isinstance(value, str):  # pymysql gives zero dates ('0000-00-00') back as text
        return None
    if t == "date":
        return value if not isinstance(value, dt.datetime) else value.date()
    if t == "timestamp":
        if value == _EPOCH:  # the binlog's zero TIMESTAMP
            return None
        return value.replace(tzinfo=dt.timezone.utc)
    return value


def _time_text(value, fsp: int) -> str:
    if isinstance(value, str):
        return value
    micros = value.days * 86_400_000_000 + value.seconds * 1_000_000 + value.microseconds
    sign = "-" if micros < 0 else ""
    micros = abs(micros)
    seconds, fraction = divmod(micros, 1_000_000)
    text = f"{sign}{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    return text + (f".{fraction:06d}"[: fsp + 1] if fsp else "")


def encode(column: Column, value) -> str | None:
    """Text form of a canonical value, for the bronze binlog images."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dt.datetime):
        text = value.replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")
        return text + "+00:00" if value.tzinfo else text
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


def text_encoder(column: Column):
    """`encode(column, normalize(column, v))` as one function, fused for the common types.

    The binlog reader calls this once per value, so it is the hot path of capture.
    """
    t, spark = column.data_type, column.spark_type

    def generic(value):
        return encode(column, normalize(column, value))

    if t in ("tinyint", "smallint", "mediumint", "int", "bigint", "year") and spark != "DECIMAL(20,0)":
        return lambda v: None if v is None else str(v)
    if t in ("varchar", "tinytext", "text", "mediumtext", "longtext", "enum"):
        return lambda v: v if v is None or isinstance(v, str) else generic(v)
    if t == "double":
        return lambda v: None if v is None else repr(v)
    if t == "decimal" and column.precision <= 38:
        return lambda v: None if v is None else format(v, "f")
    if t == "datetime":
        return lambda v: v.isoformat(" ", "microseconds") if isinstance(v, dt.datetime) else None
    if t == "timestamp":
        def timestamp(v):
            if not isinstance(v, dt.datetime) or v == _EPOCH:
                return None
            return v.isoformat(" ", "microseconds") + "+00:00"
        return timestamp
    return generic


def decode_sql(column: Column, text_sql: str) -> str:
    """Spark SQL turning the bronze text `text_sql` back into the column's Spark type."""
    t = column.spark_type
    if t == "BINARY":
        return f"unbase64({text_sql})"
    if t == "STRING":
        return text_sql
    return f"CAST({text_sql} AS {t})"
