"""Landing snapshot splits in bronze, in this process or as Spark tasks.

`land_split` is one split, start to end: open a consistent read and take its watermark, stream
the rows into bronze under a fresh attempt id, and return the state entry that marks the split
done. Bronze first, state after: a split whose entry never reached state is read again by the
next run, and silver reads only the attempt state names, so rows of a lost attempt never count.

`land_as_spark_tasks` runs the same function on the executors: the pending splits become a
DataFrame with one partition per split, `mapInArrow` lands each one there (delta-rs writes its
rows to the bronze table, which all executors must reach), and only the small state entries come
back to the driver, which commits them together. A task Spark runs twice lands twice under two
attempts; state records the attempt whose result reached the driver.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import uuid
from typing import Callable, Iterable, Iterator

import pyarrow as pa

from cdc_sql import faults
from cdc_sql.lake import bronze
from cdc_sql.lake.lake import Lake
from cdc_sql.lake.state import SplitEntry
from cdc_sql.lake.tables import append_with_delta_rs
from cdc_sql.source import mysql
from cdc_sql.source.schema import SourceTable
from cdc_sql.source.snapshot import read_split
from cdc_sql.source.splits import Split
from cdc_sql.source.watermarks import binary_log_status

Writer = Callable[[SourceTable, Iterable[pa.RecordBatch], int, str, str, dt.datetime], int]


def land_split(source, table: SourceTable, split: Split, mariadb: bool, write: Writer
               ) -> SplitEntry:
    """Read one split into bronze with `write`; returns its `done` state entry."""
    attempt = uuid.uuid4().hex[:12]
    read = read_split(source, table, split, mariadb, reader=source.snapshot_reader)
    read_at = dt.datetime.now(dt.timezone.utc)
    watermark = read.watermark.position
    # A GTID watermark gets its offset from the binlog reader; until then rows carry none.
    offset = watermark.offset.text if read.watermark.resolved else ""
    rows = write(table, read.batches, split.split_id, attempt, offset, read_at)
    faults.point("split.written")  # bronze has the split's rows, state not yet
    # A position after the read: the rows hold no change from after it (with a reader in the
    # watermark's own snapshot, the watermark itself). History starts past every one.
    in_snapshot = read.reader == "pymysql" and read.watermark.exact
    read_end = watermark if in_snapshot else _binlog_end(source)
    return dataclasses.replace(
        SplitEntry.planned(split), status="done", attempt=attempt, rows=rows,
        watermark=offset or None, watermark_position=str(watermark),
        watermark_gtid=read.watermark.gtid_set, watermark_exact=read.watermark.exact,
        reader=read.reader, read_end=read_end.offset.text)


def _binlog_end(source):
    with mysql.cursor(source) as cur:
        return binary_log_status(cur)[0]


# -- as Spark tasks -----------------------------------------------------------------------------
def land_as_spark_tasks(lake, source, jobs: list[tuple[SourceTable, Split]],
                        mariadb: bool) -> list[SplitEntry]:
    """Land every split in its own Spark task; returns their state entries."""
    splits = lake.spark.createDataFrame([(i,) for i in range(len(jobs))], "job INT")
    tasks = splits.repartition(len(jobs)) if len(jobs) > 1 else splits
    landed = tasks.mapInArrow(_task(lake.root, source, jobs, mariadb), "entry STRING").collect()
    return [SplitEntry.from_json("", json.loads(row["entry"])) for row in landed]


def _task(root: str, source, jobs: list[tuple[SourceTable, Split]], mariadb: bool):
    """What each executor runs over its part of the split list. It carries the source settings
    (the password too) as Spark's own JDBC reader does; they are never logged."""

    def land(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        lake = Lake(None, root, _ExecutorTables())
        for batch in batches:
            entries = [json.dumps(land_split(source, *jobs[job], mariadb,
                                             _writer(lake)).to_json())
                       for job in batch.column("job").to_pylist()]
            yield pa.RecordBatch.from_arrays([pa.array(entries, pa.string())], names=["entry"])

    return land


def _writer(lake) -> Writer:
    def write(table, batches, split_id, attempt, offset, read_at) -> int:
        return bronze.write_split(lake, table, batches, split_id, attempt, offset, read_at)

    return write


class _ExecutorTables:
    """Executors have no Spark session of their own: they append with delta-rs. Appends never
    conflict, but each lost race costs delta-rs one retry, and many tasks finish at once."""

    @staticmethod
    def append_arrow(path: str, batches: Iterable[pa.RecordBatch], schema: pa.Schema) -> None:
        append_with_delta_rs(path, batches, schema, max_commit_retries=10_000)
