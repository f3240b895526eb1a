"""Parquet files written here and committed to a local Delta table as one commit of add actions.

delta-rs's own writer holds about 1 GB to write 10M rows (measured: a streamed copy of a 210 MB
table peaked at 1.0-1.2 GB whatever its read-ahead), and Sail's as much; and it takes twice the
CPU of pyarrow's (2M rows of the benchmark table: 0.76-0.87 s against 0.36-0.46 s, statistics
included), which a snapshot, sharing the machine's cores with the server, feels in full. A
writer per stream, here, holds one row group; streams are written in parallel (pyarrow releases
the GIL), each into files of about TARGET_ROWS rows, and the files become visible together in
one commit, as a delta-rs write would make them: the commit that creates a table
(`create_table`), or an append to an existing one (tables.DeltaRsTables.append_arrow).

Statistics (what data skipping and `tables.clustered` read) are exact, worked out from the Arrow
values written: row and null counts of every column; minimum and maximum of integer, string and
64-bit decimal columns (written at full length, so no reader need widen them). Other columns
have none, which readers take as "may hold anything".
"""
from __future__ import annotations

import decimal
import json
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cdc_sql.lake.tables import ROW_GROUP_ROWS

TARGET_ROWS = 2_000_000
# DICTIONARY: only for cdc-sql's columns that repeat one value per split (offset, op, time).
# Measured on 2M rows of the 7-column benchmark table: 0.87 s and 57 MB with pyarrow's default
# dictionary encoding of every column, 0.37 s and 39 MB with none (LZ4 catches the repeats);
# with the three repeating columns' rows added, 0.41-0.46 s with none, 0.36 s with those three.
# Bronze's snapshot tags repeat one value per read of splits likewise.
REPEATING = ("_cdc_offset", "_cdc_op", "_cdc_ts", "_cdc_split_id", "_cdc_attempt",
             "_cdc_watermark", "_cdc_read_at")


def create_table(path: str, schema: pa.Schema,
                 streams: list[Callable[[], Iterable[pa.RecordBatch]]],
                 configuration: dict | None = None) -> None:
    """Create the Delta table at local `path` holding the rows of `streams` (each opened by
    the thread that writes it, so that only as many read ahead as are written), in one
    commit; files in the order of the streams."""
    os.makedirs(path, exist_ok=True)
    with ThreadPoolExecutor(max(1, min(len(streams), os.cpu_count() or 1))) as pool:
        actions = [a for written in pool.map(lambda s: write_files(path, schema, s()), streams)
                   for a in written]
    create_with(path, schema, actions, configuration)


def create_with(path: str, schema: pa.Schema, actions: list,
                configuration: dict | None = None) -> None:
    """Create the Delta table at local `path` in one commit of files already there."""
    from deltalake import Schema
    from deltalake.transaction import create_table_with_add_actions

    create_table_with_add_actions(path, Schema.from_arrow(schema), actions, mode="error",
                                  configuration=configuration)


def write_files(path: str, schema: pa.Schema, stream: Iterable[pa.RecordBatch]) -> list:
    """The stream's rows in files of about TARGET_ROWS rows under `path`: their add actions."""
    files = Files(path, schema)
    for batch in stream:
        files.write(batch)
    return files.close()


class Files:
    """Batches written, as they come, into files of about TARGET_ROWS rows under `path`."""

    def __init__(self, path: str, schema: pa.Schema):
        self.path, self.schema = path, schema
        self.actions: list = []
        self._writer, self._name, self._stats = None, "", None

    def write(self, batch: pa.RecordBatch) -> None:
        if self._writer is None:
            self._name = f"part-{uuid.uuid4()}.lz4raw.parquet"
            self._writer = pq.ParquetWriter(
                os.path.join(self.path, self._name), self.schema, compression="lz4_raw",
                use_dictionary=[n for n in REPEATING if n in self.schema.names])
            self._stats = Stats(self.schema)
        self._writer.write_batch(batch, row_group_size=ROW_GROUP_ROWS)
        self._stats.add(batch)
        if self._stats.rows >= TARGET_ROWS:
            self._finish()

    def close(self) -> list:
        """The files' add actions (paths relative to `path`)."""
        if self._writer is not None:
            self._finish()
        return self.actions

    def _finish(self) -> None:
        from deltalake.transaction import AddAction

        self._writer.close()
        self._writer = None
        self.actions.append(AddAction(
            self._name, os.path.getsize(os.path.join(self.path, self._name)), {},
            int(time.time() * 1000), True, self._stats.json()))


def _has_bounds(type_: pa.DataType) -> bool:
    return pa.types.is_integer(type_) or pa.types.is_string(type_) or \
        pa.types.is_large_string(type_) or (pa.types.is_decimal(type_) and type_.precision <= 18)


class Stats:
    """Delta file statistics of the batches added so far."""

    LONGEST = 64  # a longer string bound leaves its column without bounds (not truncated)

    def __init__(self, schema: pa.Schema):
        self.schema = schema
        self.rows = 0
        self.nulls = dict.fromkeys(schema.names, 0)
        self.low: dict = {}
        self.high: dict = {}
        self.unbounded = {f.name for f in schema if not _has_bounds(f.type)}

    def add(self, batch: pa.RecordBatch) -> None:
        self.rows += batch.num_rows
        for field, column in zip(self.schema, batch.columns):
            self.nulls[field.name] += column.null_count
            if field.name in self.unbounded or column.null_count == len(column):
                continue
            bounds = pc.min_max(column)
            low, high = bounds["min"].as_py(), bounds["max"].as_py()
            if isinstance(low, str) and max(len(low), len(high)) > self.LONGEST:
                self.unbounded.add(field.name)
                continue
            if field.name not in self.low or low < self.low[field.name]:
                self.low[field.name] = low
            if field.name not in self.high or high > self.high[field.name]:
                self.high[field.name] = high

    def json(self) -> str:
        def values(found: dict) -> str:  # decimals as exact JSON numbers, not a float's digits
            return "{" + ", ".join(
                f"{json.dumps(name)}: {v if isinstance(v, decimal.Decimal) else json.dumps(v)}"
                for name, v in found.items() if name not in self.unbounded) + "}"

        return (f'{{"numRecords": {self.rows}, "minValues": {values(self.low)}, '
                f'"maxValues": {values(self.high)}, "nullCount": {json.dumps(self.nulls)}}}')
