"""Silver against the source, for `cdc-sql verify`, the demo and the tests.

The expected rows are computed by the source database itself: the projection is transpiled to
MySQL and run there, so neither side is checked against code it shares with the pipeline, except
the per-type normal form (values.normalize) that defines what a value means (DESIGN section 4).

`verify_table` compares checksums first: per snapshot split (single integer keys) or per key-hash
bucket (other keys, where MySQL collations and Spark order strings differently), each side
computes a row count and an order-independent sum of per-row MD5s of a canonical text of the
projected row, in MySQL SQL and in Spark SQL (checksum.py). Only buckets whose checksums differ
are read row by row, to name the differing keys. `compare_table` reads whole tables (tests).
"""
from __future__ import annotations

import datetime as dt
import decimal
import struct

from sqlglot import exp

from dataclasses import dataclass, field

from cdc_sql.checksum import Buckets, Output, mysql_summary, same, spark_summary
from cdc_sql.config.model import Pipeline, Table
from cdc_sql.config.projection import parse_projection
from cdc_sql.lake.lake import Lake
from cdc_sql.lake.silver import SilverPlan, plan_silver
from cdc_sql.source import mysql
from cdc_sql.source.schema import SourceTable, read_tables
from cdc_sql.source.values import normalize
from cdc_sql.lake.tables import table_ref

MAX_SHOWN = 5


@dataclass
class TableReport:
    name: str
    buckets: int = 0
    source_rows: int = 0
    silver_rows: int = 0
    differing: list[str] = field(default_factory=list)   # e.g. "shop.orders split 3"
    details: list[str] = field(default_factory=list)     # the differing keys, per bucket

    @property
    def equal(self) -> bool:
        return not self.differing

    def summary(self) -> str:
        if self.equal:
            return (f"equal to the source ({self.source_rows:,} rows in {self.buckets} "
                    f"checksummed buckets)")
        return (f"{len(self.differing)} of {self.buckets} buckets differ "
                f"({self.source_rows:,} source rows, {self.silver_rows:,} silver rows): " +
                " | ".join(self.details))


def verify_table(engine, pipeline: Pipeline, table: Table, checkpoint) -> TableReport:
    """Checksums per bucket on both sides; row-by-row diffs only for differing buckets."""
    report = TableReport(table.name)
    lake = Lake.open(engine, str(pipeline.root))
    if not lake.tables.exists(lake.silver_path(table.name)):
        report.differing.append("silver")
        report.details.append("there is no silver table yet: run the pipeline first")
        return report
    silver = engine.read(lake.silver_path(table.name))
    types = {f.name: f.dataType.simpleString() for f in silver.schema.fields}
    with mysql.cursor(pipeline.source) as cur:
        sources = read_tables(cur, table)
        plan = plan_silver(table, sources, pipeline.file, pipeline.tables.index(table))
        for source in sources:
            _verify_source(lake, pipeline, plan, source, types, checkpoint, cur, report)
    return report


def _verify_source(lake, pipeline, plan: SilverPlan, source: SourceTable, types: dict,
                   checkpoint, cur, report: TableReport) -> None:
    engine = lake.engine
    names = [name for _, name in plan.projection.columns]
    rows_sql, columns = _source_query(plan.spec, source, names)
    outputs = [Output(n, types[n], c) for n, c in zip(names, columns)]
    by_name = {o.name: o for o in outputs}
    cur.execute("SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND "
                "TABLE_NAME = %s", (source.db, source.name))
    estimate = int((cur.fetchone() or [0])[0] or 0)
    buckets = Buckets.choose([by_name[k] for k in plan.projection.key],
                             checkpoint.splits(source.qualified), estimate,
                             pipeline.source.chunk_size)
    escape = cur.connection.escape
    cur.execute(mysql_summary(rows_sql, outputs, buckets, escape))
    expected = {row[0]: tuple(row[1:]) for row in cur.fetchall()}
    silver_sql = _silver_rows_sql(lake, plan)
    sql, args = spark_summary(silver_sql, outputs, buckets)
    args["source_table"] = source.qualified
    actual = {row[0]: tuple(row[1:]) for row in engine.spark.sql(sql, args=args).collect()}
    report.buckets += buckets.total
    report.source_rows += sum(v[0] for v in expected.values())
    report.silver_rows += sum(v[0] for v in actual.values())
    empty = (0, 0) + (0, 0, 0) * sum(o.is_float for o in outputs)
    for bucket in sorted(set(expected) | set(actual)):
        if same(expected.get(bucket, empty), actual.get(bucket, empty)):
            continue
        label = f"{source.qualified} {buckets.label} {bucket}"
        report.differing.append(label)
        if len(report.details) < MAX_SHOWN:
            report.details.append(f"{label}: " + _bucket_diff(
                engine, plan, names, columns, buckets, bucket, rows_sql, silver_sql,
                source.qualified, cur))


def _silver_rows_sql(lake, plan: SilverPlan) -> str:
    """Silver's rows; of one shard (`:source_table`) when sharded."""
    ref = table_ref(lake.silver_path(plan.spec.name))
    return f"SELECT * FROM {ref}" + (" WHERE _cdc_source_table = :source_table"
                                     if plan.sharded else "")


def _bucket_diff(engine, plan, names, columns, buckets: Buckets, bucket: int, rows_sql: str,
                 silver_sql: str, source: str, cur) -> str:
    cur.execute(f"SELECT * FROM ({rows_sql}) AS cdc_rows WHERE "
                f"{buckets.mysql(cur.connection.escape)} = {int(bucket)}")
    expected = [[normalize(c, v) if c is not None else v for c, v in zip(columns, row)]
                for row in cur.fetchall()]
    condition, args = buckets.spark()
    silver = engine.spark.sql(f"SELECT * FROM ({silver_sql}) AS cdc_rows WHERE {condition} = "
                              f"{int(bucket)}", args={**args, "source_table": source})
    actual = [[row[n] for n in names] for row in silver.select(*names).toArrow().to_pylist()]
    floats = {f.name for f in silver.schema.fields if f.dataType.typeName() == "float"}
    return _diff(names, expected, actual, floats, plan.projection.key)


def compare_table(engine, pipeline: Pipeline, table: Table) -> str:
    """'' when silver equals the source after projection; else a short description."""
    with mysql.cursor(pipeline.source) as cur:
        sources = read_tables(cur, table)
        plan = plan_silver(table, sources, pipeline.file, pipeline.tables.index(table))
        expected = []
        for source in sources:
            sql, columns = _source_query(table, source, [n for _, n in plan.projection.columns])
            cur.execute(sql)
            for row in cur.fetchall():
                values = [normalize(c, v) if c is not None else v for c, v in zip(columns, row)]
                expected.append(values + ([source.qualified] if plan.sharded else []))
    names = [name for _, name in plan.projection.columns] + (
        ["_cdc_source_table"] if plan.sharded else [])
    lake = Lake.open(engine, str(pipeline.root))
    silver = engine.read(lake.silver_path(table.name)).select(*names)
    float_columns = {f.name for f in silver.schema.fields if f.dataType.typeName() == "float"}
    silver_rows = [[row[n] for n in names] for row in silver.toArrow().to_pylist()]
    return _diff(names, expected, silver_rows, float_columns, plan.row_key)


def _source_query(table: Table, source, names: list[str]) -> tuple[str, list]:
    """The projection as MySQL over `db.table`, each output named as in silver, and the source
    column of each bare output."""
    tree = parse_projection(table.projection or "SELECT * FROM t", None).copy()
    tree.set("from_", exp.From(this=exp.table_(source.name, db=source.db, quoted=True)))
    items, columns = [], []
    by_lower = {c.name.lower(): c for c in source.columns}
    for item in tree.expressions:
        if isinstance(item, exp.Star):
            items += [exp.column(c.name, quoted=True) for c in source.columns]
            columns += list(source.columns)
            continue
        inner = item.this if isinstance(item, exp.Alias) else item
        items.append(item)
        columns.append(by_lower.get(inner.name.lower()) if isinstance(inner, exp.Column) else None)
    tree.set("expressions", [exp.alias_(item.this if isinstance(item, exp.Alias) else item,
                                        name, quoted=True) for item, name in zip(items, names)])
    for column in tree.find_all(exp.Column):
        column.set("table", None)
    return tree.sql(dialect="mysql"), columns


def _canon(value, is_float: bool):
    if isinstance(value, decimal.Decimal):  # BIGINT UNSIGNED: int from MySQL, DECIMAL in silver
        return int(value) if value == value.to_integral_value() else format(value.normalize(), "f")
    if isinstance(value, float) and is_float:
        return struct.unpack("f", struct.pack("f", value))[0]
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return value


def _diff(names, expected, actual, float_columns, key) -> str:
    positions = [names.index(k) for k in key]

    def index(rows):
        out = {}
        for row in rows:
            canon = tuple(_canon(v, n in float_columns) for n, v in zip(names, row))
            out.setdefault(tuple(canon[p] for p in positions), []).append(canon)
        return out

    want, have = index(expected), index(actual)
    missing = [k for k in want if k not in have]
    extra = [k for k in have if k not in want]
    changed = [k for k in want if k in have and sorted(map(repr, want[k])) != sorted(map(repr, have[k]))]
    if not (missing or extra or changed):
        return ""
    parts = [f"{len(want)} source rows, {sum(map(len, have.values()))} silver rows"]
    for label, keys in (("missing in silver", missing), ("not in source", extra),
                        ("different", changed)):
        if keys:
            shown = ", ".join(map(str, keys[:MAX_SHOWN])) + (" ..." if len(keys) > MAX_SHOWN else "")
            parts.append(f"{len(keys)} {label} (key {', '.join(key)}: {shown})")
    if changed:
        k = changed[0]
        parts.append(f"e.g. source {want[k][0]} vs silver {have[k][0]}")
    return "; ".join(parts)
