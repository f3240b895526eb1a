"""Silver against the source, for `cdc-sql verify`, the demo and the tests.

The expected rows are computed by the source database itself: the projection is transpiled to
MySQL and run there, so neither side is checked against code it shares with the pipeline, except
the per-type normal form (values.normalize) that defines what a value means (docs/types.md).

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

from cdc_sql.ops.checksum import (FLOAT32_EPSILON, Buckets, Output, mysql_float, mysql_summary,
                              mysql_text, same, spark_float, spark_summary, spark_text)
from cdc_sql.config.model import Pipeline, Table
from cdc_sql.config.projection import parse_projection, star_columns
from cdc_sql.lake import semantics
from cdc_sql.lake.lake import Lake
from cdc_sql.lake.silver.plan import SilverPlan, plan_silver, without_new_columns
from cdc_sql.source import mysql
from cdc_sql.errors import CdcError
from cdc_sql.source.schema import Column, SourceTable, read_tables
from cdc_sql.source.values import normalize
from cdc_sql.lake.tables import table_ref
from cdc_sql.ops.history_check import history_differences

MAX_SHOWN = 5
MAX_REPAIR_KEYS = 10_000  # verify --repair reads at most these many keys again by name
_STRING_KEYS = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set"}
_REPAIRABLE = {"tinyint", "smallint", "mediumint", "int", "bigint", "decimal", *_STRING_KEYS}


@dataclass
class TableReport:
    name: str
    buckets: int = 0
    source_rows: int = 0
    silver_rows: int = 0
    differing: list[str] = field(default_factory=list)   # e.g. "shop.orders split 3"
    details: list[str] = field(default_factory=list)     # the differing keys, per bucket
    soft_deleted: int = 0   # silver rows flagged deleted (deletes: soft), not compared
    kept: int = 0           # silver rows whose source row is gone, kept on purpose (skip)
    # with `keys`: per source table, the keys that differ (missing, extra or changed), as
    # the canonical texts of their key columns (`verify --repair` reads them again)
    keys: dict[str, list[tuple]] = field(default_factory=dict)

    @property
    def equal(self) -> bool:
        return not self.differing

    def summary(self) -> str:
        if self.equal:
            return (f"equal to the source ({self.source_rows:,} rows in {self.buckets} "
                    f"checksummed buckets){self._beside()}")
        return (f"{len(self.differing)} of {self.buckets} buckets differ "
                f"({self.source_rows:,} source rows, {self.silver_rows:,} silver rows"
                f"{self._beside()}): " + " | ".join(self.details))

    def _beside(self) -> str:
        """The rows silver holds on purpose beside the source's (lake/semantics.py)."""
        parts = [f"{self.soft_deleted:,} soft-deleted rows"] if self.soft_deleted else []
        if self.kept:
            parts.append(f"{self.kept:,} rows kept on purpose (skip: the source removed them)")
        return "; " + ", ".join(parts) if parts else ""


def verify_table(engine, pipeline: Pipeline, table: Table, checkpoint,
                 keys: bool = False) -> TableReport:
    """Checksums per bucket on both sides; row-by-row diffs only for differing buckets (all
    of them with `keys`, whose differing keys the report then holds)."""
    report = TableReport(table.name)
    lake = Lake.open(engine, pipeline.root)
    if not lake.tables.exists(lake.silver_path(table.name)):
        report.differing.append("silver")
        report.details.append("there is no silver table yet: run the pipeline first")
        return report
    silver = engine.read(lake.silver_path(table.name))
    types = {f.name: f.dataType.simpleString() for f in silver.schema.fields}
    with _source(pipeline) as cur:
        sources = read_tables(cur, [table])[0]
        plan = plan_silver(table, sources, pipeline.file, pipeline.tables.index(table))
        for source in sources:
            _verify_source(lake, pipeline, plan, source, types, checkpoint, cur, report, keys)
    history = history_differences(lake, plan, types)
    if history is not None:
        report.differing.append(f"{table.name}_history")
        report.details.append(history)
    return report


def _verify_source(lake: Lake, pipeline, plan: SilverPlan, source: SourceTable, types: dict,
                   checkpoint, cur, report: TableReport, keys: bool = False) -> None:
    engine = lake.engine
    names = [name for _, name in plan.projection.columns]
    rows_sql, columns = _source_query(plan.spec, source, names)
    outputs = [Output(n, types[n], c) for n, c in zip(names, columns)]
    by_name = {o.name: o for o in outputs}
    cur.execute("SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND "
                "TABLE_NAME = %s", (source.db, source.name))
    estimate = int((cur.fetchone() or [0])[0] or 0)
    buckets = Buckets.choose([by_name[k] for k in plan.projection.key],
                             [s for s in checkpoint.splits(source.qualified)
                              if not s.predicate], estimate,  # key ranges, not re-reads
                             pipeline.source.chunk_size or 100_000)
    escape = cur.connection.escape
    cur.execute(mysql_summary(rows_sql, outputs, buckets, escape))
    expected = {row[0]: tuple(row[1:]) for row in cur.fetchall()}
    silver_sql = _silver_rows_sql(lake, plan, types)
    if semantics.DELETED in types:
        report.soft_deleted += engine.sql(
            f"SELECT COUNT(*) FROM ({_silver_rows_sql(lake, plan)}) AS cdc_rows "
            f"WHERE NOT ({semantics.live(types)})",
            {"source_table": source.qualified}).collect()[0][0]
    sql, args = spark_summary(silver_sql, outputs, buckets)
    args["source_table"] = source.qualified
    actual = {row[0]: tuple(row[1:]) for row in engine.sql(sql, args).collect()}
    report.buckets += buckets.total
    report.source_rows += sum(v[0] for v in expected.values())
    report.silver_rows += sum(v[0] for v in actual.values())
    empty = (0, 0) + (0, 0, 0) * sum(o.is_float for o in outputs)
    for bucket in sorted(set(expected) | set(actual)):
        if same(expected.get(bucket, empty), actual.get(bucket, empty)):
            continue
        label = f"{source.qualified} {buckets.label} {bucket}"
        keeps = semantics.keeps_rows(plan.spec)
        if not keeps and not keys and len(report.details) >= MAX_SHOWN:  # enough shown
            report.differing.append(label)
            continue
        want, have, describe, differing = _bucket_rows(engine, plan, outputs, buckets, bucket,
                                                       rows_sql, silver_sql, source.qualified,
                                                       cur)
        if keeps:  # rows whose source row is gone: kept on purpose (skip)
            report.kept += sum(len(rows) for k, rows in have.items() if k not in want)
            have = {k: rows for k, rows in have.items() if k in want}
            if describe(want, have) is None:
                continue
        report.differing.append(label)
        if keys:
            report.keys.setdefault(source.qualified, []).extend(
                k for found in differing(want, have) for k in found)
        if len(report.details) < MAX_SHOWN:
            report.details.append(f"{label}: " + (describe(want, have) or (
                "the checksums differ, but every row reads back equal (report this as a bug)")))


def _source(pipeline):
    """The source as verify reads it: read-only, each statement with a time limit."""
    return mysql.read_only_cursor(pipeline.source, pipeline.source.verify_timeout_seconds)


def _silver_rows_sql(lake: Lake, plan: SilverPlan, columns=()) -> str:
    """Silver's rows; of one shard (`:source_table`) when sharded; only the live ones when
    `columns` (silver's) hold soft deletes' flag."""
    ref = table_ref(lake.silver_path(plan.spec.name))
    where = [semantics.live(columns)] if semantics.DELETED in columns else []
    where += ["_cdc_source_table = :source_table"] if plan.sharded else []
    return f"SELECT * FROM {ref}" + (f" WHERE {' AND '.join(where)}" if where else "")


def _bucket_rows(engine, plan, outputs: list[Output], buckets: Buckets, bucket: int,
                 rows_sql: str, silver_sql: str, source: str, cur):
    """The rows of one differing bucket by key on each side, by the same canonical texts the
    checksums hash, and how to describe their differences (floats by value, within their
    rounding): missing, extra and changed keys, with the column and each side's value (None
    when there are none)."""
    key = [o for o in outputs if o.name in plan.projection.key]
    texts = [o for o in outputs if not o.is_float]
    floats = [o for o in outputs if o.is_float]
    cur.execute(f"SELECT {', '.join(mysql_text(o) for o in [*key, *texts])}"
                f"{''.join(', ' + mysql_float(o) for o in floats)} FROM ({rows_sql}) AS cdc_rows "
                f"WHERE {buckets.mysql(cur.connection.escape)} = {int(bucket)}")
    want = _by_key(cur.fetchall(), len(key))
    condition, args = buckets.spark()
    rows = engine.sql(
        f"SELECT {', '.join(spark_text(o) for o in [*key, *texts])}"
        f"{''.join(', ' + spark_float(o) for o in floats)} FROM ({silver_sql}) AS cdc_rows "
        f"WHERE {condition} = {int(bucket)}", {**args, "source_table": source}).collect()
    have = _by_key([tuple(r) for r in rows], len(key))
    names = [o.name for o in texts] + [o.name for o in floats]
    float_types = {o.name: o.spark_type for o in floats}
    return want, have, lambda want, have: describe_rows(
        want, have, [o.name for o in key], names, float_types), \
        lambda want, have: differing_keys(want, have, names, float_types)


def _by_key(rows, width: int) -> dict[tuple, list[tuple]]:
    found: dict[tuple, list[tuple]] = {}
    for row in rows:
        found.setdefault(tuple(row[:width]), []).append(tuple(row[width:]))
    return found


def describe_rows(want: dict, have: dict, key: list[str], names: list[str],
                  float_types: dict[str, str]) -> str | None:
    """Missing, extra and changed keys of one bucket, each side's value on its own side (None:
    the rows are equal)."""
    missing, extra, changed = differing_keys(want, have, names, float_types)
    if not (missing or extra or changed):
        return None
    shown = lambda keys: ", ".join(_key_text(k) for k in keys[:MAX_SHOWN]) + (  # noqa: E731
        " ..." if len(keys) > MAX_SHOWN else "")
    parts = [f"{sum(map(len, want.values()))} source rows, {sum(map(len, have.values()))} "
             f"silver rows"]
    for label, keys in (("missing in silver", missing), ("not in the source", extra),
                        ("different", changed)):
        if keys:
            parts.append(f"{len(keys)} {label} (key {', '.join(key)}: {shown(keys)})")
    if changed:
        k = changed[0]
        pairs = zip(sorted(want[k], key=repr), sorted(have[k], key=repr))
        found = next(filter(None, (_first_difference(a, b, names, float_types)
                                   for a, b in pairs)), None)
        if found is None:
            parts.append(f"e.g. key {_key_text(k)}: {len(want[k])} source rows, "
                         f"{len(have[k])} silver rows")
        else:
            column, source_value, silver_value = found
            parts.append(f"e.g. key {_key_text(k)}, column {column}: source "
                         f"{source_value!r}, silver {silver_value!r}")
    return "; ".join(parts)


def differing_keys(want: dict, have: dict, names: list[str], float_types: dict[str, str]
                   ) -> tuple[list, list, list]:
    """The keys missing in silver, not in the source, and different."""
    missing = [k for k in want if k not in have]
    extra = [k for k in have if k not in want]
    changed = [k for k in want
               if k in have and not _same_rows(want[k], have[k], names, float_types)]
    return missing, extra, changed


def repair_predicate(keys: list[tuple], columns: list[Column]) -> str:
    """A MySQL predicate selecting exactly `keys` (canonical key texts, as verify reads them)
    of a key of `columns`: `k IN (...)`, or ORs of ANDs for a composite key. Only integer,
    decimal and string key columns, whose canonical text is their value."""
    for column in columns:
        if column.data_type not in _REPAIRABLE:
            raise CdcError(f"verify --repair: key column `{column.name}` is "
                           f"{column.data_type}: re-snapshot the table whole")

    def literal(column: Column, text: str) -> exp.Expression:
        if text is None:
            return exp.Null()
        return exp.Literal.string(text) if column.data_type in _STRING_KEYS else \
            exp.Literal.number(text)

    names = [exp.column(c.name) for c in columns]
    unique = sorted(set(keys), key=repr)
    if len(columns) == 1:
        tree = exp.In(this=names[0], expressions=[literal(columns[0], k[0]) for k in unique])
    else:
        tree = exp.or_(*(exp.and_(*(exp.EQ(this=n.copy(), expression=literal(c, v))
                                    for n, c, v in zip(names, columns, k))) for k in unique))
    return tree.sql(dialect="mysql")


def _key_text(key: tuple) -> str:
    return "(" + ", ".join("NULL" if v is None else str(v) for v in key) + ")" if len(key) > 1 \
        else ("NULL" if key[0] is None else str(key[0]))


def _same_rows(a: list, b: list, names, float_types) -> bool:
    if len(a) != len(b):
        return False
    return all(_first_difference(x, y, names, float_types) is None for x, y in
               zip(sorted(a, key=repr), sorted(b, key=repr)))


def _first_difference(a: tuple, b: tuple, names, float_types):
    for name, x, y in zip(names, a, b):
        if name in float_types:
            if x is None or y is None:
                if (x is None) != (y is None):
                    return name, x, y
                continue
            tolerance = FLOAT32_EPSILON if float_types[name] == "float" else 2.0 ** -52
            if abs(float(x) - float(y)) > 2 * tolerance * max(abs(float(x)), abs(float(y))):
                return name, x, y
        elif x != y:
            return name, x, y
    return None


def compare_table(engine, pipeline: Pipeline, table: Table) -> str:
    """'' when silver equals the source after projection; else a short description."""
    lake = Lake.open(engine, pipeline.root)
    path = lake.silver_path(table.name)
    with _source(pipeline) as cur:
        sources = read_tables(cur, [table])[0]
        plan = without_new_columns(
            plan_silver(table, sources, pipeline.file, pipeline.tables.index(table)),
            set(lake.tables.schema(path).names) if lake.tables.exists(path) else None)
        expected = []
        for source in sources:
            sql, columns = _source_query(table, source, [n for _, n in plan.projection.columns])
            cur.execute(sql)
            for row in cur.fetchall():
                values = [normalize(c, v) if c is not None else v for c, v in zip(columns, row)]
                expected.append(values + ([source.qualified] if plan.sharded else []))
    names = [name for _, name in plan.projection.columns] + (
        ["_cdc_source_table"] if plan.sharded else [])
    silver = engine.read(path)
    silver = silver.where(semantics.live(silver.columns)).select(*names)
    float_columns = {f.name for f in silver.schema.fields if f.dataType.typeName() == "float"}
    silver_rows = [[row[n] for n in names] for row in silver.toArrow().to_pylist()]
    return _diff(names, expected, silver_rows, float_columns, plan.row_key)


def _source_query(table: Table, source, names: list[str]) -> tuple[str, list]:
    """The projection as MySQL over `db.table`, each output named as in silver, and the source
    column of each bare output."""
    tree = parse_projection(table.projection or "SELECT * FROM t", None).copy()
    key = list(source.key)
    tree.set("from_", exp.From(this=exp.table_(source.name, db=source.db, quoted=True)))
    items, columns = [], []
    by_lower = {c.name.lower(): c for c in source.columns}
    for item in tree.expressions:
        if isinstance(item, exp.Star):
            kept = star_columns(table, item, [c.name for c in source.columns], key)
            chosen = [c for c in source.columns if c.name in kept]
            items += [_exact(exp.column(c.name, quoted=True), c) for c in chosen]
            columns += chosen
            continue
        inner = item.this if isinstance(item, exp.Alias) else item
        column = by_lower.get(inner.name.lower()) if isinstance(inner, exp.Column) else None
        items.append(_exact(inner, column) if column is not None else item)
        columns.append(column)
    tree.set("expressions", [exp.alias_(item.this if isinstance(item, exp.Alias) else item,
                                        name, quoted=True) for item, name in zip(items, names)])
    for column in tree.find_all(exp.Column):
        column.set("table", None)
    return tree.sql(dialect="mysql"), columns


def _exact(node: exp.Expression, column) -> exp.Expression:
    """A FLOAT column as the DOUBLE it widens to: the text protocol would print six digits."""
    return exp.cast(node, "DOUBLE") if column.data_type == "float" else node


def _canon(value, is_float: bool):
    if isinstance(value, decimal.Decimal):  # BIGINT UNSIGNED: int from MySQL, DECIMAL in silver
        return int(value) if value == value.to_integral_value() else format(value.normalize(), "f")
    if isinstance(value, float) and is_float:
        return struct.unpack("f", struct.pack("f", value))[0]
    if isinstance(value, float) and value.is_integer():  # a computed 144.0 against 144
        return int(value)
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return value


def _diff(names, expected, actual, float_columns, key) -> str:
    """'' when equal; else the missing, extra and changed keys, and the first differing column
    of a changed one with each side's value."""
    positions = [names.index(k) for k in key]

    def index(rows):
        out = {}
        for row in rows:
            canon = tuple(_canon(v, n in float_columns) for n, v in zip(names, row))
            out.setdefault(tuple(canon[p] for p in positions), []).append(canon)
        return {k: sorted(v, key=repr) for k, v in out.items()}

    want, have = index(expected), index(actual)
    if want == have:
        return ""
    values = [n for n in names if n not in key]
    width = len(values)
    strip = lambda rows: [tuple(v for n, v in zip(names, r) if n not in key)  # noqa: E731
                          for r in rows]
    return describe_rows({k: strip(v) for k, v in want.items()},
                         {k: strip(v) for k, v in have.items()}, list(key), values,
                         {n: "double" for n in values if n in float_columns} if width else {}) \
        or ""
