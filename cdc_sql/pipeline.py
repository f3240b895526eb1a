"""One run of a pipeline: source -> bronze -> silver, one phase after the other.

1. connect, read the schemas, check binlog settings and projections (nothing written yet);
2. plan splits for tables that have none, snapshot the unfinished ones in parallel;
3. capture the binlog from where it stopped (first time: the lowest watermark) up to the source
   position seen at start, whole transactions per bronze commit (capture.py);
4. merge each silver table's next window (planner.py, lake/silver.py), then record the applied
   offset.
Each phase commits before the next starts and every commit is replay-safe, so a run killed
anywhere is finished by the next one (docs/architecture.md, "Crash points").
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from cdc_sql import faults, metrics
from cdc_sql.capture import Capture
from cdc_sql.config.model import Pipeline
from cdc_sql.errors import SourceError
from cdc_sql.lake import bronze
from cdc_sql.lake.lake import Lake
from cdc_sql.lake.silver import (SilverPlan, check_untouched, merge_window, owned_tables,
                                 owned_versions, plan_silver)
from cdc_sql.lake.state import (CaptureEntry, Checkpoint, OwnerEntry, RunEntry, SplitEntry, State,
                                TableEntry, check_owner)
from cdc_sql.planner import next_window
from cdc_sql.progress import Progress
from cdc_sql.snapshot_tasks import land_as_spark_tasks, land_split
from cdc_sql.source import mysql, startup
from cdc_sql.source.offsets import Position
from cdc_sql.source.preflight import SourceView, inspect_source, now
from cdc_sql.source.schema import SourceTable
from cdc_sql.source.splits import Split, plan_splits
from cdc_sql.source.watermarks import binary_log_status, gtid_position

log = logging.getLogger("cdc_sql")
BINLOG_ONLY_STARTUP = ("latest", "earliest", "timestamp", "offset")


def run_pipeline(pipeline: Pipeline, engine, stop: threading.Event, until_caught_up: bool,
                 give_up_after: float = 300.0) -> RunEntry:
    """One run; in follow mode, source outages (a restart, a KILL, a network blip) are waited
    out: the run starts again after 1, 2, 4 ... 30 s, and gives up after `give_up_after`
    seconds without a run that got going. A scheduled run (until caught up) fails at once:
    its scheduler retries."""
    delay, failing_since = 1.0, None
    while True:
        started = time.monotonic()
        try:
            return Runner(pipeline, engine, stop).run(until_caught_up=until_caught_up)
        except SourceError as exc:
            now_ = time.monotonic()
            if now_ - started > 60:  # that run got going: a new outage
                delay, failing_since = 1.0, None
            failing_since = failing_since or started
            if until_caught_up or not exc.transient or now_ - failing_since > give_up_after:
                raise
            log.warning("%s: running again in %.0f s (follow mode gives up after %.0f s of "
                        "failures)", exc, delay, give_up_after)
            if stop.wait(delay):
                return RunEntry(run_id="-", outcome="stopped")
            delay = min(delay * 2, 30.0)


def silver_plans(pipeline: Pipeline, view: SourceView) -> list[SilverPlan]:
    return [plan_silver(spec, tables, pipeline.file, i)
            for i, (spec, tables) in enumerate(zip(pipeline.tables, view.tables))]


class Runner:
    def __init__(self, pipeline: Pipeline, engine, stop: threading.Event | None = None):
        self.pipeline = pipeline
        self.lake = Lake.open(engine, str(pipeline.root))
        self.state = State(self.lake)
        self.stop = stop or threading.Event()
        # What this run's capture saw, so idle tables advance without a MERGE (heartbeat)
        self.captured_from: str | None = None
        self.changed_tables: set[str] = set()
        self.batches: list[dict] = []  # every bronze and silver commit: rows, seconds (metrics)
        self.registered: set[str] = set()  # silver tables registered by name in this run
        self.schema_changed: list[str] = []  # tables a DDL changed in the last capture pass

    # -- the whole run ---------------------------------------------------------------------
    def run(self, until_caught_up: bool = True, poll_seconds: float = 1.0) -> RunEntry:
        view = inspect_source(self.pipeline)
        for warning in view.warnings:
            log.warning(warning)
        plans = silver_plans(self.pipeline, view)
        checkpoint = self.state.load()
        self._claim_target(checkpoint)
        started = time.monotonic()
        summary = {"run_id": self.state.run_id, "started_at": now(), "outcome": "failed"}
        try:
            self.ensure_bronze(view)
            self._start_capture(view, checkpoint)
            with timed(summary, "snapshot"):
                summary["snapshot_rows"] = self.snapshot(view)
            view = self._refresh_end(view)  # capture reaches past every snapshot watermark
            while not self.stop.is_set():
                with timed(summary, "capture"):
                    captured = self.capture(view, self.state.load(), view.end)
                if self.schema_changed:  # capture stopped after a DDL: merge and go on with
                    view = dataclasses.replace(  # the new definitions (projections checked again)
                        inspect_source(self.pipeline), end=view.end, end_seen_at=view.end_seen_at)
                    plans = silver_plans(self.pipeline, view)
                    self.ensure_bronze(view)
                    with timed(summary, "snapshot"):  # of tables that just began to match
                        if self.snapshot(view):
                            view = self._refresh_end(view)
                with timed(summary, "merge"):
                    merged = self.merge(plans, self.state.load())
                summary["captured_changes"] = summary.get("captured_changes", 0) + captured
                summary["merged_tables"] = sorted(set(summary.get("merged_tables", [])) | set(merged))
                if self.schema_changed:
                    self.schema_changed = []
                    continue
                if until_caught_up or self.stop.wait(poll_seconds):
                    break
                view = self._refresh_end(view)
            summary["outcome"] = "stopped" if self.stop.is_set() else "ok"
            return RunEntry.from_json("last", summary)
        except Exception as exc:
            summary["error"] = str(exc)
            raise
        finally:
            summary["seconds"] = round(time.monotonic() - started, 3)
            try:
                entry = RunEntry.from_json("last", summary)
                self.state.write(entry)
                metrics.write_run(self.pipeline, entry, self.batches[-metrics.MAX_BATCHES:],
                                  self.state.load())
            except Exception:  # noqa: BLE001 - never hide the run's own error
                log.exception("could not record the run outcome")

    def ensure_bronze(self, view: SourceView) -> None:
        bronze.ensure_statements_table(self.lake)
        for table in view.source_tables:
            bronze.ensure_changes_table(self.lake, table)

    def _claim_target(self, checkpoint: Checkpoint) -> None:
        check_owner(checkpoint, self.pipeline.name, self.lake.root)
        if checkpoint.owner is None:
            self.state.write(OwnerEntry(pipeline=self.pipeline.name, file=str(self.pipeline.file)))

    def _refresh_end(self, view: SourceView) -> SourceView:
        with mysql.cursor(self.pipeline.source) as cur:
            view.end, _ = binary_log_status(cur)
        view.end_seen_at = now()
        return view

    # -- phase 1: where capture starts --------------------------------------------------------
    def _start_capture(self, view: SourceView, checkpoint: Checkpoint) -> None:
        """Without a snapshot, capture starts at a place chosen on the first run (startup.py)."""
        source = self.pipeline.source
        if checkpoint.capture is not None or source.startup not in BINLOG_ONLY_STARTUP:
            return
        start = {
            "latest": lambda: view.end,
            "earliest": lambda: view.first_binlog,
            "offset": lambda: startup.offset_position(source, source.startup_offset),
            "timestamp": lambda: startup.timestamp_position(
                source, startup.parse_timestamp(source.startup_timestamp)),
        }[source.startup]()
        self.state.write(CaptureEntry(position=str(start), gtid=self._gtid_at(view, start)),
                         *(TableEntry(table=spec.name, applied=start.offset.text,
                                      snapshot_merged=True) for spec in self.pipeline.tables))
        log.info("capture starts at %s (startup: %s)", start, source.startup)

    def _gtid_at(self, view: SourceView, position: Position) -> str:
        if not view.mariadb:
            return ""
        with mysql.cursor(self.pipeline.source) as cur:
            return gtid_position(cur, position)

    # -- phase 2: snapshot ----------------------------------------------------------------------
    def snapshot(self, view: SourceView) -> int:
        """Read every unfinished split into bronze; returns the rows read."""
        if self.pipeline.source.startup not in ("initial", "snapshot-only"):
            return 0
        checkpoint = self.state.load()
        with mysql.cursor(self.pipeline.source) as cur:  # new tables too (a shard that appeared)
            new = [(t, plan_splits(cur, t, self.pipeline.source.chunk_size))
                   for t in view.source_tables if not checkpoint.splits(t.qualified)]
        if new:
            self.state.write(*(SplitEntry.planned(s) for _, splits in new for s in splits))
            checkpoint = self.state.load()
        pending = [(t, s.split) for t in view.source_tables
                   for s in checkpoint.splits(t.qualified) if not s.done]
        if not pending:
            return 0
        for table in {t.qualified: t for t, _ in pending}.values():
            bronze.ensure_snapshot_table(self.lake, table)
            bronze.drop_unfinished(self.lake, table, [s.split_id for t, s in pending if t is table])
        if self.pipeline.source.snapshot_runner == "spark":
            return self._land_as_spark_tasks(view, pending)
        progress = Progress("snapshot", len(pending))
        with ThreadPoolExecutor(self.pipeline.source.parallelism, "split") as pool:
            rows = sum(pool.map(lambda job: self._read_split(view, *job, progress), pending))
        progress.finish()
        return rows

    def _read_split(self, view: SourceView, table: SourceTable, split: Split,
                    progress: Progress) -> int:
        if self.stop.is_set():  # SIGTERM: splits not started wait for the next run
            return 0

        def write(table, batches, split_id, attempt, offset, read_at) -> int:
            return bronze.write_split(self.lake, table, batches, split_id, attempt, offset,
                                      read_at, on_batch=progress.add_rows)

        entry = land_split(self.pipeline.source, table, split, view.mariadb, write)
        self.state.write(entry)
        progress.split_done()
        return entry.rows

    def _land_as_spark_tasks(self, view: SourceView, pending: list[tuple[SourceTable, Split]]
                             ) -> int:
        """One Spark task per split; state records them together when the job is done."""
        started = time.monotonic()
        log.info("snapshot: %d splits as Spark tasks", len(pending))
        entries = land_as_spark_tasks(self.lake, self.pipeline.source, pending, view.mariadb)
        self.state.write(*entries)
        rows = sum(e.rows for e in entries)
        log.info("snapshot finished: %d splits, %d rows in %.1fs as Spark tasks", len(entries),
                 rows, time.monotonic() - started)
        return rows

    # -- phase 3: binlog capture ----------------------------------------------------------------
    def capture(self, view: SourceView, checkpoint: Checkpoint, stop_at: Position) -> int:
        if self.pipeline.source.startup == "snapshot-only":
            return 0
        saved = checkpoint.capture
        start = saved.at if saved else _lowest_watermark(checkpoint)
        if start is None:
            return 0
        if self.captured_from is None:
            self.captured_from = start.offset.text
        capture = Capture(self.lake, self.state, self.pipeline.source, view.source_tables,
                          view.mariadb, lambda db, table: any(
                              spec.matches(db, table) for spec in self.pipeline.tables),
                          self.stop)
        result = capture.run(checkpoint, start, stop_at, view.end_seen_at,
                             saved.gtid if saved else self._gtid_at(view, start))
        self.changed_tables |= result.changed_tables
        self.schema_changed = result.schema_changed
        self.batches += result.batches
        return result.changes

    # -- phase 4: silver ------------------------------------------------------------------------
    def merge(self, plans: list[SilverPlan], checkpoint: Checkpoint) -> list[str]:
        capture = checkpoint.capture
        snapshot_only = self.pipeline.source.startup == "snapshot-only"
        merged = []
        for plan in plans:
            started = time.monotonic()
            entry = checkpoint.table(plan.spec.name)
            if entry is not None:  # every run, changes or not: silver must hold only what we wrote
                check_untouched(self.lake, plan.spec, entry)
            splits = [s for t in plan.sources for s in checkpoint.splits(t.qualified)]
            window = next_window(entry, splits, capture, snapshot_only=snapshot_only,
                                 history=plan.spec.history,
                                 idle=entry is not None and self._idle(plan, entry.applied))
            if window is None:
                continue
            if not window.idle:
                merge_window(self.lake, plan, window)
            if window.first:  # the whole snapshot went in: one key range per file
                for path in owned_tables(self.lake, plan.spec).values():
                    self.lake.tables.cluster(path, list(plan.key))
            source_time = capture.source_time if capture and window.upto == capture.offset \
                else None
            self.state.write(TableEntry(table=plan.spec.name, applied=window.upto,
                                        snapshot_merged=True, source_time=source_time,
                                        key=list(plan.key),
                                        sources=[t.qualified for t in plan.sources],
                                        **owned_versions(self.lake, plan.spec)))
            faults.point("state.committed")
            self.batches.append({"phase": "merge", "table": plan.spec.name,
                                 "seconds": round(time.monotonic() - started, 3)})
            self._register(plan)
            merged.append(plan.spec.name)
            log.info("silver %s: merged up to %s", plan.spec.name, window.upto)
        return merged

    def _register(self, plan: SilverPlan) -> None:
        target = self.pipeline.target
        if target.schema and plan.spec.name not in self.registered:
            tables = {plan.spec.name: self.lake.silver_path(plan.spec.name)}
            if plan.spec.history:
                tables[f"{plan.spec.name}_history"] = self.lake.history_path(plan.spec.name)
            for table, path in tables.items():
                name = self.lake.engine.register(target.catalog, target.schema, table, path)
                log.info("silver %s: registered as %s", plan.spec.name, name)
            self.registered.add(plan.spec.name)

    def _idle(self, plan: SilverPlan, applied: str) -> bool:
        """True when this run captured all of (applied, now] and none of it touched the table:
        its applied offset then moves on without a MERGE."""
        return self.captured_from is not None and self.captured_from <= applied and \
            not any(t.qualified in self.changed_tables for t in plan.sources) and \
            all(self.lake.tables.exists(p) for p in owned_tables(self.lake, plan.spec).values())


def _lowest_watermark(checkpoint: Checkpoint) -> Position | None:
    marks = [Position.parse(s.watermark_position) for s in checkpoint.all_splits() if s.done]
    return min(marks, key=lambda p: p.offset) if marks else None


@contextmanager
def timed(summary: dict, phase: str):
    """Add the phase's wall time to summary["seconds_<phase>"]."""
    started = time.monotonic()
    try:
        yield
    finally:
        key = f"seconds_{phase}"
        summary[key] = round(summary.get(key, 0.0) + time.monotonic() - started, 3)

