"""Checksums of projected rows, computed the same way in MySQL SQL and in Spark SQL (verify.py).

Each value becomes a canonical text that both databases print alike ('v' + text, or 'n' for
NULL): integers and decimals as digits at the column's scale, dates and DATETIMEs formatted to the
microsecond, TIMESTAMPs as epoch microseconds (no time zone involved), binary as hex, strings as
they are (MySQL converts them to utf8mb4 first, as Spark holds them). A row's hash is the first
60 bits of the MD5 of its texts joined by '|'; a bucket's checksum is the row count and the sum of
those hashes, so row order never matters. FLOAT and DOUBLE print differently on every engine, so
they are compared as a per-bucket count and sum, within the rounding error the two summation
orders can make (2 * n * 2^-52 * sum|x|): a change smaller than that passes unseen, and so does
any change in a bucket whose sum of |x| overflows (values near FLOAT/DOUBLE's maximum).

Buckets are the pipeline's snapshot splits when the key is one integer column, else
CRC32(key text) modulo a bucket count (string order differs between MySQL collations and Spark).
Identifiers are quoted through sqlglot; values (split bounds) are bound as parameters on the Spark
side and escaped by the MySQL driver on the MySQL side.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from cdc_sql.source.schema import GEOMETRY_TYPES, Column
from cdc_sql.source.splits import mysql_quote
from cdc_sql.sql import quote as spark_quote

FLOATS = ("float", "double")
_EPSILON = 2.0 ** -52
FLOAT32_EPSILON = 2.0 ** -23
_INTEGER_SOURCES = {"tinyint", "smallint", "mediumint", "int", "bigint"}


@dataclass(frozen=True)
class Output:
    """One silver column: its name, its Spark type (simpleString), its source column if bare."""

    name: str
    spark_type: str
    source: Column | None = None

    @property
    def is_float(self) -> bool:
        return self.spark_type in FLOATS


def mysql_text(o: Output) -> str:
    """The canonical text of a value on the source (NULL for NULL), in utf8mb4 (columns of
    several charsets and collations join into one text)."""
    return f"CONVERT({_mysql_value_text(o)} USING utf8mb4)"


def _mysql_value_text(o: Output) -> str:
    c, t = mysql_quote(o.name), o.spark_type
    data_type = o.source.data_type if o.source else ""
    if data_type in _INTEGER_SOURCES:  # numbers, not ZEROFILL's padded display ('000')
        return f"{c} + 0"
    if data_type == "bit":
        return f"CAST({c} AS UNSIGNED)" if t == "bigint" else f"LPAD(HEX({c}), 16, '0')"
    if t.startswith("decimal"):
        return f"CAST({c} AS {t.upper()})"
    # zero, partly zero and invalid dates are NULL in silver (docs/types.md)
    no_date = (f"YEAR({c}) = 0 OR MONTH({c}) = 0 OR DAY({c}) = 0 OR "
               f"DAY({c}) > DAY(LAST_DAY({c}))")
    if t == "date":
        return f"IF({no_date}, NULL, DATE_FORMAT({c}, '%Y-%m-%d'))"
    if t == "timestamp_ntz":
        return f"IF({no_date}, NULL, DATE_FORMAT({c}, '%Y-%m-%d %H:%i:%s.%f'))"
    if t == "timestamp":
        return f"IF(UNIX_TIMESTAMP({c}) = 0, NULL, CAST(UNIX_TIMESTAMP({c}) * 1000000 AS SIGNED))"
    if data_type in GEOMETRY_TYPES:
        return f"HEX(ST_AsBinary({c}))"
    if t == "binary":
        return f"HEX({c})"
    return c


def mysql_float(o: Output) -> str:
    """A FLOAT or DOUBLE as its double, with every digit (FLOAT(M,D) displays D decimals)."""
    return f"CAST({mysql_quote(o.name)} AS DOUBLE)"


def spark_float(o: Output) -> str:
    return f"CAST({spark_quote(o.name)} AS DOUBLE)"


def spark_text(o: Output) -> str:
    """The canonical text of a value in silver (NULL for NULL)."""
    c, t = spark_quote(o.name), o.spark_type
    if t == "date":
        return f"date_format({c}, 'yyyy-MM-dd')"
    if t == "timestamp_ntz":
        return f"date_format({c}, 'yyyy-MM-dd HH:mm:ss.SSSSSS')"
    if t == "timestamp":
        return f"CAST(unix_micros({c}) AS STRING)"
    if t == "binary":
        return f"hex({c})"
    if t == "boolean":  # a computed condition: MySQL gives 1 or 0
        return f"CAST(CAST({c} AS INT) AS STRING)"
    return c if t == "string" else f"CAST({c} AS STRING)"


def _joined(outputs: list[Output], text: Callable[[Output], str]) -> str:
    parts = [f"COALESCE(CONCAT('v', {text(o)}), 'n')" for o in outputs if not o.is_float]
    return f"CONCAT_WS('|', {', '.join(parts) or repr('')})"


def _hash(joined: str, mysql: bool) -> str:
    data = f"CONVERT({joined} USING utf8mb4)" if mysql else joined
    return f"CAST(CONV(SUBSTR(MD5({data}), 1, 15), 16, 10) AS DECIMAL(38,0))"


@dataclass(frozen=True)
class Buckets:
    """How rows are grouped: split ranges of one integer key, or key-hash buckets."""

    key: tuple[Output, ...]
    bounds: tuple = ()          # the upper bound of every split but the last, in order
    count: int = 1              # hash buckets (when there are no bounds)
    label: str = field(default="bucket")

    @classmethod
    def choose(cls, key: list[Output], splits: list, estimated_rows: int,
               rows_per_bucket: int) -> "Buckets":
        """`splits`: the table's state.SplitEntry list."""
        source = key[0].source if len(key) == 1 else None
        if source is not None and source.data_type in _INTEGER_SOURCES and len(splits) > 1:
            ordered = sorted(splits, key=lambda s: s.split_id)
            return cls(tuple(key), tuple(s.upper[0] for s in ordered[:-1]), label="split")
        return cls(tuple(key), count=max(1, -(-estimated_rows // rows_per_bucket)))

    @property
    def total(self) -> int:
        return len(self.bounds) + 1 if self.bounds else self.count

    def mysql(self, escape: Callable) -> str:
        if self.bounds:
            c = mysql_quote(self.key[0].name)
            cases = " ".join(f"WHEN {c} < {escape(b)} THEN {i}" for i, b in enumerate(self.bounds))
            return f"CASE {cases} ELSE {len(self.bounds)} END"
        return f"MOD(CRC32({_joined(list(self.key), mysql_text)}), " \
               f"{self.count})"

    def spark(self) -> tuple[str, dict]:
        if self.bounds:
            c = spark_quote(self.key[0].name)
            cases = " ".join(f"WHEN {c} < :bound{i} THEN {i}" for i in range(len(self.bounds)))
            return (f"CASE {cases} ELSE {len(self.bounds)} END",
                    {f"bound{i}": b for i, b in enumerate(self.bounds)})
        return f"pmod(crc32({_joined(list(self.key), spark_text)}), {self.count})", {}


def mysql_summary(rows_sql: str, outputs: list[Output], buckets: Buckets, escape) -> str:
    """Per bucket: bucket, rows, hash sum, then count/sum/sum(abs) of every float column."""
    floats = [mysql_float(o) for o in outputs if o.is_float]
    stats = "".join(f", COUNT({c}), SUM({c}), SUM(ABS({c}))" for c in floats)
    return (f"SELECT {buckets.mysql(escape)} AS cdc_bucket, COUNT(*), "
            f"SUM({_hash(_joined(outputs, mysql_text), True)}){stats} "
            f"FROM ({rows_sql}) AS cdc_rows GROUP BY cdc_bucket")


def spark_summary(rows_sql: str, outputs: list[Output], buckets: Buckets) -> tuple[str, dict]:
    floats = [spark_quote(o.name) for o in outputs if o.is_float]
    stats = "".join(f", COUNT({c}), SUM(CAST({c} AS DOUBLE)), SUM(ABS(CAST({c} AS DOUBLE)))"
                    for c in floats)
    bucket, args = buckets.spark()
    return (f"SELECT {bucket} AS cdc_bucket, COUNT(*), "
            f"SUM({_hash(_joined(outputs, spark_text), False)}){stats} "
            f"FROM ({rows_sql}) AS cdc_rows GROUP BY {bucket}", args)


def same(source: tuple, silver: tuple) -> bool:
    """Two summaries (without the bucket) agree: counts and hashes exactly, float sums nearly."""
    if source[:2] != silver[:2]:
        return False
    for i in range(2, len(source), 3):
        count_a, sum_a, scale_a = source[i:i + 3]
        count_b, sum_b, scale_b = silver[i:i + 3]
        if count_a != count_b:
            return False
        # Summation order differs between the engines (and between file layouts): allow its
        # worst-case rounding error. Sums of |x| near the type's maximum overflow (MariaDB then
        # reports 0, Spark inf): the bound is then infinite and only the count compares.
        scale = max(abs(float(scale_a or 0)), abs(float(scale_b or 0)))
        if count_a and abs(float(sum_a) - float(sum_b)) > 2 * count_a * _EPSILON * scale:
            return False
    return True
