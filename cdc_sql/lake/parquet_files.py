"""Parquet files written here and committed to a Delta table as one commit of add actions (a
local one, or any, through delta-rs's storage: `table_files`).

delta-rs's own writer holds a large table's worth of memory to write it, and Sail's as much; and
it takes more CPU than pyarrow's (docs/performance.md, "Measurements behind the code"), which a
snapshot, sharing the machine's cores with the server, feels in full. A
writer per stream, here, holds one row group; streams are written in parallel (pyarrow releases
the GIL), each into files of about TARGET_ROWS rows, and the files become visible together in
one commit, as a delta-rs write would make them: the commit that creates a table
(`create_table`), or an append to an existing one (delta_rs_tables.DeltaRsTables.append_arrow).

Statistics (what data skipping and `tables.clustered` read) are exact: row and null counts of
every column, from the Arrow values written; minimum and maximum of integer, string and 64-bit
decimal columns (at full length, so no reader need widen them), from the file's own footer, where
the Parquet writer puts its row groups' bounds anyway (working them out again from the values
costs CPU per row, and a snapshot writes two files for every row).
Other columns have none, which readers take as "may hold anything".
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
import pyarrow.fs
import pyarrow.parquet as pq

from cdc_sql.location import Location

ROW_GROUP_ROWS = 128 * 1024  # a writer holds a row group, a reader reads one: see tables.writer_properties
# ... and a row group holds at most this many bytes of Arrow values: a reader decodes a whole
# row group at once (pyarrow's batches are slices of it), so rows of megabytes (wide values)
# come a few to a group, which lake/file_merge.py reads one at a time.
ROW_GROUP_BYTES = 32 * 2**20
TARGET_ROWS = 2_000_000
# A file of at most this many bytes is read into memory whole and decoded on the reading thread
# (`in_memory`): a few rows' file so read took 0.15-0.2 ms, against 0.3-0.45 ms opened by path
# and decoded by Arrow's threads (which a schema per tenant's thousands of such reads a run
# only wake, docs/performance.md).
SMALL_FILE = 2**20
WRITE_BUFFER = 2**20  # bytes a file is written in (unbuffered, a few rows' file took ten writes)
# DICTIONARY: only for cdc-sql's columns that repeat one value per split (offset, op, time):
# dictionary encoding of every column was slower and larger than none, and none but these the
# quickest (docs/performance.md, "Measurements behind the code"). Bronze's snapshot tags repeat
# one value per read of splits likewise.
REPEATING = ("_cdc_offset", "_cdc_op", "_cdc_ts", "_cdc_split_id", "_cdc_attempt",
             "_cdc_watermark", "_cdc_read_at")


def create_table(path: str, schema: pa.Schema,
                 streams: list[Callable[[], Iterable[pa.RecordBatch]]],
                 configuration: dict | None = None) -> list:
    """Create the Delta table at `path` (local, or in an object store: `table_files`) holding
    the rows of `streams` (each opened by the thread that writes it, so that only as many read
    ahead as are written), in one commit; files in the order of the streams. Returns their
    add actions."""
    if Location.of(path).local:
        os.makedirs(path, exist_ok=True)
    if len(streams) == 1:  # (no thread of its own: a small table's read costs one commit)
        actions = write_files(path, schema, streams[0]())
    else:
        with ThreadPoolExecutor(max(1, min(len(streams), os.cpu_count() or 1))) as pool:
            actions = [a for written in pool.map(lambda s: write_files(path, schema, s()),
                                                 streams) for a in written]
    create_with(path, schema, actions, configuration)
    return actions


def create_with(path: str, schema: pa.Schema, actions: list,
                configuration: dict | None = None) -> None:
    """Create the Delta table at `path` in one commit of files already there."""
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


def table_files(path: str) -> pyarrow.fs.FileSystem:
    """The files of the Delta table at `path` (names relative to it, as its log has them): the
    local disk, or an object store through delta-rs's own storage, with the settings delta-rs
    reads from the environment (docs/operations.md, "Object storage")."""
    if Location.of(path).local:
        return pyarrow.fs.SubTreeFileSystem(str(path), pyarrow.fs.LocalFileSystem())
    from deltalake.fs import DeltaStorageHandler

    return pyarrow.fs.PyFileSystem(DeltaStorageHandler(str(path)))


def in_memory(files: pyarrow.fs.FileSystem, name: str) -> pq.ParquetFile:
    """The Parquet file `name` in `files` (one of at most SMALL_FILE bytes), read into memory
    whole (one read, one request to an object store) for reads on this thread
    (`use_threads=False`)."""
    with files.open_input_stream(name) as stream:
        return pq.ParquetFile(pa.BufferReader(stream.readall()))


class Files:
    """Batches written, as they come, into files of about TARGET_ROWS rows under `path`
    (`files`: its `table_files`, if known)."""

    def __init__(self, path: str, schema: pa.Schema, files: pyarrow.fs.FileSystem | None = None):
        self.schema, self.files = schema, files or table_files(path)
        self.actions: list = []
        self._writer, self._sink, self._name, self._stats = None, None, "", None

    def write(self, batch: pa.RecordBatch) -> None:
        if self._writer is None:
            self._name = f"part-{uuid.uuid4()}.snappy.parquet"
            self._sink = self.files.open_output_stream(  # buffered: the writer's many small
                self._name, buffer_size=WRITE_BUFFER)  # writes are one system call a buffer
            self._writer = pq.ParquetWriter(  # Snappy: tables.writer_properties says why
                self._sink, self.schema, compression="snappy",
                use_dictionary=[n for n in REPEATING if n in self.schema.names])
            self._stats = Stats(self.schema)
        self._writer.write_batch(batch, row_group_size=row_group_rows(batch))
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

        self._writer.close()  # the footer written: its size and metadata known, not read back
        size, footer = self._sink.tell(), self._writer.writer.metadata
        self._sink.close()  # (in an object store, the upload completes here)
        self._writer = self._sink = None
        self.actions.append(AddAction(self._name, size, {}, int(time.time() * 1000), True,
                                      self._stats.json(footer)))


def row_group_rows(batch: pa.RecordBatch) -> int:
    """The rows of a row group cut from `batch`: ROW_GROUP_ROWS, fewer for wide rows, so that
    it holds no more than ROW_GROUP_BYTES."""
    if batch.nbytes <= ROW_GROUP_BYTES:
        return ROW_GROUP_ROWS
    return max(1, min(ROW_GROUP_ROWS, ROW_GROUP_BYTES * batch.num_rows // batch.nbytes))


def _has_bounds(type_: pa.DataType) -> bool:
    return pa.types.is_integer(type_) or pa.types.is_string(type_) or \
        pa.types.is_large_string(type_) or (pa.types.is_decimal(type_) and type_.precision <= 18)


class Stats:
    """Delta file statistics of one file: counts from the batches written, bounds from its
    footer."""

    LONGEST = 64  # a longer string bound leaves its column without bounds (not truncated)

    def __init__(self, schema: pa.Schema):
        self.schema = schema
        self.rows = 0
        self.nulls = dict.fromkeys(schema.names, 0)

    @classmethod
    def of_file(cls, schema: pa.Schema, footer: pq.FileMetaData) -> "Stats":
        """A file's statistics from its footer alone (a file made of other files' column
        chunks, lake/parquet_splice.py): its rows, and the nulls of each column not nested
        whose row groups all count them (a nested column's leaves count nulls of their own:
        none given for it)."""
        stats, leaf = cls(schema), 0
        stats.rows, stats.nulls = footer.num_rows, {}
        for field in schema:
            index, leaf = leaf, leaf + _leaves(field.type)
            if leaf - index != 1 or pa.types.is_nested(field.type):
                continue
            found = [footer.row_group(g).column(index).statistics
                     for g in range(footer.num_row_groups)]
            if all(f is not None and f.has_null_count for f in found):
                stats.nulls[field.name] = sum(f.null_count for f in found)
        return stats

    def add(self, batch: pa.RecordBatch) -> None:
        self.rows += batch.num_rows
        for field, column in zip(self.schema, batch.columns):
            self.nulls[field.name] += column.null_count

    def bounds(self, footer: pq.FileMetaData) -> tuple[dict, dict]:
        """The minimum and maximum of each bounded column over the file's row groups: a row
        group without them (its values too long for the writer's statistics) or with a longer
        string than LONGEST leaves its column unbounded."""
        low: dict = {}
        high: dict = {}
        leaf = 0  # a top-level column's first leaf column in the file
        for field in self.schema:
            index, leaf = leaf, leaf + _leaves(field.type)
            if not _has_bounds(field.type):
                continue
            for group in range(footer.num_row_groups):
                rows = footer.row_group(group).num_rows
                found = footer.row_group(group).column(index).statistics
                if found is not None and found.has_min_max:
                    values = found.min, found.max
                    if not isinstance(values[0], str) or \
                            max(len(values[0]), len(values[1])) <= self.LONGEST:
                        low[field.name] = min(values[0], low.get(field.name, values[0]))
                        high[field.name] = max(values[1], high.get(field.name, values[1]))
                        continue
                elif rows == 0 or found is not None and found.has_null_count and \
                        found.null_count == rows:
                    continue  # no rows or only nulls here
                low.pop(field.name, None)
                high.pop(field.name, None)
                break
        return low, high

    def json(self, footer: pq.FileMetaData) -> str:
        def values(found: dict) -> str:  # decimals as exact JSON numbers, not a float's digits
            return "{" + ", ".join(
                f"{json.dumps(name)}: {v if isinstance(v, decimal.Decimal) else json.dumps(v)}"
                for name, v in found.items()) + "}"

        low, high = self.bounds(footer)
        return (f'{{"numRecords": {self.rows}, "minValues": {values(low)}, '
                f'"maxValues": {values(high)}, "nullCount": {json.dumps(self.nulls)}}}')


def _leaves(type_: pa.DataType) -> int:
    """The Parquet leaf columns a column of this type is written as."""
    if pa.types.is_struct(type_):
        return sum(_leaves(type_.field(i).type) for i in range(type_.num_fields))
    if pa.types.is_map(type_):
        return _leaves(type_.key_type) + _leaves(type_.item_type)
    if pa.types.is_list(type_) or pa.types.is_large_list(type_) or \
            pa.types.is_fixed_size_list(type_):
        return _leaves(type_.value_type)
    return 1
