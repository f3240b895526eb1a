"""Bronze: what arrived, append-only, never interpreted.

- `bronze/_snapshot/<db>.<table>`: split rows in the source's columns (contract types) plus
  `_cdc_split_id`, `_cdc_attempt`, `_cdc_watermark` (offset text) and `_cdc_read_at`. Silver
  reads only the attempt that state marks done; rows of abandoned attempts are deleted before a
  split is read again, so a retried split never counts twice.
- `bronze/_binlog`: one row per change (or DDL), keyed by `offset`, whole transactions per commit,
  images as map<column, text> (values.encode). `txn_end` is where the reader resumes.
"""
from __future__ import annotations

import datetime as dt
from typing import Iterable, Iterator

import pyarrow as pa

from cdc_sql.source.offsets import Position
from cdc_sql.source.schema import SourceTable

BINLOG_SCHEMA = pa.schema([
    ("offset", pa.string()), ("db", pa.string()), ("tbl", pa.string()), ("op", pa.string()),
    ("before", pa.map_(pa.string(), pa.string())), ("after", pa.map_(pa.string(), pa.string())),
    ("commit_ts", pa.timestamp("us", tz="UTC")), ("gtid", pa.string()),
    ("statement", pa.string()), ("txn_end", pa.string()),
])


def snapshot_path(root: str, table: SourceTable) -> str:
    return f"{root}/bronze/_snapshot/{table.db}.{table.name}"


def binlog_path(root: str) -> str:
    return f"{root}/bronze/_binlog"


def snapshot_schema(table: SourceTable) -> pa.Schema:
    from cdc_sql.source.snapshot import arrow_schema

    return arrow_schema(table).append(pa.field("_cdc_split_id", pa.int32())) \
        .append(pa.field("_cdc_attempt", pa.string())) \
        .append(pa.field("_cdc_watermark", pa.string())) \
        .append(pa.field("_cdc_read_at", pa.timestamp("us", tz="UTC")))


def write_split(engine, root: str, table: SourceTable, batches: Iterable[pa.RecordBatch],
                split_id: int, attempt: str, watermark: str, read_at: dt.datetime,
                on_batch=lambda rows: None) -> int:
    """Stream a split's rows into bronze, tagged with the split, attempt and watermark;
    `on_batch(rows)` follows progress. Returns the rows written."""
    written = 0

    def counted() -> Iterator[pa.RecordBatch]:
        nonlocal written
        for batch in tag_split_rows(table, batches, split_id, attempt, watermark, read_at):
            yield batch
            written += batch.num_rows
            on_batch(batch.num_rows)

    engine.append_arrow(snapshot_path(root, table), counted(), snapshot_schema(table))
    return written


def tag_split_rows(table: SourceTable, batches: Iterable[pa.RecordBatch], split_id: int,
                   attempt: str, watermark: str, read_at: dt.datetime) -> Iterator[pa.RecordBatch]:
    """A split's rows with the bronze tag columns: split, attempt, watermark, read time."""
    schema = snapshot_schema(table)
    tags = [pa.scalar(split_id, pa.int32()), pa.scalar(attempt), pa.scalar(watermark),
            pa.scalar(read_at, pa.timestamp("us", tz="UTC"))]
    for batch in batches:
        columns = [*batch.columns, *(pa.repeat(tag, batch.num_rows) for tag in tags)]
        yield pa.RecordBatch.from_arrays(columns, schema=schema)


def ensure_snapshot_table(engine, root: str, table: SourceTable) -> None:
    engine.create_arrow_table(snapshot_path(root, table), snapshot_schema(table))


def drop_unfinished(engine, root: str, table: SourceTable, split_ids: Iterable[int]) -> None:
    """Delete rows that earlier, unfinished attempts left for these splits."""
    ids = sorted(set(split_ids))
    path = snapshot_path(root, table)
    if ids and engine.exists(path):
        engine.spark.sql(f"DELETE FROM {engine.table_ref(path)} WHERE _cdc_split_id IN "
                         f"({', '.join(str(int(i)) for i in ids)})").collect()


def append_changes(engine, root: str, changes: list[dict]) -> None:
    """One Delta commit holding whole transactions."""
    if changes:
        engine.append_arrow(binlog_path(root),
                            pa.Table.from_pylist(changes, schema=BINLOG_SCHEMA).to_batches(),
                            BINLOG_SCHEMA)


def ensure_binlog_table(engine, root: str) -> None:
    engine.create_arrow_table(binlog_path(root), BINLOG_SCHEMA)


def resume_after(engine, root: str, checkpoint: Position | None) -> Position | None:
    """Where capture resumes: after the checkpoint, or after bronze rows written past it.

    Bronze commits before the checkpoint does, so a crash between the two leaves whole
    transactions in bronze beyond the checkpoint; resuming after them writes nothing twice.
    """
    path = binlog_path(root)
    if not engine.exists(path):
        return checkpoint
    after = checkpoint.offset.text if checkpoint else ""
    rows = engine.spark.sql(
        f"SELECT txn_end FROM {engine.table_ref(path)} WHERE offset > :after "
        f"ORDER BY offset DESC LIMIT 1", args={"after": after}).collect()
    return Position.parse(rows[0][0]) if rows else checkpoint
