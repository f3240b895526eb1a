"""One run of a pipeline: source -> bronze -> silver, one phase after the other.

1. connect, read the schemas, check binlog settings and projections (nothing written yet);
2. plan splits for tables that have none, snapshot the unfinished ones in parallel;
3. capture the binlog from where it stopped (first time: the lowest watermark) up to the source
   position seen at start, whole transactions per bronze commit;
4. merge each silver table's ready window, then record the applied offset.
Each phase commits before the next starts and every commit is replay-safe, so a run killed
anywhere is finished by the next one.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import threading
import time
from contextlib import contextmanager
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from cdc_sql import faults, metrics
from cdc_sql.config.model import Pipeline
from cdc_sql.errors import SourceError
from cdc_sql.lake import bronze
from cdc_sql.lake.silver import (SilverPlan, check_untouched, history_path, merge_batch,
                                 merge_snapshot, owned_tables, owned_versions, plan_silver,
                                 silver_path)
from cdc_sql.lake.state import Checkpoint, State, check_owner
from cdc_sql.progress import Progress
from cdc_sql.snapshot_tasks import land_as_spark_tasks, land_split
from cdc_sql.source import mysql, preflight, startup
from cdc_sql.source.binlog import BinlogReader
from cdc_sql.source.gtid import GtidSet, GtidWatermarks
from cdc_sql.source.offsets import Position
from cdc_sql.source.schema import SourceTable, read_tables
from cdc_sql.source.splits import Split, plan_splits
from cdc_sql.source.watermarks import binary_log_status

log = logging.getLogger("cdc_sql")
BINLOG_ONLY_STARTUP = ("latest", "earliest", "timestamp", "offset")


@dataclass
class SourceView:
    """What the source told us at the start of a run."""

    mariadb: bool
    plans: list[SilverPlan]
    end: Position                       # the binlog end when the run started
    first_binlog: Position
    warnings: list[str] = field(default_factory=list)
    end_seen_at: str = field(default_factory=lambda: _now())  # when `end` was read

    @property
    def source_tables(self) -> list[SourceTable]:
        return [t for plan in self.plans for t in plan.sources]


def inspect_source(pipeline: Pipeline) -> SourceView:
    """Everything `validate` checks against a live source; raises with what to fix."""
    with mysql.cursor(pipeline.source) as cur:
        mariadb = mysql.is_mariadb(cur)
        warnings = check_binlog_settings(cur, pipeline.source.startup)
        if pipeline.source.startup != "snapshot-only":
            warnings += check_replication_access(cur, pipeline.source, mariadb)
        plans = [plan_silver(spec, read_tables(cur, spec), pipeline.file, i)
                 for i, spec in enumerate(pipeline.tables)]
        end, _ = binary_log_status(cur)
        cur.execute("SHOW BINARY LOGS")
        first_binlog = Position(cur.fetchone()[0], 4)
        if not mariadb:
            cur.execute("SELECT @@global.gtid_mode")
            if str(cur.fetchone()[0]).upper() != "ON":
                warnings.append("MySQL source without gtid_mode=ON: snapshot watermarks are "
                                "binlog positions, which group commit can make unsafe under "
                                "heavy writes; turn GTIDs on for exact watermarks")
    return SourceView(mariadb, plans, end, first_binlog, warnings)


def check_binlog_settings(cur, startup: str) -> list[str]:
    found = mysql.variables(cur, "log_bin", "binlog_format", "binlog_row_image",
                            "binlog_row_metadata")
    needed = {"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL"}
    wrong = [f"{name}={found.get(name, 'unset')} (needs {value})"
             for name, value in needed.items() if found.get(name, "").upper() != value]
    if wrong and startup != "snapshot-only":
        raise SourceError("the source's binlog cannot feed CDC: " + ", ".join(wrong) +
                          ". Start the server with --log-bin --binlog-format=ROW "
                          "--binlog-row-image=FULL --binlog-row-metadata=FULL")
    if found.get("binlog_row_metadata", "FULL").upper() != "FULL":
        return ["binlog_row_metadata is not FULL: column names come from the current schema, "
                "which is wrong for events written before a column change"]
    return []


def check_replication_access(cur, source, mariadb: bool) -> list[str]:
    """Grants for reading the binlog, and no other replica using our server_id."""
    import pymysql

    monitor = preflight.monitor_privilege(mariadb)
    grant = preflight.binlog_grant(source.user, mariadb)
    try:
        cur.execute("SHOW MASTER STATUS")
        cur.fetchall()
    except pymysql.err.OperationalError as exc:
        if exc.args[0] == 1227:
            raise SourceError(f"user {source.user} cannot read the binlog position (needs "
                              f"{monitor}); grant what cdc-sql needs: {grant}") from None
        raise
    cur.execute("SHOW GRANTS")
    statements = [row[0].upper() for row in cur.fetchall()]  # never shown: they hold hashes
    via_roles = any(s.startswith("GRANT `") and " ON " not in s for s in statements)
    if not via_roles and not any("REPLICATION SLAVE" in s or "ALL PRIVILEGES ON *.*" in s
                                 for s in statements):
        raise SourceError(f"user {source.user} lacks REPLICATION SLAVE, needed to read the "
                          f"binlog; grant what cdc-sql needs: {grant}")
    try:
        cur.execute("SHOW SLAVE HOSTS")
        hosts = cur.fetchall()
    except pymysql.err.OperationalError:
        return ["cannot list the source's replicas (needs REPLICATION MASTER ADMIN on MariaDB, "
                "REPLICATION SLAVE on MySQL), so source.server_id was not checked for clashes"]
    for row in hosts:
        if int(row[0]) == source.server_id:
            raise SourceError(
                f"source.server_id {source.server_id} is already used by a replica of the source "
                f"(host {row[1] or 'unknown'}); two binlog clients with one server_id cut each "
                f"other off: give each pipeline its own server_id")
    return []


def run_pipeline(pipeline: Pipeline, engine, stop: threading.Event, until_caught_up: bool,
                 give_up_after: float = 300.0) -> dict:
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
            now = time.monotonic()
            if now - started > 60:  # that run got going: a new outage
                delay, failing_since = 1.0, None
            failing_since = failing_since or started
            if until_caught_up or not exc.transient or now - failing_since > give_up_after:
                raise
            log.warning("%s: running again in %.0f s (follow mode gives up after %.0f s of "
                        "failures)", exc, delay, give_up_after)
            if stop.wait(delay):
                return {"run_id": "-", "outcome": "stopped"}
            delay = min(delay * 2, 30.0)


class Runner:
    def __init__(self, pipeline: Pipeline, engine, stop: threading.Event | None = None):
        self.pipeline, self.engine = pipeline, engine
        self.root = str(pipeline.root)
        self.state = State(engine, self.root)
        self.stop = stop or threading.Event()
        # What this run's capture saw, so idle tables advance without a MERGE (heartbeat)
        self.captured_from: str | None = None
        self.changed_tables: set[str] = set()
        self.batches: list[dict] = []  # every bronze and silver commit: rows, seconds (metrics)
        self.registered: set[str] = set()  # silver tables registered by name in this run
        self.schema_changed: list[str] = []  # tables a DDL changed in the last capture pass

    # -- the whole run ---------------------------------------------------------------------
    def run(self, until_caught_up: bool = True, poll_seconds: float = 1.0) -> dict:
        view = inspect_source(self.pipeline)
        for warning in view.warnings:
            log.warning(warning)
        checkpoint = self.state.load()
        self._claim_target(checkpoint)
        started = time.monotonic()
        summary = {"run_id": self.state.run_id, "started_at": _now(), "outcome": "failed"}
        try:
            bronze.ensure_binlog_table(self.engine, self.root)
            self._start_capture(view, checkpoint)
            with timed(summary, "snapshot"):
                summary["snapshot_rows"] = self.snapshot(view)
            view = self._refresh_end(view)  # capture reaches past every snapshot watermark
            while not self.stop.is_set():
                checkpoint = self.state.load()
                with timed(summary, "capture"):
                    captured = self.capture(view, checkpoint, view.end)
                if self.schema_changed:  # capture stopped after a DDL: merge and go on with
                    view = dataclasses.replace(  # the new definitions (projections checked again)
                        inspect_source(self.pipeline), end=view.end, end_seen_at=view.end_seen_at)
                    with timed(summary, "snapshot"):  # of tables that just began to match
                        if self.snapshot(view):
                            view = self._refresh_end(view)
                with timed(summary, "merge"):
                    merged = self.merge(view, self.state.load())
                summary["captured_changes"] = summary.get("captured_changes", 0) + captured
                summary["merged_tables"] = sorted(set(summary.get("merged_tables", [])) | set(merged))
                if self.schema_changed:
                    self.schema_changed = []
                    continue
                if until_caught_up or self.stop.wait(poll_seconds):
                    break
                view = self._refresh_end(view)
            summary["outcome"] = "stopped" if self.stop.is_set() else "ok"
            return summary
        except Exception as exc:
            summary["error"] = str(exc)
            raise
        finally:
            summary["seconds"] = round(time.monotonic() - started, 3)
            summary["batches"] = self.batches[-metrics.MAX_BATCHES:]
            try:
                self.state.write(("run", "last", {k: v for k, v in summary.items()
                                                  if k != "batches"}))
                metrics.write_run(self.pipeline, summary, self.state.load())
            except Exception:  # noqa: BLE001 - never hide the run's own error
                log.exception("could not record the run outcome")

    def _claim_target(self, checkpoint: Checkpoint) -> None:
        check_owner(checkpoint, self.pipeline.name, self.root)
        if not checkpoint.get("pipeline", "owner"):
            self.state.write(("pipeline", "owner", {"name": self.pipeline.name,
                                                    "file": str(self.pipeline.file)}))

    def _refresh_end(self, view: SourceView) -> SourceView:
        with mysql.cursor(self.pipeline.source) as cur:
            view.end, _ = binary_log_status(cur)
        view.end_seen_at = _now()
        return view

    # -- phase 1: where capture starts --------------------------------------------------------
    def _start_capture(self, view: SourceView, checkpoint: Checkpoint) -> None:
        """Without a snapshot, capture starts at a place chosen on the first run (startup.py)."""
        source = self.pipeline.source
        if checkpoint.get("capture", "binlog") or source.startup not in BINLOG_ONLY_STARTUP:
            return
        start = {
            "latest": lambda: view.end,
            "earliest": lambda: view.first_binlog,
            "offset": lambda: startup.offset_position(source, source.startup_offset),
            "timestamp": lambda: startup.timestamp_position(
                source, startup.parse_timestamp(source.startup_timestamp)),
        }[source.startup]()
        self.state.write(("capture", "binlog", {"position": str(start)}),
                         *(("table", p.spec.name, {"applied": start.offset.text,
                                                   "snapshot_merged": True}) for p in view.plans))
        log.info("capture starts at %s (startup: %s)", start, source.startup)

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
            self.state.write(*(("split", s.name, {**s.to_json(), "status": "planned"})
                               for _, splits in new for s in splits))
            checkpoint = self.state.load()
        pending = [(t, Split.from_json(s)) for t in view.source_tables
                   for s in checkpoint.splits(t.qualified) if s["status"] != "done"]
        if not pending:
            return 0
        for table in {t.qualified: t for t, _ in pending}.values():
            bronze.ensure_snapshot_table(self.engine, self.root, table)
            bronze.drop_unfinished(self.engine, self.root, table,
                                   [s.split_id for t, s in pending if t is table])
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
            return bronze.write_split(self.engine, self.root, table, batches, split_id, attempt,
                                      offset, read_at, on_batch=progress.add_rows)

        entry = land_split(self.pipeline.source, table, split, view.mariadb, write)
        self.state.write(("split", split.name, entry))
        progress.split_done()
        return entry["rows"]

    def _land_as_spark_tasks(self, view: SourceView, pending: list[tuple[SourceTable, Split]]
                             ) -> int:
        """One Spark task per split; state records them together when the job is done."""
        started = time.monotonic()
        log.info("snapshot: %d splits as Spark tasks", len(pending))
        entries = land_as_spark_tasks(self.engine, self.root, self.pipeline.source, pending,
                                      view.mariadb)
        self.state.write(*(("split", Split.from_json(e).name, e) for e in entries))
        rows = sum(e["rows"] for e in entries)
        log.info("snapshot finished: %d splits, %d rows in %.1fs as Spark tasks", len(entries),
                 rows, time.monotonic() - started)
        return rows

    # -- phase 3: binlog capture ----------------------------------------------------------------
    def capture(self, view: SourceView, checkpoint: Checkpoint, stop_at: Position) -> int:
        if self.pipeline.source.startup == "snapshot-only":
            return 0
        saved = checkpoint.get("capture", "binlog")
        start = Position.parse(saved["position"]) if saved else self._lowest_watermark(checkpoint)
        if start is None:
            return 0
        start = bronze.resume_after(self.engine, self.root, start)
        if self.captured_from is None:
            self.captured_from = start.offset.text
        if start.offset >= stop_at.offset:
            if not saved or Position.parse(saved["position"]) != start:
                self._flush([], start, view.end_seen_at)
            return 0
        pending = {name: s for name, s in checkpoint.of_kind("split").items()
                   if s.get("status") == "done" and not s.get("watermark")}
        marks = GtidWatermarks({name: GtidSet.parse(s["watermark_gtid"])
                                for name, s in pending.items()})
        reader = BinlogReader(self.pipeline.source, view.source_tables, start, stop_at,
                              gtid_marks=marks, matches=lambda db, table: any(
                                  spec.matches(db, table) for spec in self.pipeline.tables))
        source = self.pipeline.source
        changes: list[dict] = []
        total, size, last_flush = 0, 0, time.monotonic()
        try:
            for txn in reader.transactions():  # a batch closes only between transactions
                for change in txn.changes:
                    change["txn_end"] = str(txn.end)
                changes.extend(txn.changes)
                self.changed_tables.update(f"{c['db']}.{c['tbl']}" for c in txn.changes)
                size += txn.size
                if len(changes) >= source.binlog_batch_rows or size >= source.binlog_batch_bytes \
                        or time.monotonic() - last_flush >= source.binlog_batch_seconds:
                    total += self._flush(changes, reader.position, reader.source_time, pending,
                                         marks)
                    changes, size, last_flush = [], 0, time.monotonic()
                if self.stop.is_set():
                    break
            caught_up = reader.position.offset >= stop_at.offset
            total += self._flush(changes, reader.position,
                                 view.end_seen_at if caught_up else reader.source_time,
                                 pending, marks)
        finally:
            reader.close()
        self.schema_changed = reader.schema_changed
        log.info("binlog: %d changes captured, now at %s", total, reader.position)
        if self.schema_changed:
            log.info("binlog: DDL on %s at %s; reading the tables' definitions again",
                     ", ".join(self.schema_changed), reader.position)
        return total

    def _flush(self, changes: list[dict], position: Position, source_time: str | None,
               pending: dict | None = None, marks: GtidWatermarks | None = None) -> int:
        """Bronze first, then state: capture position and GTID watermarks resolved so far.
        `source_time`: when the source was last known to be at `position` (for lag)."""
        started = time.monotonic()
        bronze.append_changes(self.engine, self.root, changes)
        faults.point("bronze.appended")  # bronze has the batch, state not yet
        resolved = [("split", name, {**pending[name], "watermark": found.offset.text})
                    for name, found in (marks.resolved.items() if marks else ())
                    if pending and not pending[name].get("watermark")]
        for _, name, value in resolved:
            pending[name] = value
        self.state.write(("capture", "binlog", {"position": str(position),
                                                "source_time": source_time}), *resolved)
        self.batches.append({"phase": "capture", "rows": len(changes),
                             "seconds": round(time.monotonic() - started, 3)})
        return len(changes)

    def _lowest_watermark(self, checkpoint: Checkpoint) -> Position | None:
        marks = [Position.parse(s["watermark_position"]) for s in checkpoint.of_kind("split").values()
                 if s.get("status") == "done"]
        return min(marks, key=lambda p: p.offset) if marks else None

    # -- phase 4: silver ------------------------------------------------------------------------
    def merge(self, view: SourceView, checkpoint: Checkpoint) -> list[str]:
        capture = checkpoint.get("capture", "binlog")
        snapshot_only = self.pipeline.source.startup == "snapshot-only"
        merged = []
        for plan in view.plans:
            started = time.monotonic()
            table_state = checkpoint.get("table", plan.spec.name)
            if table_state:  # every run, changes or not: silver must hold only what we wrote
                check_untouched(self.engine, self.root, plan.spec, table_state)
            if table_state and table_state.get("snapshot_merged"):
                applied = table_state["applied"]
                if not capture or capture_offset(capture) <= applied:
                    continue
                upto = capture_offset(capture)
                # Splits past the applied offset: a table that began to match later (a new
                # shard); its rows join with the batch that moves past their watermarks.
                fresh = [s for t in plan.sources for s in checkpoint.splits(t.qualified)
                         if not s.get("watermark") or s["watermark"] > applied]
                if any(s["status"] != "done" or not s.get("watermark") for s in fresh) or \
                        fresh and upto < max(s["watermark"] for s in fresh):
                    continue
                if fresh:
                    merge_batch(self.engine, self.root, plan, applied, upto, _done_splits(fresh))
                elif not self._idle(plan, applied):
                    merge_batch(self.engine, self.root, plan, applied, upto)
            else:
                splits = [s for t in plan.sources for s in checkpoint.splits(t.qualified)]
                if not splits or any(s["status"] != "done" or not s.get("watermark")
                                     for s in splits):
                    continue  # snapshot unfinished, or a GTID watermark not yet resolved
                highest = max(s["watermark"] for s in splits)
                if plan.spec.history:  # history starts where every split's read had ended
                    highest = history_start = max(highest, *(s.get("read_end", "") for s in splits))
                else:
                    history_start = None
                if snapshot_only:
                    upto = highest
                elif not capture or capture_offset(capture) < highest:
                    continue  # capture has not reached every split's watermark yet
                else:
                    upto = capture_offset(capture)
                merge_snapshot(self.engine, self.root, plan, upto, _done_splits(splits),
                               history_start)
                for path in owned_tables(self.root, plan.spec).values():  # the whole snapshot
                    self.engine.cluster(path, list(plan.key))  # went in: one range per file
            source_time = capture.get("source_time") if capture and upto == capture_offset(
                capture) else None
            self.state.write(("table", plan.spec.name, {
                "applied": upto, "snapshot_merged": True, "source_time": source_time,
                "key": list(plan.key), **owned_versions(self.engine, self.root, plan.spec)}))
            faults.point("state.committed")
            self.batches.append({"phase": "merge", "table": plan.spec.name,
                                 "seconds": round(time.monotonic() - started, 3)})
            self._register(plan)
            merged.append(plan.spec.name)
            log.info("silver %s: merged up to %s", plan.spec.name, upto)
        return merged

    def _register(self, plan: SilverPlan) -> None:
        target = self.pipeline.target
        if target.schema and plan.spec.name not in self.registered:
            tables = {plan.spec.name: silver_path(self.root, plan.spec.name)}
            if plan.spec.history:
                tables[f"{plan.spec.name}_history"] = history_path(self.root, plan.spec.name)
            for table, path in tables.items():
                name = self.engine.register(target.catalog, target.schema, table, path)
                log.info("silver %s: registered as %s", plan.spec.name, name)
            self.registered.add(plan.spec.name)

    def _idle(self, plan: SilverPlan, applied: str) -> bool:
        """True when this run captured all of (applied, now] and none of it touched the table:
        its applied offset then moves on without a MERGE."""
        return self.captured_from is not None and self.captured_from <= applied and \
            not any(t.qualified in self.changed_tables for t in plan.sources) and \
            all(self.engine.exists(p) for p in owned_tables(self.root, plan.spec).values())


def _done_splits(splits: list[dict]) -> dict[str, list[tuple[int, str, str]]]:
    """Split entries as merge_batch takes them: per source table, (id, attempt, watermark)."""
    done: dict[str, list[tuple[int, str, str]]] = {}
    for s in splits:
        done.setdefault(s["source_table"], []).append((s["split_id"], s["attempt"], s["watermark"]))
    return done


def capture_offset(capture: dict) -> str:
    return Position.parse(capture["position"]).offset.text


@contextmanager
def timed(summary: dict, phase: str):
    """Add the phase's wall time to summary["seconds_<phase>"]."""
    started = time.monotonic()
    try:
        yield
    finally:
        key = f"seconds_{phase}"
        summary[key] = round(summary.get(key, 0.0) + time.monotonic() - started, 3)


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")

