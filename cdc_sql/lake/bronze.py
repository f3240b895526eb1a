"""Bronze: what arrived, append-only (docs/architecture.md, "Bronze").

- `bronze/_snapshot/<db>.<table>`: split rows in the source's columns (contract types) plus
  `_cdc_split_id`, `_cdc_attempt`, `_cdc_watermark` (offset text) and `_cdc_read_at`. Silver
  reads only the attempt that state marks done; rows of abandoned attempts are deleted before a
  split is read again, so a retried split never counts twice.
- `bronze/_changes/<db>.<table>`: one row per row change, typed like the snapshot rows (the
  image silver needs: the after-image, the before-image of a delete), with `_cdc_offset`,
  `_cdc_op`, `_cdc_ts`, `_cdc_gtid`. Columns are added as the source gains them (a mergeSchema
  append) and widened with it; a column dropped in the source stays, NULL from then on.
- `bronze/_binlog`: the DDL and TRUNCATE statements of the captured tables, by offset, and a
  mark (`no_fk_checks`) for each delete or update rows event written with foreign_key_checks=0.

Capture writes each batch as one commit per table it touched, then records its position in
state. Rows beyond the recorded position are invisible to silver (its windows end there); a run
that died in between finds them again through the tables state says were being written
(`CaptureEntry.landing`), and does not write them twice (`landed_after`). pyspark is imported
only where a column is widened: snapshot tasks append to bronze without a session.
"""
from __future__ import annotations

import datetime as dt
from typing import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from cdc_sql.errors import SourceError
from cdc_sql.lake.lake import Lake
from cdc_sql.lake.tables import LOG_TABLE, table_ref
from cdc_sql.source.binlog_rows import CapturedStatement
from cdc_sql.source.offsets import Offset
from cdc_sql.source.rows import META_COLUMNS
from cdc_sql.source.schema import SourceTable

STATEMENTS = ("", "")  # the pseudo source table of `_binlog` in `landing` lists
# bronze/_binlog: the statements the binlog reader hands over (binlog_rows.Batch.statements)
STATEMENTS_SCHEMA = pa.schema([
    ("offset", pa.string()), ("db", pa.string()), ("tbl", pa.string()), ("op", pa.string()),
    ("statement", pa.string()), ("commit_ts", pa.timestamp("us", tz="UTC")),
    ("gtid", pa.string()),
])
_WIDENS = {pa.int8(): 0, pa.int16(): 1, pa.int32(): 2, pa.int64(): 3}


def snapshot_schema(table: SourceTable) -> pa.Schema:
    return table.arrow_schema.append(pa.field("_cdc_split_id", pa.int32())) \
        .append(pa.field("_cdc_attempt", pa.string())) \
        .append(pa.field("_cdc_watermark", pa.string())) \
        .append(pa.field("_cdc_read_at", pa.timestamp("us", tz="UTC")))


def changes_schema(table: SourceTable) -> pa.Schema:
    schema = table.arrow_schema
    for name, type_ in META_COLUMNS:
        schema = schema.append(pa.field(name, type_))
    return schema


# -- snapshot splits -----------------------------------------------------------------------------
def write_splits(lake: Lake, table: SourceTable, batches: Iterable[pa.RecordBatch], attempt: str,
                 watermark: str, read_at: dt.datetime,
                 on_batch=lambda rows: None, create: bool = False) -> dict[int, int]:
    """Stream the rows of consecutive splits (each row tagged with its split) into bronze in one
    commit, tagged with the attempt and the watermark they share; `on_batch(rows)` follows
    progress; `create`: the commit creates the snapshot table (splits.creating_groups).
    Returns the rows written per split."""
    written: dict[int, int] = {}

    def counted() -> Iterator[pa.RecordBatch]:
        for batch in tag_split_rows(table, batches, attempt, watermark, read_at):
            yield batch
            counts = pc.value_counts(batch.column("_cdc_split_id")).to_pylist()
            for count in counts:
                written[count["values"]] = written.get(count["values"], 0) + count["counts"]
            on_batch(batch.num_rows)

    path, schema = lake.snapshot_path(table.db, table.name), snapshot_schema(table)
    if create:
        lake.tables.create_from_streams(path, schema, [counted], LOG_TABLE)
    else:
        lake.tables.append_arrow(path, counted(), schema)
    return written


def tag_split_rows(table: SourceTable, batches: Iterable[pa.RecordBatch], attempt: str,
                   watermark: str, read_at: dt.datetime) -> Iterator[pa.RecordBatch]:
    """Rows of a read (with their split) and the bronze tags: attempt, watermark, read time."""
    schema = snapshot_schema(table)
    tags = [pa.scalar(attempt), pa.scalar(watermark),
            pa.scalar(read_at, pa.timestamp("us", tz="UTC"))]
    for batch in batches:
        columns = [*batch.columns, *(pa.repeat(tag, batch.num_rows) for tag in tags)]
        yield pa.RecordBatch.from_arrays(columns, schema=schema)


def ensure_snapshot_table(lake: Lake, table: SourceTable) -> None:
    """The source table's snapshot table, created empty if it is not there."""
    lake.tables.create_arrow_table(lake.snapshot_path(table.db, table.name),
                                          snapshot_schema(table), LOG_TABLE)


def reset(lake: Lake, table: SourceTable) -> None:
    """Empty a source table's snapshot and changes tables, in the source's current columns, for
    a re-snapshot: the new splits and the changes after them are all silver will read (a type
    the old rows could not share a column with is then no obstacle)."""
    lake.tables.reset(lake.snapshot_path(table.db, table.name), snapshot_schema(table))
    lake.tables.reset(lake.changes_path(table.db, table.name), changes_schema(table))


def drop_unfinished(lake: Lake, table: SourceTable, split_ids: Iterable[int]) -> None:
    """Delete rows that earlier, unfinished attempts left for these splits."""
    ids = sorted(set(split_ids))
    path = lake.snapshot_path(table.db, table.name)
    if ids and lake.tables.exists(path):
        lake.tables.delete_rows(path, [("_cdc_split_id", "IN", [int(i) for i in ids])])


# -- binlog changes ------------------------------------------------------------------------------
def ensure_changes_table(lake: Lake, table: SourceTable) -> None:
    lake.tables.create_arrow_table(lake.changes_path(table.db, table.name),
                                   changes_schema(table), LOG_TABLE)


def ensure_statements_table(lake: Lake) -> None:
    lake.tables.create_arrow_table(lake.statements_path, STATEMENTS_SCHEMA, LOG_TABLE)


def append_changes(lake: Lake, table: SourceTable, batches: list[pa.RecordBatch]) -> None:
    """One commit of a table's change rows; the table's columns follow the batches' (a column
    the source added is added, a narrower one is cast up, a widened one widens bronze first)."""
    path = lake.changes_path(table.db, table.name)
    exists = lake.tables.exists(path)
    with lake.tables.pinned():  # capture alone writes it: one look at its log, not two
        current = lake.tables.schema(path) if exists else changes_schema(table)
        target = _merged_schema(current, [b.schema for b in batches], table)
        if target == current and exists:
            lake.tables.append_arrow(path, [_conform(b, target) for b in batches], target)
            return
    if exists:  # the columns change
        widened = {f.name: f.type for f in target if f.name in current.names and
                   current.field(f.name).type != f.type}
        if widened:
            _engine_started(lake)
            from pyspark.sql.pandas.types import from_arrow_type

            lake.tables.reshape(path, {n: from_arrow_type(t) for n, t in widened.items()}, [])
    lake.tables.append_arrow(path, [_conform(b, target) for b in batches], target,
                             schema_mode="merge")


def _engine_started(lake: Lake) -> None:
    """Waits for an engine that is starting on its own thread (importing pyspark) before this
    thread imports pyspark too: two threads importing it at once can meet a half-imported
    module ("partially initialized module ... circular import")."""
    engine = getattr(lake, "engine", None)
    if engine is not None and getattr(engine, "session", None) is not None:
        engine.spark  # noqa: B018 - the wait


def append_statements(lake: Lake, statements: list[CapturedStatement]) -> None:
    """The statements of the captured tables (redacted by the binlog reader)."""
    if statements:
        rows = pa.Table.from_pylist([vars(s) for s in statements], STATEMENTS_SCHEMA)
        lake.tables.append_arrow(lake.statements_path, rows.to_batches(), STATEMENTS_SCHEMA)


def _merged_schema(current: pa.Schema, incoming: list[pa.Schema], table) -> pa.Schema:
    fields = {f.name: f for f in current}
    order = list(current.names)
    for schema in incoming:
        for f in schema:
            if f.name not in fields:
                fields[f.name] = f
                order.insert(len(order) - len(META_COLUMNS), f.name) \
                    if all(n in order for n, _ in META_COLUMNS) else order.append(f.name)
            elif fields[f.name].type != f.type:
                fields[f.name] = pa.field(f.name, _wider(fields[f.name].type, f.type,
                                                         table.qualified, f.name))
    return pa.schema([fields[n] for n in order])


def cannot_hold(lake: Lake, table: SourceTable) -> str:
    """Why bronze's changes table cannot take the table's rows as now defined (a column whose
    type is no widening of the one bronze holds), or "" when it can."""
    path = lake.changes_path(table.db, table.name)
    if not lake.tables.exists(path):
        return ""
    current = lake.tables.schema(path)
    for f in changes_schema(table):
        if f.name in current.names and current.field(f.name).type != f.type:
            try:
                _wider(current.field(f.name).type, f.type, table.qualified, f.name)
            except SourceError:
                return f"column `{f.name}` changed type from {current.field(f.name).type} to " \
                       f"{f.type}"
    return ""


def _wider(old: pa.DataType, new: pa.DataType, table: str, column: str) -> pa.DataType:
    """The type holding every value of both, where one widens to the other."""
    if old in _WIDENS and new in _WIDENS:
        return old if _WIDENS[old] >= _WIDENS[new] else new
    if pa.types.is_decimal(old) and pa.types.is_decimal(new):
        scale = max(old.scale, new.scale)
        digits = max(old.precision - old.scale, new.precision - new.scale)
        if digits + scale <= 38:
            return pa.decimal128(digits + scale, scale)
    if {old, new} == {pa.float32(), pa.float64()}:
        return pa.float64()
    if old in _WIDENS and pa.types.is_decimal(new) and new.precision - new.scale >= 19:
        return new
    raise SourceError(f"column `{column}` of {table} changed type in the binlog from {old} to "
                      f"{new}, which bronze cannot hold in one column: re-snapshot the table "
                      f"(cdc-sql resnapshot PIPELINE --tables <name>)")


def _conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    columns = []
    for f in schema:
        if f.name in batch.schema.names:
            column = batch.column(f.name)
            columns.append(column if column.type == f.type else column.cast(f.type))
        else:
            columns.append(pa.nulls(batch.num_rows, f.type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def drop_after(lake: Lake, tables: list[tuple[str, str]], after: Offset) -> None:
    """Delete what a run landed beyond `after` in these tables (state's `landing`), when it
    will be read again under other offsets (on another server, after a failover)."""
    for db, name in tables:
        path, column = _offsets_of(lake, db, name)
        if lake.tables.exists(path):
            lake.tables.delete_rows(path, [(column, ">", after.text)])


def _offsets_of(lake: Lake, db: str, name: str) -> tuple[str, str]:
    """A landing table's path and offset column (the statements table's differs)."""
    if (db, name) == STATEMENTS:
        return lake.statements_path, "offset"
    return lake.changes_path(db, name), "_cdc_offset"


def landed_after(lake: Lake, tables: list[tuple[str, str]], after: Offset) -> dict:
    """Per (db, table): the last offset bronze holds beyond `after`, for the tables a run was
    writing when it stopped (state's `landing`); capture skips what is there."""
    found = {}
    for db, name in tables:
        path, column = _offsets_of(lake, db, name)
        if not lake.tables.exists(path):
            continue
        rows = lake.engine.sql(f"SELECT max({column}) FROM {table_ref(path)} WHERE {column} > "
                               f":after", {"after": after.text}).collect()
        if rows and rows[0][0]:
            found[(db, name)] = Offset.parse(rows[0][0])
    return found

