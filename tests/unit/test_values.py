"""The contract's value of what pymysql returns (the snapshot's pymysql reader, verify). The same
values from the binlog are checked in test_rowdecode.py, from raw row images."""
import datetime as dt
import decimal

import pytest

from cdc_sql.source.schema import Column
from cdc_sql.source.values import normalize


def col(data_type, column_type=None, precision=None, scale=None, fsp=None, length=None):
    return Column("c", data_type, column_type or data_type, precision, scale, fsp, length)


@pytest.mark.parametrize("column, select_value, expected", [
    (col("bit", "bit(5)", precision=5), b"\x05", 5),
    (col("bit", "bit(64)", precision=64), b"\xff" * 8, b"\xff" * 8),
    (col("binary", "binary(4)", length=4), b"ab\x00\x00", b"ab\x00\x00"),
    (col("binary", "binary(3)", length=3), b"\x00\x00\x00", b"\x00\x00\x00"),
    (col("varbinary", length=10), b"", b""),
    (col("set", "set('a','b','c')"), "a,c", "a,c"),
    (col("set", "set('Trailers','Deleted Scenes','d🎉')"), "Deleted Scenes,d🎉",
     "Deleted Scenes,d🎉"),  # the server's own text, members as defined
    (col("date"), "0000-00-00", None),
    (col("date"), "2001-00-00", None),
    (col("datetime", fsp=0), "0000-00-00 00:00:00", None),
    (col("timestamp", fsp=0), "0000-00-00 00:00:00", None),
    (col("timestamp", fsp=3), dt.datetime(2024, 5, 1, 1, 2, 3, 400000),
     dt.datetime(2024, 5, 1, 1, 2, 3, 400000, tzinfo=dt.timezone.utc)),
    (col("time", fsp=0), dt.timedelta(hours=-838, minutes=-59, seconds=-59), "-838:59:59"),
    (col("time", fsp=3), dt.timedelta(hours=1, microseconds=5000), "01:00:00.005"),
    (col("decimal", "decimal(65,30)", precision=65, scale=30), decimal.Decimal("0E-30"),
     "0." + "0" * 30),
    (col("char", length=5), "ab", "ab"),
    (col("varchar", length=5), b"\xffab", "\ufffdab"),  # not UTF-8: replaced, never surrogates
])
def test_select_values(column, select_value, expected):
    assert normalize(column, select_value) == expected


@pytest.mark.parametrize("data_type, column_type, precision, expected", [
    ("tinyint", "tinyint(4)", None, "BYTE"), ("tinyint", "tinyint(3) unsigned", None, "SHORT"),
    ("int", "int(10) unsigned", None, "LONG"), ("bigint", "bigint(20) unsigned", None, "DECIMAL(20,0)"),
    ("decimal", "decimal(65,30)", 65, "STRING"), ("bit", "bit(63)", 63, "LONG"),
    ("bit", "bit(64)", 64, "BINARY"), ("datetime", "datetime(6)", None, "TIMESTAMP_NTZ"),
    ("timestamp", "timestamp", None, "TIMESTAMP"), ("time", "time", None, "STRING"),
    ("year", "year(4)", None, "SHORT"), ("json", "json", None, "STRING"),
])
def test_type_mapping(data_type, column_type, precision, expected):
    assert Column("c", data_type, column_type, precision, 0, None, None).spark_type == expected
