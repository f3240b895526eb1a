"""Row-by-row comparison of silver with the source, for `cdc-sql verify`, the demo and tests.

The expected rows are computed by the source database itself: the projection is transpiled to
MySQL and run there, so neither side is checked against code it shares with the pipeline, except
the per-type normal form (values.normalize) that defines what a value means (DESIGN section 4).
This reads whole tables; per-split checksums for large tables are the next step (issue 7).
"""
from __future__ import annotations

import datetime as dt
import decimal
import struct

from sqlglot import exp

from cdc_sql.config.model import Pipeline, Table
from cdc_sql.config.projection import parse_projection
from cdc_sql.lake.silver import plan_silver, silver_path
from cdc_sql.source import mysql
from cdc_sql.source.schema import read_tables
from cdc_sql.source.values import normalize

MAX_SHOWN = 5


def compare_table(engine, pipeline: Pipeline, table: Table) -> str:
    """'' when silver equals the source after projection; else a short description."""
    with mysql.cursor(pipeline.source) as cur:
        sources = read_tables(cur, table)
        plan = plan_silver(table, sources, pipeline.file, pipeline.tables.index(table))
        expected = []
        for source in sources:
            sql, columns = _source_query(table, source)
            cur.execute(sql)
            for row in cur.fetchall():
                values = [normalize(c, v) if c is not None else v for c, v in zip(columns, row)]
                expected.append(values + ([source.qualified] if plan.sharded else []))
    names = [name for _, name in plan.projection.columns] + (
        ["_cdc_source_table"] if plan.sharded else [])
    silver = engine.read(silver_path(str(pipeline.root), table.name)).select(*names)
    float_columns = {f.name for f in silver.schema.fields if f.dataType.typeName() == "float"}
    silver_rows = [[row[n] for n in names] for row in silver.toArrow().to_pylist()]
    return _diff(names, expected, silver_rows, float_columns, plan.key)


def _source_query(table: Table, source) -> tuple[str, list]:
    """The projection as MySQL over `db.table`, and the source column of each bare output."""
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
    tree.set("expressions", items)
    for column in tree.find_all(exp.Column):
        column.set("table", None)
    return tree.sql(dialect="mysql"), columns


def _canon(value, is_float: bool):
    if isinstance(value, decimal.Decimal):
        return format(value.normalize(), "f")
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
