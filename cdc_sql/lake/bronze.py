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
from typing import Iterable

import pyarrow as pa

from cdc_sql.source.offsets import Position
from cdc_sql.source.schema import SourceTable

BINLOG_SCHEMA = pa.schema([
    ("offset", pa.string()), ("db", pa.string()), ("tbl", pa.string()), ("op", pa.string()),
    ("before", pa.map_(pa.string(), pa.string())), ("after", pa.map_(pa.string(), pa.string())),
    ("commit_ts", pa.timestamp("us", tz="UTC")), ("gtid", pa.string()),
    ("statement", pa.string()), ("txn_end", pa.string()),
])
BINLOG_DDL = ("offset STRING, db STRING, tbl STRING, op STRING, before MAP<STRING, STRING>, "
              "after MAP<STRING, STRING>, commit_ts TIMESTAMP, gtid STRING, statement STRING, "
              "txn_end STRING")
# Sail rejects gRPC messages over 128 MB: createDataFrame gets Arrow slices well below that.
_MAX_SLICE_BYTES = 32 * 2**20


def snapshot_path(root: str, table: SourceTable) -> str:
    return f"{root}/bronze/_snapshot/{table.db}.{table.name}"


def binlog_path(root: str) -> str:
    return f"{root}/bronze/_binlog"


def snapshot_ddl(table: SourceTable) -> str:
    from cdc_sql.sql import quote

    columns = ", ".join(f"{quote(c.name)} {c.spark_type}" for c in table.columns)
    return (f"{columns}, _cdc_split_id INT, _cdc_attempt STRING, _cdc_watermark STRING, "
            f"_cdc_read_at TIMESTAMP")


def write_split_batch(engine, root: str, table: SourceTable, batch: pa.RecordBatch,
                      split_id: int, attempt: str, watermark: str, read_at: dt.datetime) -> None:
    n = batch.num_rows
    batch = batch.append_column("_cdc_split_id", pa.array([split_id] * n, pa.int32()))
    batch = batch.append_column("_cdc_attempt", pa.array([attempt] * n, pa.string()))
    batch = batch.append_column("_cdc_watermark", pa.array([watermark] * n, pa.string()))
    batch = batch.append_column("_cdc_read_at",
                                pa.array([read_at] * n, pa.timestamp("us", tz="UTC")))
    append_arrow(engine, pa.Table.from_batches([batch]), snapshot_ddl(table),
                 snapshot_path(root, table))


def ensure_snapshot_table(engine, root: str, table: SourceTable) -> None:
    path = snapshot_path(root, table)
    if not engine.exists(path):
        engine.append(engine.spark.createDataFrame([], snapshot_ddl(table)), path)


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
        append_arrow(engine, pa.Table.from_pylist(changes, schema=BINLOG_SCHEMA), BINLOG_DDL,
                     binlog_path(root))


def ensure_binlog_table(engine, root: str) -> None:
    path = binlog_path(root)
    if not engine.exists(path):
        engine.append(engine.spark.createDataFrame([], BINLOG_DDL), path)


def append_arrow(engine, table: pa.Table, ddl: str, path: str) -> None:
    if table.num_rows == 0:
        return
    rows_per_slice = max(1, int(table.num_rows * _MAX_SLICE_BYTES / max(table.nbytes, 1)))
    frames = [engine.spark.createDataFrame(table.slice(i, rows_per_slice), schema=ddl)
              for i in range(0, table.num_rows, rows_per_slice)]
    df = frames[0]
    for frame in frames[1:]:
        df = df.unionByName(frame)
    engine.append(df, path)


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
