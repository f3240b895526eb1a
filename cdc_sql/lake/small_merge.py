"""Windows of plain tables that fit in memory, merged in this process by delta-rs.

A silver batch through the engine costs five or six round trips (facts, views, the duplicate
check, the MERGE), whatever the window's size; with hundreds of small tables that fixed cost is
the whole batch. And delta-rs MERGEs faster than Sail at every size measured, at a memory cost
that follows silver's size (docs/performance.md, "Measurements behind the code"). So a window
of a table silver holds as it is (one source table, no projection, no history, no cascades)
whose work fits in MEMORY_BUDGET is merged here: its bronze changes read (`read_within`), the
last change per key picked in Arrow (`last_change_per_key`, the rule of silver_changes.sql),
and one delta-rs MERGE with the conditions of silver_merge.sql (rows of WIDE_ROW_BYTES or more,
whose batches delta-rs cannot hold, are MERGEd under the same conditions by rewriting the files
they touch a row group at a time: lake/file_merge.py; so are windows into a small silver,
where that is the quicker, into a silver too large for delta-rs's MERGE, and windows past the
budget, these in key ranges committed at once). A first window also creates silver here,
with the snapshot rows placed at their splits' watermarks (snapshot_images.sql) in the
creating commit, as the engine does (on a local path, files made of bronze's files by
lake/first_version.py when they hold the window's rows, else written in parallel from
bronze's rows by lake/parquet_files.py, at any size, in an object store too); its changes
are then merged like any window's. Everything else about the batch is unchanged: the window,
the state commit after the MERGE, the replay of a window after a crash (the offset guard
makes it harmless here too; a silver already created is not written again), the hand-change
check (the commit is a MERGE on `_cdc_offset`, recognised as cdc-sql's own).

Windows that need anything more go through the engine's SQL (which finds silver created, if
this module created it): a DDL statement or TRUNCATE in the window, bronze or silver columns
that differ from the source's (a schema change being carried out), temporal key columns, keys
that may be NULL, decimals wider than 64 bits (whose statistics delta-rs's MERGE writes
wrong) unless silver's files are rewritten here (on a local path, no change data feed), a
re-snapshot, a table delta-rs cannot write (a feature it lacks), work past the budget (and
past key ranges), or a lake whose tables the engine alone reaches (`spark_tables.SparkTables`).
"""
from __future__ import annotations

import functools
import logging
import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_sql import faults
from cdc_sql.config import layout
from cdc_sql.lake import bronze, file_merge, first_version, parquet_files, semantics, tables
from cdc_sql.lake.lake import Lake
from cdc_sql.source.rows import META_COLUMNS
from cdc_sql.window import Window

log = logging.getLogger("cdc_sql")
MEMORY_BUDGET = 512 * 2**20
# A window's changes take a few times their Parquet bytes in Arrow, and a MERGE holds several
# times the Parquet bytes of the silver table it rewrites: these factors are the highest measured
# (docs/performance.md, "Measurements behind the code").
ARROW_PER_PARQUET_BYTE = 4
MERGE_PER_SILVER_BYTE = 9
# delta-rs's MERGE moves rows in batches of 8,192 and holds the files it rewrites: past this
# many Arrow bytes a row, one batch alone passes the budget, however well the values compress
# (a 300 MB table in 15 MB of Parquet took 1.05 GB). Windows of rows this wide are merged by
# rewriting silver's touched files a few rows at a time (lake/file_merge.py).
WIDE_ROW_BYTES = MEMORY_BUDGET // 8192
# lake/file_merge.py holds narrow changes about twice over (their keys and row numbers joined
# with each file's, the rows each file's changes replace): measured in docs/performance.md.
FILES_PER_CHANGE_BYTE = 2
# A window past the budget is merged in key ranges of about this many Arrow bytes of changes:
# a range's changes are held about three times over while merged (read, the last per key, the
# join with each file), and the process holds capture's few hundred MB beside them.
RANGE_BYTES = 64 * 2**20
# Into a silver of at most this many Parquet bytes, rewriting its files costs half of
# delta-rs's MERGE (whose planning is a fixed cost of milliseconds: a schema per tenant pays it
# in every table; docs/performance.md, "Measurements behind the code"); past it delta-rs's
# MERGE, on every core, is as quick or quicker.
SMALL_SILVER_BYTES = 2**20


SQL_ONLY = "engine.sql_only (--sql-only): every window through the engine's SQL"


def plan_unsuitable(plan, sql_only: bool = False) -> str | None:
    """Why no window of the table may be merged here; None when some may (decimals wider
    than 64 bits too: silver's files are rewritten for them, `_merge_changes`)."""
    if sql_only:
        return SQL_ONLY
    if plan.spec.history:
        return ("history: its versions (on chosen columns, runs of changes and versions "
                "updated in place) are cut by the engine's SQL")
    if not plan.as_is or plan.cascades:
        return "not a plain table (a projection, shards or cascades)"
    if plan.key_texts or plan.key_nullable:
        return "temporal or nullable key columns"
    if layout.deletion_vectors(plan.spec.table_properties):
        return "deletion vectors (table_properties), which delta-rs does not write"
    return None


WIDE_DECIMALS = "decimals wider than 64 bits, whose statistics delta-rs's MERGE writes wrong"


def wide_decimals(plan) -> bool:
    """Whether the table has decimals wider than 64 bits (merged here by rewriting files
    alone, which write them no statistics)."""
    return any(pa.types.is_decimal(f.type) and f.type.precision > 18
               for f in plan.sources[0].arrow_schema)


def unsuitable(plan, window: Window, facts, sql_only: bool = False) -> str | None:
    """Why the window must go through the engine's SQL; None when it may be merged here."""
    reason = plan_unsuitable(plan, sql_only)
    if reason is not None:
        return reason
    if window.replace or (window.splits is not None and not window.first):
        return "a re-snapshot, or snapshot rows in a later window"
    source = plan.sources[0]
    if facts.statements.get(source.qualified):
        return "a DDL statement or TRUNCATE in the window"
    expected = {f.name: f.type for f in source.arrow_schema}  # no temporal key: no key texts
    if window.first and not _holds(facts.snapshot_columns.get(source.qualified), expected):
        return "bronze's snapshot columns differ from the source's"
    bronze = facts.changes_columns.get(source.qualified)
    if not (bronze is None and window.first) and not _holds(bronze, expected):
        return "bronze's columns differ from the source's"
    if window.first and not facts.silver_types:
        return None  # silver is created here
    if facts.silver_types != {f.name: f.type for f in silver_schema(plan)}:
        return "silver's columns differ from the source's"
    return None


def _holds(bronze: dict | None, expected: dict) -> bool:
    return bronze is not None and all(bronze.get(name) == t for name, t in expected.items())


def fits(changes_bytes: int, silver_bytes: int) -> bool:
    """Whether a MERGE of `changes_bytes` of changes (in Arrow) into a silver table of
    `silver_bytes` (Parquet) stays within MEMORY_BUDGET."""
    return changes_bytes + MERGE_PER_SILVER_BYTE * silver_bytes <= MEMORY_BUDGET


def merger(changes_bytes: int, changes_rows: int, silver_bytes: int,
           rewritable: bool, delta_rs: bool = True) -> str | None:
    """Which MERGE of `changes_rows` changes of `changes_bytes` (in Arrow) stays within
    MEMORY_BUDGET, when silver is `rewritable` by lake/file_merge.py (whose memory follows
    the changes, not silver: held whole with what it finds of each file, plus a row group
    read and one written): "files" for rows of WIDE_ROW_BYTES or more, and into a silver of
    SMALL_SILVER_BYTES or less (the quicker there); else "delta-rs" if it `fits` (faster on
    a larger silver, whose files it holds) and may (`delta_rs`); else "files" again (a silver
    too large for delta-rs's MERGE); None when none does (the engine's SQL). Pure."""
    wide = rewritable and changes_rows and changes_bytes >= WIDE_ROW_BYTES * changes_rows
    if wide:
        return "files" if changes_bytes + 2 * parquet_files.ROW_GROUP_BYTES <= MEMORY_BUDGET \
            else None
    if rewritable and silver_bytes <= SMALL_SILVER_BYTES and \
            files_bound(changes_bytes) <= MEMORY_BUDGET:
        return "files"
    if delta_rs and fits(changes_bytes, silver_bytes):
        return "delta-rs"
    return "files" if rewritable and files_bound(changes_bytes) <= MEMORY_BUDGET else None


def files_bound(changes_bytes: int) -> int:
    """The peak of a rewrite of files merging `changes_bytes` of changes (in Arrow) of narrow
    rows: the changes and what it finds of each file, plus a row group read and one
    written. Pure."""
    return FILES_PER_CHANGE_BYTE * changes_bytes + 2 * parquet_files.ROW_GROUP_BYTES


def last_change_per_key(changes: pa.Table, key: list[str]) -> pa.Table:
    """The last change of each key by offset, a removal losing to another change at the same
    offset (silver_changes.sql's rule); `changes` holds `_cdc_offset` and `_cdc_remove`.

    A window read back from bronze is its files in any order, each in the order captured:
    its batches put in order of their first offsets, it is in order (checked: a comparison of
    neighbours) and needs no sort. Any other is sorted, offsets as numbers (file and position,
    then row: offsets.py's fixed-width text), three times faster than as text. The hash
    grouping keeps the order, so each key's last row is its last change."""
    if changes.num_rows == 0:
        return changes
    captured = pa.Table.from_batches(
        sorted((b for b in changes.to_batches() if b.num_rows),
               key=lambda b: b.column("_cdc_offset")[0].as_py()), changes.schema)
    if _in_order(captured["_cdc_offset"], captured["_cdc_remove"]):
        changes = captured
        order = pa.array(np.arange(changes.num_rows, dtype=np.int64))
        ordered = pa.table({**{k: changes[k] for k in key}, "__cdc_at": order})
    else:
        text = changes["_cdc_offset"]
        place = pc.add(pc.multiply(_digits(text, 0, 6), 10**12), _digits(text, 7, 19))
        order = pc.sort_indices(pa.table({"place": place, "row": _digits(text, 20, 26),
                                          "remove": changes["_cdc_remove"]}),
                                [("place", "ascending"), ("row", "ascending"),
                                 ("remove", "descending")])
        ordered = pa.table({**{k: pc.take(changes[k], order) for k in key}, "__cdc_at": order})
    last = ordered.group_by(key, use_threads=False).aggregate([("__cdc_at", "last")])
    if last.num_rows == changes.num_rows:  # a change per key: no copy (of wide values)
        return changes
    return changes.take(last["__cdc_at_last"])


def _in_order(offsets: pa.ChunkedArray, remove: pa.ChunkedArray) -> bool:
    """Whether each row stands at or after the one before it: a later offset (string order is
    offset order), or the same one with an upsert after a removal (what the sort in
    `last_change_per_key` gives; a null anywhere says no)."""
    n = len(offsets)
    before, after = offsets.slice(0, n - 1), offsets.slice(1)
    ties = pc.and_(pc.equal(before, after),
                   pc.greater_equal(remove.slice(0, n - 1), remove.slice(1)))
    return pc.all(pc.or_(pc.less(before, after), ties), skip_nulls=False,
                  min_count=0).as_py() is True


def _digits(text: pa.ChunkedArray, start: int, stop: int) -> pa.ChunkedArray:
    return pc.cast(pc.utf8_slice_codeunits(text, start, stop), pa.int64())


def merged(lake: Lake, plan, window: Window, facts) -> bool:
    """Carry out here a window whose route (lake/silver/route.py) says it may be; False when
    the files say the engine's SQL must after all (it then finds silver created, if this
    created it)."""
    reason = None
    silver = lake.silver_path(plan.spec.name)
    if not lake.tables.merges_here(silver):
        features = lake.tables.unwritable(silver)
        reason = f"delta-rs cannot write its features ({', '.join(features)})" if features \
            else "delta-rs does not reach this table"
    if reason is None and window.first and not lake.tables.exists(silver):
        reason = _create(lake, plan, window, silver)
    if window.first:
        first_version.discard(lake, plan.spec.name)  # spliced ahead, not taken
    if reason is None and plan.sources[0].qualified in facts.changes_columns:
        reason = _merge_changes(lake, plan, window, silver)
    if reason is not None:
        log.debug("silver %s: merged by the engine: %s", plan.spec.name, reason)
        return False
    faults.point("silver.merged")
    return True


def _create(lake: Lake, plan, window: Window, silver: str) -> str | None:
    """Silver created with the window's snapshot rows, in one commit; why not, if not."""
    source = plan.sources[0]
    started = time.perf_counter()
    schema = silver_schema(plan)
    written = first_version.take(lake, source, window.splits.get(source.qualified, ()),
                                 schema, silver, lake.first_version_path(plan.spec.name)) \
        if lake.local else None
    if written is not None:
        faults.point("silver.first_spliced")  # files in silver's directory, not in its log
        lake.tables.create_with_files(silver, schema, written, layout.properties(plan.spec))
    else:
        lake.tables.create_from_streams(silver, schema,
                                        snapshot_rows(lake, source, window, schema),
                                        layout.properties(plan.spec))
    faults.point("silver.snapshot_written")
    log.debug("silver %s: the snapshot rows, %s, in %.3fs", plan.spec.name,
              "made of bronze's files" if written is not None else
              "read from bronze, written into silver as it is created",
              time.perf_counter() - started)
    return None


def _merge_changes(lake: Lake, plan, window: Window, silver: str) -> str | None:
    """The window's changes, the last per key, MERGEd into silver; why not, if not."""
    changes_path, columns, within = _changes_of(lake, plan, window)
    silver_bytes = lake.tables.file_bytes(silver)
    changes_bytes = lake.tables.file_bytes(changes_path, within)
    if changes_bytes == 0:  # no file of bronze may hold one: nothing to MERGE, whatever
        return None  # silver's size (a first window of a big table: no engine started for it)
    rewritable, delta_rs = _rewritable(lake, silver), not wide_decimals(plan)
    if not (rewritable or delta_rs):
        return f"{WIDE_DECIMALS}, and silver keeps a change data feed (not rewritten here)"
    estimate = ARROW_PER_PARQUET_BYTE * changes_bytes
    if merger(estimate, lake.tables.file_rows(changes_path, within), silver_bytes,
              rewritable, delta_rs) is None:
        if rewritable:
            return _merge_in_ranges(lake, plan, window, silver, estimate)
        return "past the memory budget (by bronze's and silver's file sizes)"
    started = time.perf_counter()
    changes = lake.tables.read_within(changes_path, columns, within)
    way, count = merger(changes.nbytes, changes.num_rows, silver_bytes, rewritable,
                        delta_rs), changes.num_rows
    if way is None:
        nbytes, count = changes.nbytes, changes.num_rows
        del changes
        return _merge_in_ranges(lake, plan, window, silver, nbytes) if rewritable else \
            f"past the memory budget ({count} changes)"
    if changes.num_rows == 0:
        return None
    read = time.perf_counter()
    last = last_change_per_key(semantics.arrow_changes(plan.spec, changes), list(plan.key))
    del changes  # the MERGE holds only the last changes
    faults.point("silver.staged")
    picked = time.perf_counter()
    if way == "files":
        file_merge.merge(lake.tables, silver, last, list(plan.key))
    else:
        lake.tables.merge_changes(silver, last, list(plan.key), list(plan.columns))
    log.debug("silver %s: %d changes (%d keys) merged by %s: read in %.3fs, the last per "
              "key in %.3fs, the MERGE in %.3fs", plan.spec.name, count, last.num_rows,
              "rewriting files" if way == "files" else "delta-rs", read - started,
              picked - read, time.perf_counter() - picked)
    return None


def _changes_of(lake: Lake, plan, window: Window) -> tuple[str, list[str], tuple]:
    """The bronze table of the window's changes, the columns read (silver's, less those its
    change semantics add) and the window's offsets (`_cdc_offset`, after, upto)."""
    source, extra = plan.sources[0], semantics.extra_columns(plan.spec)
    return lake.changes_path(source.db, source.name), \
        [c for c in plan.columns if c not in extra], ("_cdc_offset", window.after, window.upto)


def _merge_in_ranges(lake: Lake, plan, window: Window, silver: str,
                     estimate: int) -> str | None:
    """A window past the budget, merged by rewriting files in key ranges of its integer
    first key column (file_merge.key_ranges: enough that each range's changes fit; a file
    across two is rewritten in parts): the window's changes read from bronze once, each
    into a spill file of its range (`_spill`); then each range's changes read, the last per
    key picked and merged in turn (the next range picked while one is merged:
    `_picked_ahead`), every range's files in one commit (file_merge.Rewrite).
    Memory follows a range, whatever the window's size or silver's files; silver moves from
    one boundary to the next at once. Why not, if not (nothing written stays: the engine's
    SQL takes the window)."""
    source, key = plan.sources[0], list(plan.key)
    rewrite = file_merge.Rewrite(lake.tables, silver, key)
    files = lake.tables.data_files(silver, key[0])
    bronze = lake.tables.key_ranges(lake.changes_path(source.db, source.name), key[0])
    if not pa.types.is_integer(rewrite.schema.field(key[0]).type) or \
            bronze is None or any(low is None or high is None for _, low, high in files):
        return "past the memory budget, and its key ranges are not known"
    ranges = file_merge.key_ranges(min((low for low, _, _ in bronze), default=0),
                                   max((high for _, high, _ in bronze), default=0),
                                   range_count(estimate))
    started, count = time.perf_counter(), 0
    with spill_directory() as spill:
        try:
            parts = [(bounds, part) for bounds, part in
                     zip(ranges, _spill(lake, plan, window, key[0], ranges, spill)) if part]
            for (start, stop), last, changes in _picked_ahead(plan, parts):
                if last is None:
                    rewrite.abandon()
                    return f"past the memory budget in a key range ({changes} changes)"
                count += changes
                rewrite.add(last, file_merge.within_range(files, start, stop), (start, stop))
                del last
                pa.default_memory_pool().release_unused()  # each range's blocks given back
            rewrite.finish()  # the rest of the files rewritten in parts
            faults.point("silver.staged")  # every range's files written, none committed
        except BaseException:
            rewrite.abandon()
            raise
    rewrite.commit()  # (never abandoned once tried: a commit that raised may have landed)
    log.debug("silver %s: %d changes merged by rewriting files in %d key ranges in %.3fs",
              plan.spec.name, count, len(ranges), time.perf_counter() - started)
    return None


def _picked_ahead(plan, parts: list[tuple[tuple, str]]) -> Iterator[tuple]:
    """(key range, the last change per key of its spilled changes, how many changes) for
    each of `parts` in order, the next range's read and picked on a thread of its own while
    the caller merges this one (the pick is Arrow's, without Python's lock: two cores share
    the work); None for the last changes of a range past the memory budget. Memory holds
    two ranges at most."""
    with ThreadPoolExecutor(1, "range") as ahead:
        pending = None
        for bounds, part in parts:
            picking = ahead.submit(_picked, plan, part)
            if pending is not None:
                yield pending[0], *pending[1].result()
            pending = bounds, picking
        if pending is not None:
            yield pending[0], *pending[1].result()


def _picked(plan, part: str) -> tuple[pa.Table | None, int]:
    """The last change per key of a range's spill file (then removed), and its changes."""
    with pa.OSFile(part) as file:
        changes = pa.ipc.open_file(file).read_all()
    os.remove(part)
    if files_bound(changes.nbytes) > MEMORY_BUDGET:
        return None, changes.num_rows
    return last_change_per_key(semantics.arrow_changes(plan.spec, changes), list(plan.key)), \
        changes.num_rows


SPILL_PREFIX = "cdc-sql-ranges-"


def spill_directory() -> tempfile.TemporaryDirectory:
    """A directory for a window's key ranges, named with this process's id, after removing
    those of processes that ended without removing theirs (a run killed while it spilled)."""
    root = tempfile.gettempdir()
    for name in stale_spills(os.listdir(root), _alive):
        shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    return tempfile.TemporaryDirectory(prefix=f"{SPILL_PREFIX}{os.getpid()}-")


def stale_spills(names: list[str], alive: Callable[[int], bool]) -> list[str]:
    """The spill directories among `names` whose process is gone. Pure."""
    stale = []
    for name in names:
        pid = name[len(SPILL_PREFIX):].split("-", 1)[0] if name.startswith(SPILL_PREFIX) else ""
        if pid.isdigit() and not alive(int(pid)):
            stale.append(name)
    return stale


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _spill(lake: Lake, plan, window: Window, column: str, ranges: list[tuple],
           directory: str) -> list[str | None]:
    """The window's changes read from bronze once, as a stream, each row written to the
    Arrow file (LZ4) of its key range in `column` under `directory`: the files, None for a
    range without changes. Bronze's files hold keys of every range (a batch's), so reading
    each range from them would decode the whole window once per range."""
    path, columns, within = _changes_of(lake, plan, window)
    cuts = [start for start, _ in ranges[1:]]
    names = [os.path.join(directory, f"range-{n}.arrow") for n in range(len(ranges))]
    writers: dict[int, pa.ipc.RecordBatchFileWriter] = {}
    options = pa.ipc.IpcWriteOptions(compression="lz4")
    try:
        for batch in lake.tables.scan(path, columns, tables.within_conditions(within),
                                      serial=True):
            if not batch.num_rows:
                continue
            for n, rows in _by_range(batch, column, cuts):
                if n not in writers:
                    writers[n] = pa.ipc.new_file(names[n], batch.schema, options=options)
                writers[n].write_batch(rows)
    finally:
        for writer in writers.values():
            writer.close()
    return [names[n] if n in writers else None for n in range(len(ranges))]


def _by_range(batch: pa.RecordBatch, column: str, cuts: list[int]):
    """(range number, its rows) of a batch, by which of the ranges the ascending `cuts` of
    the integer `column` make each row's value falls in."""
    values = batch.column(column).to_numpy(zero_copy_only=False)
    where = np.searchsorted(np.array(cuts, dtype=values.dtype), values, side="right")
    order = np.argsort(where, kind="stable")
    bounds = np.searchsorted(where[order], np.arange(len(cuts) + 2))
    for n in range(len(cuts) + 1):
        if bounds[n + 1] > bounds[n]:
            yield n, batch.take(pa.array(order[bounds[n]:bounds[n + 1]]))


def range_count(estimate: int) -> int:
    """Into how many key ranges a window of about `estimate` Arrow bytes of changes is cut:
    RANGE_BYTES each if keys were even (they need not be)."""
    return max(1, -(-estimate // RANGE_BYTES))


def any_size(plan) -> bool:
    """Whether a window of this plain table is merged here whatever its size: past the budget
    by rewriting silver's files in key ranges (`_merge_in_ranges`), which takes an integer
    first key column with file statistics in silver and in bronze's changes (the ranges come
    from them: past 32 columns, or with delta.dataSkippingNumIndexedCols set low, a key column
    may have none), and a table without a change data feed (a rewrite of files writes none).
    Else such a window goes through the engine's SQL, whose memory follows it. Pure."""
    key, silver = plan.key[0], silver_schema(plan)
    return not plan.spec.change_data_feed and pa.types.is_integer(silver.field(key).type) and \
        _has_statistics(key, silver, layout.properties(plan.spec)) and \
        _has_statistics(key, bronze.changes_schema(plan.sources[0]), tables.LOG_TABLE)


def _has_statistics(column: str, schema: pa.Schema, properties: dict[str, str]) -> bool:
    """Whether a table created here with `schema` and `properties` keeps file statistics of
    `column` (the statistics columns cdc-sql chooses, then the properties asked for)."""
    chosen = tables.new_table_configuration(schema, properties) or {}
    return not tables.without_statistics((column,), schema, chosen)


def _rewritable(lake: Lake, silver: str) -> bool:
    """Whether lake/file_merge.py may MERGE into silver: a table that keeps no change data
    feed (delta-rs's MERGE writes the feed's rows; a rewrite of files would not)."""
    return lake.tables.properties(silver).get(layout.CHANGE_DATA_FEED, "").lower() != "true"


def silver_schema(plan) -> pa.Schema:
    """The columns silver is created with, in the plan's order: the source's, then cdc-sql's
    with bronze's types (all nullable, as an engine creates them)."""
    meta = dict(META_COLUMNS)
    return pa.schema(list(plan.sources[0].arrow_schema) +
                     [pa.field(name, meta[name]) for name in plan.columns if name in meta] +
                     semantics.extra_fields(plan.spec))


def snapshot_rows(lake: Lake, source, window: Window,
                  schema: pa.Schema) -> list[Callable[[], Iterator[pa.RecordBatch]]]:
    """The snapshot rows of the window's done splits (each split's state-recorded attempt),
    each placed at its split's watermark (snapshot_images.sql): a stream per group of splits
    read together, in split order, so silver's files keep the groups' key ranges. Each stream
    is opened when called (an open reader reads ahead: all of them at once hold too much)."""
    groups: dict[str, list[tuple[int, str]]] = {}
    for split in sorted(window.splits.get(source.qualified, ())):
        groups.setdefault(split.attempt, []).append((split.split_id, split.watermark))
    columns = [c.name for c in source.columns]
    path = lake.snapshot_path(source.db, source.name)

    def group(attempt: str, splits: list[tuple[int, str]]) -> Iterator[pa.RecordBatch]:
        ids = pa.array([i for i, _ in splits], pa.int32())
        marks = pa.array([w for _, w in splits], pa.string())
        reader = lake.tables.scan(path, [*columns, "_cdc_split_id", "_cdc_read_at"],
                                  [("_cdc_attempt", "=", attempt),
                                   ("_cdc_split_id", "IN", ids.to_pylist())])
        return (first_version.snapshot_image(
            schema, batch,
            pc.take(marks, pc.index_in(batch.column("_cdc_split_id"), value_set=ids)),
            batch.column("_cdc_read_at")) for batch in reader)

    return [functools.partial(group, attempt, splits) for attempt, splits in groups.items()]
