"""Landing snapshot splits in bronze, in this process or as Spark tasks.

`land_splits` is one group of consecutive splits of a table, start to end: open one consistent
read and take its watermark, stream the rows of all of them with one query into bronze under a
fresh attempt id, in one commit, and return the state entries that mark them done. Bronze
first, state after: a split whose entry never reached state is read again by the next run, and
silver reads only the attempt state names, so rows of a lost attempt never count. A group
shares the cost of a read (connections, the watermark, the commits) among its splits, however
small they are.

`land_as_spark_tasks` runs the same function on the executors: the pending groups become a
DataFrame with one partition per group, `mapInArrow` lands each one there (delta-rs writes its
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
from cdc_sql.lake.tables import COMMIT_RETRIES, append_with_delta_rs
from cdc_sql.source import mysql
from cdc_sql.source.schema import SourceTable
from cdc_sql.source.snapshot import IN_SNAPSHOT, read_splits, rows_a_batch
from cdc_sql.source.splits import SplitGroup
from cdc_sql.source.watermarks import binary_log_status

Writer = Callable[[SourceTable, Iterable[pa.RecordBatch], str, str, dt.datetime],
                  dict[int, int]]


def land_splits(source, group: SplitGroup, mariadb: bool, write: Writer,
                base: int = 0) -> list[SplitEntry]:
    """Read consecutive splits into bronze with `write`; returns their `done` state entries.
    `base`: what the source's binlog file numbers get in offsets (source/failover.py)."""
    attempt = uuid.uuid4().hex[:12]
    table, splits = group.table, group.splits
    read = read_splits(source, table, splits, mariadb, rows_a_batch(group.row_bytes),
                       reader=source.snapshot_reader, rows=group.rows)
    read_at = dt.datetime.now(dt.timezone.utc)
    watermark = dataclasses.replace(read.watermark.position, base=base)
    # A GTID watermark gets its offset from the binlog reader; until then rows carry none.
    offset = watermark.offset.text if read.watermark.resolved else ""
    try:
        rows = write(table, read.batches, attempt, offset, read_at)
    finally:
        read.close()  # a write that failed leaves no snapshot open on the source
    faults.point("split.written")  # bronze has the splits' rows, state not yet
    # A position after the read: the rows hold no change from after it (with a reader in the
    # watermark's own snapshot, the watermark itself). History starts past every one.
    in_snapshot = read.reader in IN_SNAPSHOT and read.watermark.exact
    read_end = watermark if in_snapshot else \
        dataclasses.replace(_binlog_end(source), base=base)
    return [dataclasses.replace(
        SplitEntry.planned(split), status="done", attempt=attempt,
        rows=rows.get(split.split_id, 0), watermark=offset or None,
        watermark_position=str(watermark), watermark_gtid=read.watermark.gtid_set,
        watermark_exact=read.watermark.exact, reader=read.reader, server=read.server,
        read_end=read_end.offset.text, read_at=read_at.isoformat()) for split in splits]


def _binlog_end(source):
    with mysql.cursor(source) as cur:
        return binary_log_status(cur)[0]


# -- as Spark tasks -----------------------------------------------------------------------------
def land_as_spark_tasks(lake: Lake, source, jobs: list[SplitGroup],
                        mariadb: bool, base: int = 0) -> list[SplitEntry]:
    """Land every group of splits in its own Spark task; returns their state entries."""
    groups = lake.spark.createDataFrame([(i,) for i in range(len(jobs))], "job INT")
    tasks = groups.repartition(len(jobs)) if len(jobs) > 1 else groups
    landed = tasks.mapInArrow(_task(lake.root, source, jobs, mariadb, base), "entry STRING").collect()
    return [SplitEntry.from_json("", json.loads(row["entry"])) for row in landed]


def _task(root: str, source, jobs: list[SplitGroup], mariadb: bool,
          base: int):
    """What each executor runs over its part of the split list. It carries the source settings
    (the password too) as Spark's own JDBC reader does; they are never logged."""

    def land(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        lake = Lake(None, root, _ExecutorTables())
        for batch in batches:
            entries = [json.dumps(entry.to_json()) for job in batch.column("job").to_pylist()
                       for entry in land_splits(source, jobs[job], mariadb, _writer(lake),
                                                     base)]
            yield pa.RecordBatch.from_arrays([pa.array(entries, pa.string())], names=["entry"])

    return land


def _writer(lake: Lake) -> Writer:
    def write(table, batches, attempt, offset, read_at) -> dict[int, int]:
        return bronze.write_splits(lake, table, batches, attempt, offset, read_at)

    return write


class _ExecutorTables:
    """Executors have no Spark session of their own: they append with delta-rs. Appends never
    conflict, but each lost race costs delta-rs one retry, and many tasks finish at once."""

    @staticmethod
    def append_arrow(path: str, batches: Iterable[pa.RecordBatch], schema: pa.Schema) -> None:
        append_with_delta_rs(path, batches, schema, max_commit_retries=COMMIT_RETRIES)
