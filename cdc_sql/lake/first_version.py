"""Silver's first version made of bronze's snapshot files, their values not encoded again.

A plain table's first window creates silver holding the snapshot rows (lake/small_merge.py).
Those rows are in bronze's files already, encoded, beside bronze's own columns. Read back and
written again they cost silver a third of the snapshot's time; written a second time as they
were read (what this module did before) a tenth of the snapshot's CPU (docs/performance.md).
So where each of bronze's files holds rows of one read of splits the window takes whole, a
silver file is made of that file's column chunks of the source's columns and those of a small
file of silver's own (the splits' watermark, `r`, the read time: one value each), under
silver's footer (lake/parquet_splice.py): bytes copied, nothing decoded.

`take` gives those files' add actions, or None when bronze's files do not hold exactly the
window's rows file by file (`chosen`, pure) or cannot be spliced as they are (files another
writer made, columns bronze's files lack): silver is then written from bronze's rows, read and
encoded (small_merge.snapshot_rows). Bronze's files are only read. A splice copies the
file's bytes: after a snapshot of 100M rows, 6 s. So the snapshot splices each read's big
files as soon as bronze holds them (`splice_ahead`, into `<root>/_first/<silver name>/`,
each under its bronze file's name), and `take` moves in those that hold what it would make
(silver's columns, the bronze file's rows, the window's watermark), making the others.
`_first/<silver name>` is removed once silver exists.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import shutil
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from cdc_sql.errors import out_of_space
from cdc_sql.lake import parquet_files, parquet_splice
from cdc_sql.lake.lake import Lake
from cdc_sql.window import SplitRef

log = logging.getLogger("cdc_sql")
READ_AT = pa.timestamp("us", tz="UTC")  # bronze's _cdc_read_at
# A smaller bronze file is read and its rows written again when silver is created: a splice
# reads three footers and writes one in Python (`take` of a 10-row file: 3.3 ms so, 4.0 ms
# spliced, 2 ms of each opening bronze; docs/performance.md). Bigger files are spliced during
# the snapshot. Where the two cross was not measured: 1 MB is a file of about 30,000 rows of
# the benchmark's table, a few milliseconds either way.
SPLICE_BYTES = 2**20


@dataclass(frozen=True)
class BronzeFile:
    """What a bronze snapshot file's footer says of its rows."""

    name: str                # relative to the table
    attempt: str | None      # the attempt that wrote all its rows; None: not one
    first: int | None        # its lowest and highest split id
    last: int | None


def chosen(files: Iterable[BronzeFile], splits: Iterable[SplitRef]) -> list[tuple[str, str]] | None:
    """Bronze's files, each with the watermark its rows stand at, when together they hold
    exactly the snapshot rows of `splits` (the window's done splits, each with the attempt
    state records): each file of an attempt state records and holding only splits state
    records of that attempt, all at one watermark. None when a file cannot tell (rows of
    several attempts, no split bounds), holds rows of another attempt (what the window does
    not take: not expected of a first window, so not trusted either) or of a split the window
    does not take from it, or its splits stand at different watermarks. Pure."""
    wanted: dict[str, dict[int, str]] = {}
    for split in splits:
        if split.attempt is None or split.watermark is None:
            return None
        wanted.setdefault(split.attempt, {})[split.split_id] = split.watermark
    if not wanted:
        return None
    found = []
    for file in files:
        if file.attempt is None or file.first is None or file.last is None:
            return None
        if file.attempt not in wanted:
            return None
        marks = {wanted[file.attempt].get(i) for i in range(file.first, file.last + 1)}
        if None in marks or len(marks) != 1:
            return None
        found.append((file.name, marks.pop()))
    return found


def take(lake: Lake, source, splits: Iterable[SplitRef], schema: pa.Schema, silver: str,
         ahead: str | None = None) -> list | None:
    """The add actions of silver's first version, its files made in `silver` (a local
    directory) from bronze's, or moved there from `ahead` where `splice_ahead` made them
    during the snapshot; None when they cannot be (module docstring)."""
    bronze = lake.snapshot_path(source.db, source.name)
    names = lake.tables.plain_files(bronze)
    if names is None:
        return None
    made: list[str] = []
    try:
        footers = {name: pq.read_metadata(os.path.join(bronze, name)) for name in names}
        values = schema.get_field_index("_cdc_offset")  # the source's columns come first
        if not all(_holds_columns(f, schema, values) for f in footers.values()):
            return None
        picked = chosen([_described(name, f) for name, f in footers.items()], splits)
        if picked is None:
            return None
        os.makedirs(silver, exist_ok=True)

        def silver_files(file: tuple[str, str]) -> list:
            path, footer = os.path.join(bronze, file[0]), footers[file[0]]
            if ahead is not None:
                found = _made_ahead(os.path.join(ahead, file[0]), footer, file[1], schema,
                                    silver)
                if found is not None:
                    made.extend(a.path for a in found)
                    return found
            way = _spliced if os.path.getsize(path) >= SPLICE_BYTES else _rewritten
            actions = way(path, footer, file[1], schema, values, silver)
            made.extend(a.path for a in actions)
            return actions

        if len(picked) < 2:  # (a small table: no thread of its own)
            return [a for file in picked for a in silver_files(file)]
        with ThreadPoolExecutor(min(len(picked), os.cpu_count() or 1)) as pool:
            # (copies and writes release the GIL)
            return [a for found in pool.map(silver_files, picked) for a in found]
    except (OSError, pa.ArrowException, parquet_splice.Unspliceable) as exc:
        for name in made:
            os.remove(os.path.join(silver, name))
        if out_of_space(exc):  # the rows cannot be written from bronze either: the run stops
            raise
        log.debug("silver's first version not made of bronze's files (%s): written from "
                  "bronze's rows", exc)
        return None


@dataclass(frozen=True)
class Target:
    """A silver table whose first version may be made of a source table's bronze files."""

    ahead: str          # where its files are made during the snapshot: <root>/_first/<name>
    schema: pa.Schema   # silver's columns (small_merge.silver_schema)


def splice_ahead(lake: Lake, source, attempt: str, watermark: str,
                 targets: list[Target]) -> None:
    """During the snapshot, once a read's rows are in bronze: its bronze files past
    SPLICE_BYTES (those of `attempt`) spliced for each target into `target.ahead`, each under
    its bronze file's name (written aside, then renamed: whole or absent), so that the copy
    shares the snapshot's time instead of following it (100M rows: 6 s after it). `take`
    moves them into silver when they hold what it would make (`_made_ahead`); whatever fails
    here is left to it."""
    bronze = lake.snapshot_path(source.db, source.name)
    try:
        for name in lake.tables.plain_files(bronze) or []:
            path = os.path.join(bronze, name)
            wanted = [t for t in targets if not os.path.exists(os.path.join(t.ahead, name))]
            if not wanted or os.path.getsize(path) < SPLICE_BYTES:
                continue
            footer = pq.read_metadata(path)
            if _described(name, footer).attempt != attempt:
                continue  # another read's
            for target in wanted:
                values = target.schema.get_field_index("_cdc_offset")
                if _holds_columns(footer, target.schema, values):
                    os.makedirs(target.ahead, exist_ok=True)
                    out = os.path.join(target.ahead, name)
                    _splice_file(path, footer, watermark, target.schema, values, out + ".part")
                    os.replace(out + ".part", out)
    except (OSError, pa.ArrowException, parquet_splice.Unspliceable) as exc:
        if out_of_space(exc):  # nor can the snapshot go on: the run stops
            raise
        log.debug("bronze files of %s not spliced during the snapshot (%s)", source.qualified,
                  exc)


def _made_ahead(path: str, footer: pq.FileMetaData, watermark: str, schema: pa.Schema,
                silver: str) -> list | None:
    """The file `splice_ahead` made at `path` of the bronze file of `footer`, moved into
    `silver`, when it holds what a splice would make now: silver's columns, the bronze
    file's rows, all at `watermark`; its add action. None when it is not there or not so."""
    try:
        found = pq.read_metadata(path)
    except (OSError, pa.ArrowException):
        return None
    if not found.schema.to_arrow_schema().equals(schema) or \
            found.num_rows != footer.num_rows or \
            _bounds(found, "_cdc_offset") != (watermark, watermark):
        return None
    name = os.path.basename(path)
    os.replace(path, os.path.join(silver, name))
    return [_action(silver, name, schema, found)]


def _holds_columns(footer: pq.FileMetaData, schema: pa.Schema, values: int) -> bool:
    """Whether the file's leading columns are silver's source columns (names, types,
    nullability) and its read time is bronze's type."""
    found = footer.schema.to_arrow_schema()
    return len(found) > values and \
        all(found.field(i).equals(schema.field(i)) for i in range(values)) and \
        "_cdc_read_at" in found.names and found.field("_cdc_read_at").type == READ_AT


def _described(name: str, footer: pq.FileMetaData) -> BronzeFile:
    attempts = _bounds(footer, "_cdc_attempt")
    splits = _bounds(footer, "_cdc_split_id")
    return BronzeFile(name, attempts[0] if attempts and attempts[0] == attempts[1] else None,
                      *(splits or (None, None)))


def _bounds(footer: pq.FileMetaData, column: str, raw: bool = False) -> tuple | None:
    """The lowest and highest value of a top-level column over the file's row groups, as
    its footer has them (`raw`: as stored, e.g. a timestamp's integer); None where a row
    group has none."""
    index = next((i for i in range(footer.num_columns)
                  if footer.schema.column(i).path == column), None)
    if index is None or footer.num_row_groups == 0:
        return None
    low = high = None
    for group in range(footer.num_row_groups):
        found = footer.row_group(group).column(index).statistics
        if found is None or not found.has_min_max:
            return None
        values = (found.min_raw, found.max_raw) if raw else (found.min, found.max)
        low = values[0] if low is None else min(low, values[0])
        high = values[1] if high is None else max(high, values[1])
    return low, high


def _rewritten(path: str, footer: pq.FileMetaData, watermark: str, schema: pa.Schema,
               values: int, silver: str) -> list:
    """A silver file in `silver` of the rows of the (small) bronze file at `path`, read and
    written again; its add action (none for no rows)."""
    read = pq.ParquetFile(path, metadata=footer).read(
        columns=[*schema.names[:values], "_cdc_read_at"], use_threads=False)
    files = parquet_files.Files(silver, schema)
    for batch in read.to_batches():
        files.write(snapshot_image(schema, batch, pa.repeat(pa.scalar(watermark), batch.num_rows),
                                   batch.column("_cdc_read_at")))
    return files.close()


def _spliced(path: str, footer: pq.FileMetaData, watermark: str, schema: pa.Schema,
             values: int, silver: str) -> list:
    """A silver file in `silver` of the bronze file at `path` (`_splice_file`); its add
    action."""
    name = f"part-{uuid.uuid4()}.snappy.parquet"
    return [_action(silver, name, schema,
                    _splice_file(path, footer, watermark, schema, values,
                                 os.path.join(silver, name)))]


def _action(silver: str, name: str, schema: pa.Schema, footer: pq.FileMetaData):
    from deltalake.transaction import AddAction

    return AddAction(name, os.path.getsize(os.path.join(silver, name)), {},
                     int(dt.datetime.now().timestamp() * 1000), True,
                     parquet_files.Stats.of_file(schema, footer).json(footer))


def _splice_file(path: str, footer: pq.FileMetaData, watermark: str, schema: pa.Schema,
                 values: int, out: str) -> pq.FileMetaData:
    """`out`: the bronze file at `path`'s source columns' chunks and those of a file of
    silver's own columns written here beside it; its footer."""
    read_at = _bounds(footer, "_cdc_read_at", raw=True)
    if read_at is None or read_at[0] != read_at[1]:
        raise parquet_splice.Unspliceable("rows read at different times")
    own_schema = pa.schema(list(schema)[values:])
    own = f"{out}.own"
    at = pa.scalar(read_at[0], READ_AT)
    rows = [footer.row_group(g).num_rows for g in range(footer.num_row_groups)]
    sizes = list(dict.fromkeys(rows))  # a row group of silver's own columns per size
    writer = pq.ParquetWriter(own, _own_columns(own_schema, 0, watermark, at).schema,
                              compression="snappy", use_dictionary=[
                                  n for n in parquet_files.REPEATING if n in own_schema.names])
    try:
        with writer:
            for size in sizes:
                writer.write_batch(_own_columns(own_schema, size, watermark, at),
                                   row_group_size=size)
        return parquet_splice.splice(
            [parquet_splice.Part(path, values),
             parquet_splice.Part(own, len(own_schema), tuple(sizes.index(r) for r in rows))],
            schema, out)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(own)


def _own_columns(schema: pa.Schema, rows: int, watermark: str,
                 read_at: pa.Scalar) -> pa.RecordBatch:
    """Silver's own columns (`snapshot_meta`) of `rows` rows of one split's watermark and
    read time, strings as one dictionary value repeated (a third of the time to write)."""
    arrays = []
    for field, values in zip(schema, snapshot_meta(schema, 1, pa.array([watermark]),
                                                   pa.array([read_at], READ_AT))):
        if pa.types.is_string(field.type):
            values = pa.DictionaryArray.from_arrays(pa.repeat(pa.scalar(0, pa.int32()), rows),
                                                    values)
        else:
            values = pa.repeat(values[0], rows)
        arrays.append(values)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(
        [field.with_type(a.type) for field, a in zip(schema, arrays)]))


def snapshot_meta(schema: pa.Schema, rows: int, offset: pa.Array,
                  read_at: pa.Array) -> list[pa.Array]:
    """Silver's own columns of snapshot rows (`schema`: those of silver's columns): the offset
    they are placed at (their split's watermark), `r`, when they were read
    (snapshot_images.sql); with soft deletes, not deleted."""
    meta = {"_cdc_offset": offset, "_cdc_op": pa.repeat(pa.scalar("r"), rows),
            "_cdc_ts": read_at, "_cdc_deleted": pa.repeat(pa.scalar(False), rows)}
    return [meta[field.name].cast(field.type) for field in schema]


def snapshot_image(schema: pa.Schema, batch: pa.RecordBatch, offset: pa.Array,
                   read_at: pa.Array) -> pa.RecordBatch:
    """Snapshot rows in silver's columns (small_merge.silver_schema): the source's values
    (the batch's first columns), then silver's own (`snapshot_meta`)."""
    values = schema.get_field_index("_cdc_offset")  # the source's columns come first
    return pa.RecordBatch.from_arrays(
        [*batch.columns[:values],
         *snapshot_meta(pa.schema(list(schema)[values:]), batch.num_rows, offset, read_at)],
        schema=schema)


def discard(lake: Lake, name: str) -> None:
    """Files spliced during the snapshot for silver's first version (`<root>/_first/<name>`),
    once silver exists or is not created here."""
    shutil.rmtree(lake.first_version_path(name), ignore_errors=True)
