"""Phase 2 of a run: requested re-snapshots prepared, then every unfinished split read into
bronze, splits in parallel, recorded in batched state commits."""
from __future__ import annotations

import dataclasses
import logging
import time
from concurrent.futures import ThreadPoolExecutor

from cdc_sql import faults, resnapshot
from cdc_sql.lake import bronze, first_version, tables
from cdc_sql.lake.silver import route
from cdc_sql.lake.silver.plan import SilverPlan, read_whole, snapshot_levels
from cdc_sql.lake.state import Checkpoint, SplitEntry
from cdc_sql.progress import Progress
from cdc_sql.run.commits import record_as_done
from cdc_sql.run.context import Run
from cdc_sql.run.engine_policy import start_early
from cdc_sql.snapshot_tasks import land_as_spark_tasks, land_splits
from cdc_sql.source import mysql
from cdc_sql.source.preflight import SourceView
from cdc_sql.source.schema import SourceTable
from cdc_sql.source.splits import (SplitGroup, creating_groups, group_splits, plan_splits,
                                   table_size)
from cdc_sql.source.watermarks import binary_log_status

log = logging.getLogger("cdc_sql")


def snapshot(run: Run, view: SourceView, plans: list[SilverPlan], engine_early: bool) -> int:
    """Prepare requested re-snapshots, then read every unfinished split into bronze (`plans`:
    the pipeline's silver tables over `view`; `engine_early`: engine_policy.decide);
    returns the rows read."""
    source = run.pipeline.source
    checkpoint, sizes = _prepare_resnapshots(run, view, run.state.load())
    initial = source.startup in ("initial", "snapshot-only")
    with mysql.cursor(source) as cur:  # new tables too (a shard that appeared)
        unplanned = [t for t in view.source_tables
                     if initial and not checkpoint.splits(t.qualified)]
        sizes.update({t.qualified: table_size(cur, t) for t in unplanned})  # (rows, bytes a row)
        new = [plan_splits(cur, t, source.chunk_size, source.parallelism, sizes[t.qualified])
               for t in unplanned]
        if new:
            run.state.write(*(SplitEntry.planned(s) for splits in new for s in splits))
            checkpoint = run.state.load()
        pending_tables = [t for t in view.source_tables
                          if any(not s.done for s in checkpoint.splits(t.qualified))]
        for table in pending_tables:
            if table.qualified not in sizes:  # planned by an earlier run
                sizes[table.qualified] = table_size(cur, table)
    whole = read_whole(plans)  # all splits again, in one read
    unfinished = {t.qualified: [s.split for s in checkpoint.splits(t.qualified)
                                if not s.done or t.qualified in whole]
                  for t in pending_tables}
    pending = [SplitGroup(table, group, sizes[table.qualified][0] * len(group) //
                          max(len(unfinished[table.qualified]), 1), sizes[table.qualified][1])
               for table in pending_tables for group in (
        [sorted(unfinished[table.qualified], key=lambda s: s.split_id)]
        if table.qualified in whole else
        group_splits(unfinished[table.qualified], sizes[table.qualified][0],
                     source.parallelism))]
    found = tables.each(lambda t: run.lake.tables.exists(run.lake.snapshot_path(t.db, t.name)),
                        pending_tables)  # (each a request, in an object store)
    present = {t.qualified for t, there in zip(pending_tables, found) if there}
    if source.snapshot_runner != "spark":  # (Spark's tasks append to a table made here)
        pending = creating_groups(pending, present)
    made_by_read = {g.table.qualified for g in pending if g.creates}

    def prepare(table: SourceTable) -> None:
        if table.qualified in present:  # rows of unfinished attempts go; a new table is
            bronze.drop_unfinished(run.lake, table,  # made empty, or by its only read
                                   [s.split_id for s in unfinished[table.qualified]])
        elif table.qualified not in made_by_read:
            bronze.ensure_snapshot_table(run.lake, table)

    tables.each(prepare, pending_tables)
    levels = snapshot_levels(plans)  # cascades set off cascades: parents first
    targets = route.made_of_bronze(run.lake, plans) if pending else {}
    rows = 0
    for level in sorted({levels.get(g.table.qualified, 0) for g in pending}):
        rows += _read_pending(run, view, [g for g in pending
                                          if levels.get(g.table.qualified, 0) == level],
                              targets, engine_early)
    return rows


def _read_pending(run: Run, view: SourceView, pending: list[SplitGroup],
                  targets: dict[str, list[first_version.Target]], engine_early: bool) -> int:
    if run.pipeline.source.snapshot_runner == "spark":
        return _land_as_spark_tasks(run, view, pending)
    progress = Progress("snapshot", sum(len(g.splits) for g in pending))
    with ThreadPoolExecutor(run.pipeline.source.parallelism, "split") as pool:
        futures = [pool.submit(_read_splits, run, view, g, progress,
                               targets.get(g.table.qualified, [])) for g in pending]
        start_early(run.lake, engine_early)  # while the readers wait on the source
        entries = record_as_done(run.state, futures)
    progress.finish()
    return sum(e.rows for e in entries)


def _prepare_resnapshots(run: Run, view: SourceView,
                         checkpoint: Checkpoint) -> tuple[Checkpoint, dict[str, tuple]]:
    """Requested re-snapshots: the tables' bronze emptied, then their new splits, start and
    silver marks in one state commit (resnapshot.py). Returns the checkpoint after, and the
    sizes (splits.table_size) of the tables planned."""
    if not resnapshot.pending(checkpoint):
        return checkpoint, {}
    source = run.pipeline.source
    wanted = resnapshot.requested(checkpoint)
    chosen = [t for t in view.source_tables if t.qualified in wanted]
    with mysql.cursor(source) as cur:  # the new splits' watermarks all come after it
        start = dataclasses.replace(binary_log_status(cur)[0], base=view.base).offset.text
        sizes = {t.qualified: table_size(cur, t) for t in chosen}
        planned = {t.qualified: plan_splits(cur, t, source.chunk_size, source.parallelism,
                                            sizes[t.qualified]) for t in chosen}
    tables.each(lambda table: bronze.reset(run.lake, table), chosen)
    faults.point("resnapshot.reset")  # bronze emptied, state not told: prepared again
    silver = [spec.name for spec in run.pipeline.tables
              if any(spec.matches(t.db, t.name) for t in chosen)]
    run.state.write(*resnapshot.prepared(checkpoint, planned, start, silver))
    log.warning("re-snapshot of %s: capture keeps their changes after %s; %s stay as they "
                "are until the new snapshot replaces them", ", ".join(sorted(planned)) or
                "no table that still exists", start, ", ".join(silver) or "no silver table")
    return run.state.load(), sizes


def _read_splits(run: Run, view: SourceView, group: SplitGroup, progress: Progress,
                 targets: list[first_version.Target]) -> list[SplitEntry]:
    """A group of splits into bronze, then its big files spliced for silver's first version
    (`targets`: lake/first_version.py); returns their state entries."""
    if run.stop.is_set():  # SIGTERM: splits not started wait for the next run
        return []

    def write(table, batches, attempt, offset, read_at) -> dict[int, int]:
        return bronze.write_splits(run.lake, table, batches, attempt, offset, read_at,
                                   on_batch=progress.add_rows, create=group.creates)

    entries = land_splits(run.pipeline.source, group, view.mariadb, write, view.base)
    if targets and entries and entries[0].watermark:  # (a GTID watermark: known later)
        first_version.splice_ahead(run.lake, group.table, entries[0].attempt,
                                   entries[0].watermark, targets)
    progress.split_done(len(entries))
    return entries


def _land_as_spark_tasks(run: Run, view: SourceView,
                         pending: list[SplitGroup]) -> int:
    """One Spark task per group of splits; state records them together when the job is
    done."""
    started = time.monotonic()
    log.info("snapshot: %d groups of splits as Spark tasks", len(pending))
    entries = land_as_spark_tasks(run.lake, run.pipeline.source, pending, view.mariadb,
                                  view.base)
    run.state.write(*entries)
    rows = sum(e.rows for e in entries)
    log.info("snapshot finished: %d splits, %d rows in %.1fs as Spark tasks", len(entries),
             rows, time.monotonic() - started)
    return rows
