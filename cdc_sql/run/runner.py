"""One run of a pipeline: source -> bronze -> silver, one phase after the other.

0. connect, read the schemas, check binlog settings and projections (nothing written yet);
   which server, and where on it capture resumes (resume.py);
1. without a snapshot, where capture starts the first time (resume.start_capture);
2. plan splits for tables that have none, snapshot the unfinished ones in parallel
   (snapshot_phase.py);
3. capture the binlog from where it stopped (first time: the lowest watermark) up to the source
   position seen at start, whole transactions per bronze commit (capture_phase.py, capture.py);
   where windows go through the engine, a pass ends past `engine.window_bytes`, and where
   many small tables merge here, once it has changed `workers.PASS_TABLES` of them;
4. merge each silver table's next window (merge_phase.py: planner.py, lake/silver/), then
   record the applied offset; capture again while a pass ended before that position (the
   workers' merges of a pass go on while the next pass captures, recorded after it).
Each phase is handed what it needs and returns what it found (the runner keeps nothing else);
each commits before the next starts and every commit is replay-safe, so a run killed anywhere
is finished by the next one (docs/architecture.md, "Crash points"). When the engine starts is
engine_policy.py's to say.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import threading
import time

from cdc_sql import resnapshot, workers
from cdc_sql.capture import Bound
from cdc_sql.config import layout
from cdc_sql.config.model import Pipeline
from cdc_sql.errors import CdcError, TargetError, out_of_space, redacted
from cdc_sql.lake import bronze, tables
from cdc_sql.lake.lake import Lake
from cdc_sql.lake.silver.plan import SilverPlan, cascade_warnings, silver_plans
from cdc_sql.lake.state import (Checkpoint, MaintainEntry, OwnerEntry, RunEntry, State,
                                check_owner)
from cdc_sql.ops import maintain, metrics
from cdc_sql.run import capture_phase, engine_policy, resume, snapshot_phase
from cdc_sql.run.context import Run
from cdc_sql.run.merge_phase import MergePhase, Seen
from cdc_sql.run.summary import Batch, RunSummary
from cdc_sql.source import failover, mysql
from cdc_sql.source.offsets import Position
from cdc_sql.source.preflight import SourceView, inspect_source, now
from cdc_sql.source.watermarks import binary_log_status
from cdc_sql.workers import Workers

log = logging.getLogger("cdc_sql")


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


def refuse_catalog(pipeline: Pipeline, engine) -> None:
    """`target.catalog` on an engine whose names die with its session (Sail 0.7: its catalog
    is its session's) would register nothing anyone could read: refused before anything is
    written. `target.schema` alone names the tables in the session (docs/engines.md)."""
    if pipeline.target.catalog and not engine.catalogs:
        raise CdcError(f"{pipeline.file}: target.catalog `{pipeline.target.catalog}`: the "
                       f"{engine.kind} engine has no catalog that outlives its session; "
                       f"register tables with a JVM Spark or Databricks (engine mode local, "
                       f"remote or active), or leave target.catalog out")


class Runner:
    def __init__(self, pipeline: Pipeline, engine, stop: threading.Event | None = None):
        layout.check_engine(pipeline, engine.mode)
        self.pipeline = pipeline
        refuse_catalog(pipeline, engine)
        self.lake = Lake.open(engine, pipeline.root, pipeline.engine.sql_only)
        self.state = State(self.lake)
        self.stop = stop or threading.Event()
        self.phases = Run(pipeline, self.lake, self.state, self.stop, Workers(self.lake))

    # -- the whole run ---------------------------------------------------------------------
    def run(self, until_caught_up: bool = True, poll_seconds: float = 1.0) -> RunEntry:
        try:
            return self._run(until_caught_up, poll_seconds)
        except Exception as exc:
            if out_of_space(exc) and not isinstance(exc, CdcError):
                raise self._full(exc) from None
            raise
        finally:
            self.phases.workers.close()

    def _run(self, until_caught_up: bool, poll_seconds: float) -> RunEntry:
        view = inspect_source(self.pipeline)
        for warning in view.warnings:
            log.warning(warning)
        plans = self._silver_plans(view)
        for warning in cascade_warnings(plans, view):
            log.warning(warning)
        checkpoint = self.state.load()
        self._claim_target(checkpoint)
        started, full = time.monotonic(), False
        summary, batches = RunSummary(self.state.run_id, now()), []
        try:
            self._passes(view, plans, checkpoint, summary, batches, until_caught_up,
                         poll_seconds)
            summary.outcome = "stopped" if self.stop.is_set() else "ok"
        except Exception as exc:
            summary.error, full = redacted(str(exc)), out_of_space(exc)
            raise
        finally:
            summary.seconds = round(time.monotonic() - started, 3)
            entry = summary.entry()
            if not full:  # a full target takes no record either (it would fail, noisily)
                self._record(entry, batches)
        return entry

    def _passes(self, view: SourceView, plans: list[SilverPlan], checkpoint: Checkpoint,
                summary: RunSummary, batches: list[Batch], until_caught_up: bool,
                poll_seconds: float) -> None:
        """The phases in order, then capture and merge again until caught up (or stopped)."""
        policy = engine_policy.decide(self.pipeline, self.lake, plans)
        view, resumed = resume.resolve_server(self.phases, view, checkpoint)
        self.ensure_bronze(view)
        resume.start_capture(self.phases, view, checkpoint)
        with summary.timed("snapshot"):
            summary.snapshot_rows = snapshot_phase.snapshot(self.phases, view, plans,
                                                            policy.early)
        view = self._refresh_end(view)  # capture reaches past every snapshot watermark
        seen, merger = Seen(), MergePhase(self.phases)
        try:
            while not self.stop.is_set():
                checkpoint = self.state.load()
                due = self._maintenance_due(checkpoint)
                asked = resnapshot.pending(checkpoint) or resnapshot.ranges_pending(checkpoint)
                if due or asked:  # they touch silver: the workers' merges end first
                    summary.merged_tables |= set(merger.finish())
                    if due:
                        self._maintain()
                    checkpoint = self.state.load()
                self.state.compact_if_due()  # no phase writes state now
                if asked:  # a re-snapshot asked for while this run follows
                    with summary.timed("snapshot"):
                        summary.snapshot_rows += snapshot_phase.snapshot(self.phases, view, plans,
                                                                         policy.early)
                    view, checkpoint = self._refresh_end(view), self.state.load()
                with summary.timed("capture"):
                    captured = capture_phase.capture(
                        self.phases, view, checkpoint, view.end, plans, resumed, policy.early,
                        Bound(policy.window_bytes, workers.pass_tables(len(policy.here))))
                with summary.timed("merge"):  # the last pass's, merged while this one read
                    summary.merged_tables |= set(merger.finish())
                seen = seen.after(captured.started_at, captured.changed_tables,
                                  not captured.more)
                batches += captured.batches
                if captured.schema_changed:  # capture stopped after a DDL: merge and go on with
                    view = dataclasses.replace(  # the new definitions (projections checked again)
                        inspect_source(self.pipeline), end=view.end, end_seen_at=view.end_seen_at,
                        server=view.server, base=view.base)
                    plans = self._silver_plans(view)
                    policy = engine_policy.decide(self.pipeline, self.lake, plans)
                    self.ensure_bronze(view)
                    with summary.timed("snapshot"):  # of tables that just began to match
                        if snapshot_phase.snapshot(self.phases, view, plans, policy.early):
                            view = self._refresh_end(view)
                with summary.timed("merge"):  # unless stopped short of a DDL its definitions
                    merged = merger.merge(plans, self.state.load(), seen, batches, policy.here) \
                        if captured.mergeable else []  # are from after (Capture.may_end)
                summary.captured_changes += captured.changes
                summary.merged_tables |= set(merged)
                if captured.schema_changed or captured.resnapshots or captured.more:
                    continue  # go on with the new definitions, read tables again, or capture on
                if until_caught_up:
                    break
                view = self._next_end(view, poll_seconds)
                if view is None:
                    break
        except BaseException:
            merger.finish(quiet=True)  # what the workers merged recorded; the run's error raised
            raise
        summary.merged_tables |= set(merger.finish())  # a stop after a pass that ended early

    def _next_end(self, view: SourceView, poll_seconds: float) -> SourceView | None:
        """Where a run following the source reads to next: the source's end now, at once when
        it has moved past the end the last pass read to (a busy source is followed without a
        pause), else after `poll_seconds`; None when the run was asked to stop meanwhile."""
        aimed = view.end
        view = self._refresh_end(view)
        if view.end != aimed:
            return view
        return None if self.stop.wait(poll_seconds) else self._refresh_end(view)

    def _maintenance_due(self, checkpoint: Checkpoint) -> bool:
        """Whether target.maintain_every_hours have passed since the last maintenance."""
        return maintain.due(checkpoint.maintained, self.pipeline.target.maintain_every_hours,
                            dt.datetime.now(dt.timezone.utc))

    def _maintain(self) -> None:
        """Between two passes, what `cdc-sql maintain` does (a run following the binlog holds
        the lease `maintain` would need): prune bronze silver has applied, cluster, compact,
        vacuum."""
        log.info("maintaining the target (target.maintain_every_hours: %s)",
                 self.pipeline.target.maintain_every_hours)
        maintain.maintain(self.lake.engine, self.pipeline)

    def _record(self, entry: RunEntry, batches: list[Batch]) -> None:
        """The run's outcome into state and metrics, never hiding the run's own error."""
        try:
            self.state.write(entry)
            metrics.write_run(self.pipeline, entry,
                              [b.to_json() for b in batches[-metrics.MAX_BATCHES:]],
                              self.state.load())
        except Exception as exc:  # noqa: BLE001 - never hide the run's own error
            log.warning("could not record the run outcome: %s",
                        (str(exc).strip().splitlines() or [type(exc).__name__])[0])
            log.debug("the traceback", exc_info=True)

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
        """The pipeline's name on the target, and the time its maintenance is counted from,
        if not there yet."""
        check_owner(checkpoint, self.pipeline.name, self.lake.root)
        claims = [OwnerEntry(pipeline=self.pipeline.name, file=str(self.pipeline.file))
                  if checkpoint.owner is None else None,
                  MaintainEntry(at=now(), done=False) if checkpoint.maintained is None else None]
        self.state.write(*filter(None, claims))

    def _refresh_end(self, view: SourceView) -> SourceView:
        with mysql.cursor(self.pipeline.source) as cur:
            view.end = dataclasses.replace(binary_log_status(cur)[0], base=view.base)
        view.end_seen_at = now()
        return view

    def capture(self, view: SourceView, checkpoint: Checkpoint, stop_at: Position) -> int:
        """Only a capture pass, on the server the view found, the engine started early (the
        capture benchmark): its changes."""
        return capture_phase.capture(self.phases, view, checkpoint, stop_at,
                                     self._silver_plans(view),
                                     failover.ResumePlan(), True).changes
