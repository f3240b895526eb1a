"""The per-type normal form: binlog and SELECT values of the same MySQL value must agree."""
import datetime as dt
import decimal

import pytest

from cdc_sql.source.schema import Column
from cdc_sql.source.values import decode_sql, encode, normalize


def col(data_type, column_type=None, precision=None, scale=None, fsp=None, length=None):
    return Column("c", data_type, column_type or data_type, precision, scale, fsp, length)


@pytest.mark.parametrize("column, select_value, binlog_value, expected", [
    (col("bit", "bit(5)", precision=5), b"\x05", "00101", 5),
    (col("bit", "bit(64)", precision=64), b"\xff" * 8, "1" * 64, b"\xff" * 8),
    (col("binary", "binary(4)", length=4), b"ab\x00\x00", b"ab", b"ab\x00\x00"),
    (col("binary", "binary(3)", length=3), b"\x00\x00\x00", b"", b"\x00\x00\x00"),
    (col("varbinary", length=10), b"", "", b""),
    (col("set", "set('a','b','c')"), "a,c", {"c", "a"}, "a,c"),
    (col("date"), "0000-00-00", None, None),
    (col("datetime", fsp=0), "0000-00-00 00:00:00", None, None),
    (col("timestamp", fsp=0), "0000-00-00 00:00:00", dt.datetime(1970, 1, 1), None),
    (col("timestamp", fsp=3), dt.datetime(2024, 5, 1, 1, 2, 3, 400000),
     dt.datetime(2024, 5, 1, 1, 2, 3, 400000),
     dt.datetime(2024, 5, 1, 1, 2, 3, 400000, tzinfo=dt.timezone.utc)),
    (col("time", fsp=0), dt.timedelta(hours=-838, minutes=-59, seconds=-59),
     dt.timedelta(hours=-838, minutes=-59, seconds=-59), "-838:59:59"),
    (col("time", fsp=3), dt.timedelta(hours=1, microseconds=5000),
     dt.timedelta(hours=1, microseconds=5000), "01:00:00.005"),
    (col("decimal", "decimal(65,30)", precision=65, scale=30), decimal.Decimal("0E-30"),
     decimal.Decimal("0E-30"), "0." + "0" * 30),
    (col("char", length=5), "ab", "ab   ", "ab"),
])
def test_both_paths_agree(column, select_value, binlog_value, expected):
    assert normalize(column, select_value) == expected
    assert normalize(column, binlog_value) == expected


def test_float_binlog_widening_casts_back_to_same_float32():
    import struct
    column = col("float")
    binlog = normalize(column, 1.100000023841858)
    assert struct.pack("f", binlog) == struct.pack("f", normalize(column, 1.1))
    assert decode_sql(column, "x") == "CAST(x AS FLOAT)"


def test_encode_forms():
    assert encode(col("blob"), b"\x00\xff") == "AP8="
    assert encode(col("timestamp"), dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)) == \
        "2024-01-01 00:00:00.000000+00:00"
    assert encode(col("datetime"), dt.datetime(2024, 1, 1)) == "2024-01-01 00:00:00.000000"
    assert encode(col("int"), None) is None
    assert decode_sql(col("blob"), "x") == "unbase64(x)"
    assert decode_sql(col("varchar"), "x") == "x"


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


from hypothesis import given, strategies as st  # noqa: E402

from cdc_sql.source.values import text_encoder  # noqa: E402

ENCODED_TYPES = {
    col("int", "int(11)"): st.integers(-2**31, 2**31 - 1),
    col("bigint", "bigint(20)"): st.integers(-2**63, 2**63 - 1),
    col("bigint", "bigint(20) unsigned"): st.integers(0, 2**64 - 1),
    col("year", "year(4)"): st.integers(1901, 2155),
    col("varchar", length=20): st.text(max_size=20),
    col("enum", "enum('a','b')"): st.sampled_from(["a", "b", ""]),
    col("double"): st.floats(allow_nan=False),
    col("decimal", "decimal(12,2)", precision=12, scale=2):
        st.decimals(min_value=-10**9, max_value=10**9, places=2),
    col("datetime", fsp=6): st.datetimes(min_value=dt.datetime(1000, 1, 1)),
    col("timestamp", fsp=6): st.datetimes(min_value=dt.datetime(1970, 1, 1),
                                          max_value=dt.datetime(2038, 1, 19)),
    col("char", length=4): st.text(max_size=4),
}


@pytest.mark.parametrize("column", list(ENCODED_TYPES), ids=lambda c: c.column_type)
def test_fused_encoder_equals_normalize_then_encode(column):
    fused = text_encoder(column)

    @given(st.none() | ENCODED_TYPES[column])
    def check(value):
        assert fused(value) == encode(column, normalize(column, value))

    check()
