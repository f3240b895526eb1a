"""The contract's value of a column from what pymysql returns for it (docs/types.md).

Used where rows are read with pymysql: the snapshot's pymysql reader and `verify`. Binlog rows
are decoded straight into contract values by rows.py; connectorx rows are cast by snapshot.py.
"""
from __future__ import annotations

import datetime as dt
import decimal
import json

from cdc_sql.source.binary_values import WIDE, time_text
from cdc_sql.source.schema import GEOMETRY_TYPES, Column

_EPOCH = dt.datetime(1970, 1, 1)


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
            return format(value.quantize(exponent, context=WIDE), "f")
        return value
    if t in ("date", "datetime", "timestamp"):
        return _temporal(t, value)
    if t == "time":
        return _time_text(value, column.fsp or 0)
    if t == "set" and isinstance(value, (set, frozenset)):
        return ",".join(m for m in column.set_members if m in value)
    if t in ("char",) and isinstance(value, str):
        return value.rstrip(" ")
    if t == "json" and not isinstance(value, str):
        return json.dumps(value, separators=(", ", ": "))
    if t in ("float",):
        return float(value)
    if isinstance(value, bytes) and column.spark_type == "STRING":
        return value.decode("utf-8", errors="replace")
    return value


def _temporal(t: str, value):
    if isinstance(value, str):  # pymysql gives zero and invalid dates ('0000-00-00') as text
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
    return time_text(value.days * 86_400_000_000 + value.seconds * 1_000_000 +
                     value.microseconds, fsp)
