"""One run of a pipeline: source -> bronze -> silver, one phase after the other.

1. connect, read the schemas, check binlog settings and projections (nothing written yet);
2. plan splits for tables that have none, snapshot the unfinished ones in parallel;
3. capture the binlog from where it stopped (first time: the lowest watermark) up to the source
   position seen at start, whole transactions per bronze commit (capture.py);
4. merge each silver table's next window (planner.py, lake/silver/), then record the applied
   offset.
Each phase commits before the next starts and every commit is replay-safe, so a run killed
anywhere is finished by the next one (docs/architecture.md, "Crash points").
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager

import pymysql

from cdc_sql import faults, resnapshot
from cdc_sql.capture import Capture, Policy
from cdc_sql.config.model import Pipeline
from cdc_sql.errors import CdcError, SourceError, TargetError, out_of_space, redacted
from cdc_sql.lake import bronze, first_version, tables
from cdc_sql.lake.lake import Lake
from cdc_sql.lake.silver import route
from cdc_sql.lake.silver.facts import read_statements
from cdc_sql.lake.silver.merge import merge_window
from cdc_sql.lake.silver.ownership import check_untouched, owned_tables, owned_versions
from cdc_sql.lake.silver.plan import (SilverPlan, carries, cascade_parents, cascade_warnings,
                                      chained, read_whole, silver_plans, snapshot_levels,
                                      sources_by_table)
from cdc_sql.lake.state import (CaptureEntry, Checkpoint, OwnerEntry, RunEntry, SplitEntry, State,
                                TableEntry, check_owner)
from cdc_sql.ops import metrics
from cdc_sql import planner
from cdc_sql.planner import chain_merge, next_window
from cdc_sql.progress import Progress
from cdc_sql.snapshot_tasks import land_as_spark_tasks, land_splits
from cdc_sql.source import binlog, failover, mysql, startup
from cdc_sql.source.offsets import Offset, Position, file_sequence
from cdc_sql.source.preflight import SourceView, inspect_source, now
from cdc_sql.source.schema import SourceTable
from cdc_sql.source.splits import Split, group_splits, plan_splits, table_size
from cdc_sql.source.watermarks import binary_log_status, gtid_position

log = logging.getLogger("cdc_sql")
BINLOG_ONLY_STARTUP = ("latest", "earliest", "timestamp", "offset", "gtid")
# Tasks that finish within this many seconds of each other share one state commit. Waiting
# costs nothing: a crash loses only the record, and the work is done again (harmlessly).
STATE_COMMIT_SECONDS = 1.0


def run_pipeline(pipeline: Pipeline, engine, stop: threading.Event, until_caught_up: bool,
                 give_up_after: float = 300.0) -> RunEntry:
    """One run; in follow mode, transient failures (a source restart, a KILL, a network blip,
    a full target) are waited out: the run starts again after 1, 2, 4 ... 30 s, and gives up
    after `give_up_after` seconds without a run that got going. A scheduled run (until caught
    up) fails at once: its scheduler retries."""
    delay, failing_since = 1.0, None
    while True:
        started = time.monotonic()
        try:
            return Runner(pipeline, engine, stop).run(until_caught_up=until_caught_up)
        except CdcError as exc:
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


class Runner:
    def __init__(self, pipeline: Pipeline, engine, stop: threading.Event | None = None):
        self.pipeline = pipeline
        self.lake = Lake.open(engine, pipeline.root, pipeline.engine.sql_only)
        self.state = State(self.lake)
        self.stop = stop or threading.Event()
        # What this run's capture saw, so idle tables advance without a MERGE (heartbeat)
        self.captured_from: str | None = None
        self.changed_tables: set[str] = set()
        self.batches: list[dict] = []  # every bronze and silver commit: rows, seconds (metrics)
        self.registered: set[str] = set()  # silver tables registered by name in this run
        self.schema_changed: list[str] = []  # tables a DDL changed in the last capture pass
        self.resnapshots: list[str] = []  # tables the last pass asked to read again
        self.plans: list[SilverPlan] = []
        self.engine_wanted = True  # start the engine while the source is read (see run())
        self.resume = failover.Resume(False)  # how capture resumes in this run, and from where
        self.resume_from: str | None = None

    # -- the whole run ---------------------------------------------------------------------
    def run(self, until_caught_up: bool = True, poll_seconds: float = 1.0) -> RunEntry:
        try:
            return self._run(until_caught_up, poll_seconds)
        except Exception as exc:
            if out_of_space(exc) and not isinstance(exc, CdcError):
                raise self._full(exc) from None
            raise

    def _run(self, until_caught_up: bool, poll_seconds: float) -> RunEntry:
        view = inspect_source(self.pipeline)
        for warning in view.warnings:
            log.warning(warning)
        plans = self.plans = self._silver_plans(view)
        for warning in cascade_warnings(plans, view):
            log.warning(warning)
        self.engine_wanted = self._wants_engine(plans)
        checkpoint = self.state.load()
        self._claim_target(checkpoint)
        started, full = time.monotonic(), False
        summary = {"run_id": self.state.run_id, "started_at": now(), "outcome": "failed"}
        try:
            view = self._resolve_server(view, checkpoint)
            self.ensure_bronze(view)
            self._start_capture(view, checkpoint)
            with timed(summary, "snapshot"):
                summary["snapshot_rows"] = self.snapshot(view, plans)
            view = self._refresh_end(view)  # capture reaches past every snapshot watermark
            while not self.stop.is_set():
                checkpoint = self.state.load()
                if resnapshot.pending(checkpoint):  # asked for while this run follows
                    with timed(summary, "snapshot"):
                        summary["snapshot_rows"] += self.snapshot(view, plans)
                    view, checkpoint = self._refresh_end(view), self.state.load()
                with timed(summary, "capture"):
                    captured = self.capture(view, checkpoint, view.end)
                if self.schema_changed:  # capture stopped after a DDL: merge and go on with
                    view = dataclasses.replace(  # the new definitions (projections checked again)
                        inspect_source(self.pipeline), end=view.end, end_seen_at=view.end_seen_at,
                        server=view.server, base=view.base)
                    plans = self.plans = self._silver_plans(view)
                    self.engine_wanted = self._wants_engine(plans)
                    self.ensure_bronze(view)
                    with timed(summary, "snapshot"):  # of tables that just began to match
                        if self.snapshot(view, plans):
                            view = self._refresh_end(view)
                with timed(summary, "merge"):
                    merged = self.merge(plans, self.state.load())
                summary["captured_changes"] = summary.get("captured_changes", 0) + captured
                summary["merged_tables"] = sorted(set(summary.get("merged_tables", [])) | set(merged))
                if self.schema_changed or self.resnapshots:  # go on with the new definitions,
                    self.schema_changed = self.resnapshots = []  # or read tables again
                    continue
                if until_caught_up or self.stop.wait(poll_seconds):
                    break
                view = self._refresh_end(view)
            summary["outcome"] = "stopped" if self.stop.is_set() else "ok"
        except Exception as exc:
            summary["error"], full = redacted(str(exc)), out_of_space(exc)
            raise
        finally:
            summary["seconds"] = round(time.monotonic() - started, 3)
            entry = RunEntry.from_json("last", summary)
            try:
                if not full:  # a full target takes no record either (it would fail, noisily)
                    self.state.write(entry)
                    metrics.write_run(self.pipeline, entry,
                                      self.batches[-metrics.MAX_BATCHES:], self.state.load())
            except Exception as exc:  # noqa: BLE001 - never hide the run's own error
                log.warning("could not record the run outcome: %s",
                            (str(exc).strip().splitlines() or [type(exc).__name__])[0])
                log.debug("the traceback", exc_info=True)
        return entry

    def _full(self, exc: BaseException) -> TargetError:
        """The target filled up mid-run: every commit so far is whole (Delta commits are
        atomic, and each phase's are replay-safe), so the run can simply be repeated."""
        detail = next((t for t in ("No space left on device", "Disk quota exceeded")
                       if t.lower() in str(exc).lower()), "out of space")
        return TargetError(f"the target {self.lake.root} is out of space ({detail}): nothing "
                           f"committed is lost; free space, then run again (a run following "
                           f"the binlog retries by itself)")

    def _silver_plans(self, view: SourceView) -> list[SilverPlan]:
        """The silver plans; a table with `on_schema_change: ignore_new_columns` keeps the
        columns its silver has."""
        kept = {}
        for spec in self.pipeline.tables:
            path = self.lake.silver_path(spec.name)
            if spec.on_schema_change == "ignore_new_columns" and self.lake.tables.exists(path):
                kept[spec.name] = set(self.lake.tables.schema(path).names)
        return silver_plans(self.pipeline, view, kept)

    def ensure_bronze(self, view: SourceView) -> None:
        bronze.ensure_statements_table(self.lake)
        missing = [t for t in view.source_tables
                   if not self.lake.tables.exists(self.lake.changes_path(t.db, t.name))]
        tables.each(lambda table: bronze.ensure_changes_table(self.lake, table), missing)

    def _claim_target(self, checkpoint: Checkpoint) -> None:
        check_owner(checkpoint, self.pipeline.name, self.lake.root)
        if checkpoint.owner is None:
            self.state.write(OwnerEntry(pipeline=self.pipeline.name, file=str(self.pipeline.file)))

    def _refresh_end(self, view: SourceView) -> SourceView:
        with mysql.cursor(self.pipeline.source) as cur:
            view.end = dataclasses.replace(binary_log_status(cur)[0], base=view.base)
        view.end_seen_at = now()
        return view

    # -- phase 0: which server, and where on it capture resumes --------------------------------
    def _resolve_server(self, view: SourceView, checkpoint: Checkpoint) -> SourceView:
        """Trust a recorded position only on the server that wrote it, with the GTID there
        unchanged; else resume by GTID (source/failover.py). Where capture cannot go on (a
        purged binlog, a server that is behind), it starts over if every table is to be read
        again. Sets the view's server and base."""
        with mysql.cursor(self.pipeline.source) as cur:
            server = failover.server_identity(cur, view.mariadb)
            self.resume = failover.Resume(False)
            try:
                saved, base = self._resume_here(view, checkpoint, cur, server)
            except SourceError as exc:
                if not {t.qualified for t in view.source_tables} <= \
                        resnapshot.requested(checkpoint):
                    raise
                saved, base = self._start_over(view, checkpoint, cur, server, str(exc))
        self.resume_from = saved.position if saved else None
        return dataclasses.replace(view, server=server, base=base,
                                   end=dataclasses.replace(view.end, base=base))

    def _resume_here(self, view: SourceView, checkpoint: Checkpoint, cur,
                     server: str) -> tuple[CaptureEntry | None, int]:
        """How capture goes on on `server` (self.resume): the capture entry it goes on from
        and the base of this server's file numbers in offsets."""
        saved = checkpoint.capture
        if saved is not None and saved.position and saved.server in ("", server) and \
                resnapshot.purged(saved.at.file, view.first_binlog.file):
            saved = self._purged(view, checkpoint, cur, server)
        if saved is None:  # split watermarks are places in one server's binlog
            others = sorted({s.server for s in checkpoint.all_splits()
                             if s.done and s.server and s.server != server})
            if others:
                raise SourceError(
                    f"the snapshot was read on {', '.join(others)}, but the source is now "
                    f"{server}: the snapshot's binlog watermarks mean nothing there and "
                    f"capture has not begun: {failover.RESNAPSHOT}")
            return None, 0
        if not saved.position:
            return saved, 0
        here = None  # a purged file is not another binlog: reading it says purged
        if saved.gtid and saved.server in ("", server) and \
                file_sequence(saved.at.file) >= file_sequence(view.first_binlog.file):
            here = self._gtid_here(view, cur, saved.at)
        self.resume = failover.decide(saved.server, saved.gtid, str(saved.at), server, here,
                                      view.mariadb)
        if not self.resume.by_gtid:
            return saved, saved.at.base
        cur.execute("SELECT @@global.gtid_binlog_pos" if view.mariadb else
                    "SELECT @@global.gtid_executed")
        failover.check_not_behind(saved.gtid, str(cur.fetchone()[0] or ""), server,
                                  view.mariadb)
        base = failover.file_base(saved.at.offset, view.first_binlog.file)
        log.warning("capture resumes by GTID after %s: %s; offsets number this server's binlog "
                    "files %+d so they follow the old ones", saved.gtid, self.resume.reason, base)
        return saved, base

    def _start_over(self, view: SourceView, checkpoint: Checkpoint, cur, server: str,
                    why: str) -> tuple[CaptureEntry, int]:
        """Capture cannot go on on this server (another one, behind, without a GTID to resume
        from), but every table is to be read again: capture starts over at the server's
        current position, its files numbered on from what was read before, so offsets keep
        growing. Returns the new capture entry and that base."""
        saved = checkpoint.capture
        read = [saved.at.offset] if saved and saved.position else \
            [Offset.parse(s.watermark) for s in checkpoint.all_splits() if s.watermark]
        base = failover.file_base(max(read), view.first_binlog.file) if read else 0
        end = dataclasses.replace(view.end, base=base)
        moved = self._move_capture(saved, end, server, cur, view)
        self.resume = failover.Resume(False)
        log.warning("%s. Every table is being read again: capture starts over at %s", why, end)
        return moved, base

    def _purged(self, view: SourceView, checkpoint: Checkpoint, cur, server: str) -> CaptureEntry:
        """The binlog capture stopped in is gone. With `on_purged_binlog: resnapshot`, capture
        goes on from the oldest binlog the server has, and the source tables that needed the
        purged part are read again (resnapshot.py); else the run stops, saying so."""
        saved = checkpoint.capture
        gone = f"the source purged the binlog capture needs ({saved.at} onwards; its oldest " \
               f"binlog is {view.first_binlog.file})"
        if self.pipeline.source.on_purged_binlog != "resnapshot":
            raise SourceError(f"{gone}: the changes in between are lost to this pipeline. Set "
                              f"source.on_purged_binlog: resnapshot to read the tables again "
                              f"(or run cdc-sql resnapshot), and raise the binlog retention")
        oldest = dataclasses.replace(view.first_binlog, base=saved.at.base)
        plans = silver_plans(self.pipeline, view)
        again = resnapshot.affected_by_purge(checkpoint, sources_by_table(plans),
                                             oldest.offset.text, cascade_parents(plans))
        moved = self._move_capture(saved, oldest, server, cur, view,
                                   *resnapshot.requests(again, gone, now()))
        log.warning("%s: capture goes on from %s; read again: %s", gone, oldest,
                    ", ".join(again) or "no table (none needed the purged part)")
        return moved

    def _move_capture(self, saved: CaptureEntry | None, to: Position, server: str, cur,
                      view: SourceView, *entries) -> CaptureEntry:
        """Capture goes on from `to` on `server`, recorded with `entries` in one state commit;
        rows a run landed past the old position (`landing`) are deleted from bronze first."""
        if saved is not None and saved.position:
            bronze.drop_after(self.lake, [tuple(t) for t in saved.landing], saved.at.offset)
        moved = CaptureEntry(position=str(to), server=server,
                             gtid=self._gtid_here(view, cur, to, strict=True))
        self.state.write(moved, *entries)
        return moved

    def _gtid_here(self, view: SourceView, cur, position: Position, strict: bool = False) -> str:
        """The GTID position at `position` on this server: MariaDB's BINLOG_GTID_POS, MySQL's
        executed set read from the binlog ('' without GTIDs, or, unless `strict`, where the
        server has no such place)."""
        try:
            if view.mariadb:
                return gtid_position(cur, position)
            return binlog.mysql_gtids_at(self.pipeline.source, position) if view.gtids else ""
        except (pymysql.err.MySQLError, SourceError):
            if strict:
                raise
            return ""

    # -- phase 1: where capture starts --------------------------------------------------------
    def _start_capture(self, view: SourceView, checkpoint: Checkpoint) -> None:
        """Without a snapshot, capture starts at a place chosen on the first run (startup.py)."""
        source = self.pipeline.source
        if checkpoint.capture is not None or source.startup not in BINLOG_ONLY_STARTUP:
            return
        gtid = None
        if source.startup == "gtid":  # the server finds the place; the position there is given
            found, gtid = startup.gtid_position(source, source.startup_gtid, view.mariadb)
            start, gtid = (found, gtid) if found else (view.end, None)
        else:
            start = {
                "latest": lambda: view.end,
                "earliest": lambda: view.first_binlog,
                "offset": lambda: startup.offset_position(source, source.startup_offset),
                "timestamp": lambda: startup.timestamp_position(
                    source, startup.parse_timestamp(source.startup_timestamp)),
            }[source.startup]()
        self.state.write(CaptureEntry(position=str(start), server=view.server,
                                      gtid=gtid if gtid is not None else
                                      self._gtid_at(view, start)),
                         *(TableEntry(table=spec.name, applied=start.offset.text,
                                      snapshot_merged=True) for spec in self.pipeline.tables))
        log.info("capture starts at %s (startup: %s)", start, source.startup)

    def _gtid_at(self, view: SourceView, position: Position) -> str:
        with mysql.cursor(self.pipeline.source) as cur:
            return self._gtid_here(view, cur, position, strict=True)

    # -- phase 2: snapshot ----------------------------------------------------------------------
    def snapshot(self, view: SourceView, plans: list[SilverPlan]) -> int:
        """Prepare requested re-snapshots, then read every unfinished split into bronze (`plans`:
        the pipeline's silver tables over `view`); returns the rows read."""
        source = self.pipeline.source
        checkpoint = self._prepare_resnapshots(view, self.state.load())
        initial = source.startup in ("initial", "snapshot-only")
        sizes = {}
        with mysql.cursor(source) as cur:  # new tables too (a shard that appeared)
            new = [(t, plan_splits(cur, t, source.chunk_size, source.parallelism))
                   for t in view.source_tables if initial and not checkpoint.splits(t.qualified)]
            if new:
                self.state.write(*(SplitEntry.planned(s) for _, splits in new for s in splits))
                checkpoint = self.state.load()
            pending_tables = [t for t in view.source_tables
                              if any(not s.done for s in checkpoint.splits(t.qualified))]
            for table in pending_tables:
                sizes[table.qualified] = table_size(cur, table)[0]
        whole = read_whole(plans)  # all splits again, in one read
        unfinished = {t.qualified: [s.split for s in checkpoint.splits(t.qualified)
                                    if not s.done or t.qualified in whole]
                      for t in pending_tables}

        def prepare(table: SourceTable) -> None:
            bronze.ensure_snapshot_table(self.lake, table)
            bronze.drop_unfinished(self.lake, table,
                                   [s.split_id for s in unfinished[table.qualified]])

        tables.each(prepare, pending_tables)
        pending = [(table, group) for table in pending_tables for group in (
            [sorted(unfinished[table.qualified], key=lambda s: s.split_id)]
            if table.qualified in whole else
            group_splits(unfinished[table.qualified], sizes[table.qualified], source.parallelism))]
        levels = snapshot_levels(plans)  # cascades set off cascades: parents first
        firsts = route.written_ahead(self.lake, plans) if pending else {}
        rows = 0
        for level in sorted({levels.get(table.qualified, 0) for table, _ in pending}):
            rows += self._read_pending(view, [(table, group) for table, group in pending
                                              if levels.get(table.qualified, 0) == level],
                                       firsts)
        return rows

    def _read_pending(self, view: SourceView, pending: list[tuple[SourceTable, list[Split]]],
                      firsts: dict[str, list[first_version.Target]]) -> int:
        if self.pipeline.source.snapshot_runner == "spark":
            return self._land_as_spark_tasks(view, pending)
        progress = Progress("snapshot", sum(len(group) for _, group in pending))
        with ThreadPoolExecutor(self.pipeline.source.parallelism, "split") as pool:
            futures = [pool.submit(self._read_splits, view, table, group, progress,
                                   firsts.get(table.qualified, []))
                       for table, group in pending]
            if self.engine_wanted:
                self.lake.engine.prepare()  # while the readers wait on the source
            entries = self._record_as_done(futures)
        progress.finish()
        return sum(e.rows for e in entries)

    def _prepare_resnapshots(self, view: SourceView, checkpoint: Checkpoint) -> Checkpoint:
        """Requested re-snapshots: the tables' bronze emptied, then their new splits, start and
        silver marks in one state commit (resnapshot.py)."""
        if not resnapshot.pending(checkpoint):
            return checkpoint
        source = self.pipeline.source
        wanted = resnapshot.requested(checkpoint)
        chosen = [t for t in view.source_tables if t.qualified in wanted]
        with mysql.cursor(source) as cur:  # the new splits' watermarks all come after it
            start = dataclasses.replace(binary_log_status(cur)[0], base=view.base).offset.text
            planned = {t.qualified: plan_splits(cur, t, source.chunk_size, source.parallelism)
                       for t in chosen}
        tables.each(lambda table: bronze.reset(self.lake, table), chosen)
        faults.point("resnapshot.reset")  # bronze emptied, state not told: prepared again
        silver = [spec.name for spec in self.pipeline.tables
                  if any(spec.matches(t.db, t.name) for t in chosen)]
        self.state.write(*resnapshot.prepared(checkpoint, planned, start, silver))
        log.warning("re-snapshot of %s: capture keeps their changes after %s; %s stay as they "
                    "are until the new snapshot replaces them", ", ".join(sorted(planned)) or
                    "no table that still exists", start, ", ".join(silver) or "no silver table")
        return self.state.load()

    def _read_splits(self, view: SourceView, table: SourceTable, splits: list[Split],
                     progress: Progress, firsts: list[first_version.Target]
                     ) -> list[SplitEntry]:
        """A group of splits into bronze (and into silver's first version, lake/
        first_version.py); returns their state entries."""
        if self.stop.is_set():  # SIGTERM: splits not started wait for the next run
            return []

        def write(table, batches, attempt, offset, read_at) -> dict[int, int]:
            with first_version.Writer(firsts, attempt, [s.split_id for s in splits], offset,
                                      read_at) as first:
                return bronze.write_splits(self.lake, table, first.tee(batches), attempt,
                                           offset, read_at, on_batch=progress.add_rows)

        entries = land_splits(self.pipeline.source, table, splits, view.mariadb, write, view.base)
        progress.split_done(len(entries))
        return entries

    def _record_as_done(self, futures: list[Future]) -> list:
        """Wait for tasks that return state entries; whatever finished together is recorded in
        one state commit (a thousand small tables do not make a thousand commits). Every task
        runs to its end; the first failure is raised after the others are recorded."""
        recorded, entries, failure, pending = [], [], None, set(futures)
        last_commit = 0.0  # the first task to finish is recorded at once
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED,
                                 timeout=max(0.0, last_commit + STATE_COMMIT_SECONDS -
                                             time.monotonic()) if entries else None)
            for future in done:
                try:
                    entries += future.result()
                except Exception as exc:  # noqa: BLE001 - raised below, once the rest is safe
                    failure = failure or exc
            if entries and (not pending or
                            time.monotonic() >= last_commit + STATE_COMMIT_SECONDS):
                self.state.write(*entries)
                faults.point("state.committed")
                recorded += entries
                entries, last_commit = [], time.monotonic()
        if failure is not None:
            raise failure
        return recorded

    def _land_as_spark_tasks(self, view: SourceView,
                             pending: list[tuple[SourceTable, list[Split]]]) -> int:
        """One Spark task per group of splits; state records them together when the job is
        done."""
        started = time.monotonic()
        log.info("snapshot: %d groups of splits as Spark tasks", len(pending))
        entries = land_as_spark_tasks(self.lake, self.pipeline.source, pending, view.mariadb,
                                      view.base)
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
        start = saved.at if saved else planner.lowest_watermark(checkpoint.all_splits())
        if start is None:
            return 0
        if self.captured_from is None:
            self.captured_from = start.offset.text
        if self.engine_wanted:
            self.lake.engine.prepare()  # while the binlog is read
        capture = Capture(self.lake, self.state, self.pipeline.source, view.source_tables,
                          view.mariadb, lambda db, table: any(
                              spec.matches(db, table) for spec in self.pipeline.tables),
                          self.stop, view.server, self._policy(), view.read_at)
        # By GTID until a place on this server is recorded (the saved position moves on).
        by_gtid = self.resume.by_gtid and saved is not None and \
            saved.position == self.resume_from
        result = capture.run(checkpoint, start, stop_at, view.end_seen_at,
                             saved.gtid if saved else self._gtid_at(view, start),
                             by_gtid=by_gtid, base=view.base)
        self.changed_tables |= result.changed_tables
        self.schema_changed = result.schema_changed
        self.resnapshots = result.resnapshots
        self.batches += result.batches
        return result.changes

    # -- phase 4: silver ------------------------------------------------------------------------
    def merge(self, plans: list[SilverPlan], checkpoint: Checkpoint) -> list[str]:
        """Merge each silver table's next window, `target.parallelism` tables at once (a group
        of tables whose cascades set off cascades as one); returns the tables that moved."""
        workers = max(1, min(self.pipeline.target.parallelism, len(plans)))
        statements = read_statements(self.lake)
        groups = [] if self.pipeline.source.startup == "snapshot-only" else chained(plans)
        grouped = {plan.spec.name for group in groups for plan in group}
        with ThreadPoolExecutor(workers, "merge") as pool:
            entries = self._record_as_done(
                [pool.submit(self._merge_chain, group, checkpoint, statements)
                 for group in groups] +
                [pool.submit(self._merge_table, plan, checkpoint, statements) for plan in plans
                 if plan.spec.name not in grouped])
        return [e.table for e in entries]

    def _merge_table(self, plan: SilverPlan, checkpoint: Checkpoint,
                     statements: list[tuple]) -> list[TableEntry]:
        """One table's window into silver; returns its state entry (none without a window)."""
        window = self._window(plan, checkpoint, idle=True)
        return [] if window is None else [self._merged(plan, checkpoint, window, statements)[0]]

    def _merge_chain(self, group: list[SilverPlan], checkpoint: Checkpoint,
                     statements: list[tuple]) -> list[TableEntry]:
        """Tables whose cascades set off cascades, parents first, up to one U: each passes the
        keys its cascades deleted or changed on to the next. Their state entries commit
        together, so a replay works the same cascades out again. All wait while one of them
        waits for its snapshot; a table whose window starts before a parent's (added later,
        say) cannot get that parent's moves: they then merge on their own, with a warning."""
        windows = [self._window(plan, checkpoint, idle=False) for plan in group]
        how = chain_merge([(p.sources[0].qualified, tuple(fk.parent for fk in p.cascades), w,
                            planner.caught_up(checkpoint.table(p.spec.name), checkpoint.capture))
                           for p, w in zip(group, windows)])
        ready = [(p, w) for p, w in zip(group, windows) if w is not None]
        if how == "wait":
            return []
        if how == "apart":
            log.warning("silver %s: a window starts before its parent's, so cascades set off "
                        "by cascades are not applied to it this once: run `cdc-sql verify`",
                        ", ".join(p.spec.name for p, _ in ready))
            return [self._merged(p, checkpoint, w, statements)[0] for p, w in ready]
        entries, moves = [], []
        for plan, window in ready:
            entry, mine = self._merged(plan, checkpoint, window, statements, moves)
            entries.append(entry)
            moves += mine
        return entries

    def _policy(self) -> Policy:
        """What capture does where rows change without row events (capture.Policy)."""
        plans, specs = self.plans, self.pipeline.tables

        def widen(tables: list[str]) -> list[str]:
            names = [p.spec.name for p in plans if any(s.qualified in tables for s in p.sources)]
            found = resnapshot.closure(names, sources_by_table(plans), cascade_parents(plans))[1]
            return sorted(set(found) | set(tables))

        def on_change(db: str, table: str) -> str:
            found = {s.on_schema_change for s in specs if s.matches(db, table)}
            return next((p for p in ("stop", "resnapshot", "ignore_new_columns") if p in found),
                        "evolve")

        return Policy(
            on_change=on_change,
            cannot_follow=lambda table: bronze.cannot_hold(self.lake, table),
            carried=lambda db, table, column: carries(plans, f"{db}.{table}", column),
            widen=widen)

    def _window(self, plan: SilverPlan, checkpoint: Checkpoint, idle: bool):
        """The table's next window (planner.py); None when it must wait (also while a
        re-snapshot of one of its source tables is asked for and not yet prepared: rows
        changed without row events stay out of silver until it replaces them)."""
        if any(t.qualified in resnapshot.requested(checkpoint) for t in plan.sources):
            return None
        entry = checkpoint.table(plan.spec.name)
        if entry is not None:  # every run, changes or not: silver must hold only what we wrote
            check_untouched(self.lake, plan.spec, entry)
        splits = [s for t in plan.sources for s in checkpoint.splits(t.qualified)]
        return next_window(entry, splits, checkpoint.capture,
                           snapshot_only=self.pipeline.source.startup == "snapshot-only",
                           history=plan.spec.history,
                           idle=idle and entry is not None and self._idle(plan, entry.applied))

    def _merged(self, plan: SilverPlan, checkpoint: Checkpoint, window, statements: list[tuple],
                cascading: list = ()) -> tuple[TableEntry, list]:
        """The window into silver: the table's state entry, and the keys its cascades deleted
        or changed."""
        started = time.monotonic()
        capture, entry = checkpoint.capture, checkpoint.table(plan.spec.name)
        moves = []
        if not window.idle:
            moves = merge_window(self.lake, plan, window, statements,
                                 entry.silver_version if entry is not None else None, cascading)
        source_time = capture.source_time if capture and window.upto == capture.offset else None
        self.batches.append({"phase": "merge", "table": plan.spec.name,
                             "seconds": round(time.monotonic() - started, 3)})
        self._register(plan)
        log.info("silver %s: merged up to %s", plan.spec.name, window.upto)
        return TableEntry(table=plan.spec.name, applied=window.upto, snapshot_merged=True,
                          source_time=source_time, key=list(plan.key),
                          sources=[t.qualified for t in plan.sources],
                          cascade_parents=sorted({fk.parent for fk in plan.cascades}),
                          **owned_versions(self.lake, plan.spec)), moves

    def _wants_engine(self, plans: list[SilverPlan]) -> bool:
        """Whether this run will use the engine whatever the size of its windows (tables named
        in a catalog, tables this process cannot merge): then it starts while the source is
        read; otherwise on first use, if ever."""
        return bool(self.pipeline.target.schema) or route.engine_wanted(self.lake, plans)

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
        """planner.idle, with what this run captured and whether the table's tables exist."""
        reads = [t.qualified for t in plan.sources] + [fk.parent for fk in plan.cascades]
        return planner.idle(self.captured_from, applied, reads, self.changed_tables,
                    all(self.lake.tables.exists(p)
                        for p in owned_tables(self.lake, plan.spec).values()))


@contextmanager
def timed(summary: dict, phase: str):
    """Add the phase's wall time to summary["seconds_<phase>"]."""
    started = time.monotonic()
    try:
        yield
    finally:
        key = f"seconds_{phase}"
        summary[key] = round(summary.get(key, 0.0) + time.monotonic() - started, 3)

