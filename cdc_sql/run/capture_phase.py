"""Phase 3 of a run: one binlog capture pass (capture.py) from where capture stands (the first
time: the lowest split watermark) up to a position, with the policy for rows that change
without row events."""
from __future__ import annotations

from dataclasses import dataclass, field

from cdc_sql import planner, resnapshot
from cdc_sql.capture import UNBOUNDED, Bound, Capture, Policy
from cdc_sql.lake import bronze
from cdc_sql.lake.silver.plan import SilverPlan, carries, cascade_parents, sources_by_table
from cdc_sql.lake.state import Checkpoint
from cdc_sql.run.context import Run
from cdc_sql.run.engine_policy import early_for_capture, start_early
from cdc_sql.run.resume import gtid_at
from cdc_sql.run.summary import Batch
from cdc_sql.source.failover import ResumePlan
from cdc_sql.source.offsets import Position
from cdc_sql.source.preflight import SourceView


@dataclass(frozen=True)
class Captured:
    """What a capture pass found: the changes it landed, where it began (None: it did not
    run), the source tables it wrote, the tables a DDL changed or that must be read again,
    its bronze commits, and whether it ended before the position it was to reach."""

    changes: int = 0
    started_at: str | None = None
    changed_tables: frozenset[str] = frozenset()
    schema_changed: list[str] = field(default_factory=list)
    resnapshots: list[str] = field(default_factory=list)
    batches: list[Batch] = field(default_factory=list)
    more: bool = False  # it ended at its bound (capture.Bound): capture goes on after the merge
    mergeable: bool = True  # False: stopped before a DDL of its backlog (Capture.may_end)


def capture(run: Run, view: SourceView, checkpoint: Checkpoint, stop_at: Position,
            plans: list[SilverPlan], resume: ResumePlan, engine_early: bool,
            bound: Bound = UNBOUNDED) -> Captured:
    """A pass up to `stop_at`, or to the first transaction's end past its `bound`."""
    if run.pipeline.source.startup == "snapshot-only":
        return Captured()
    saved = checkpoint.capture
    start = saved.at if saved else planner.lowest_watermark(checkpoint.all_splits())
    if start is None:
        return Captured()
    start_early(run.lake, early_for_capture(engine_early, start, stop_at))  # while it reads
    capture = Capture(run.lake, run.state, run.pipeline.source, view.source_tables,
                      view.mariadb, lambda db, table: any(
                          spec.matches(db, table) for spec in run.pipeline.tables),
                      run.stop, view.server, _policy(run, plans), view.read_at, bound)
    result = capture.run(checkpoint, start, stop_at, view.end_seen_at,
                         saved.gtid if saved else gtid_at(run, view, start),
                         by_gtid=resume.by_gtid(saved.position if saved else None), base=view.base)
    return Captured(result.changes, start.offset.text, frozenset(result.changed_tables),
                    result.schema_changed, result.resnapshots,
                    [Batch(phase="capture", rows=rows, seconds=seconds)
                     for rows, seconds in result.commits], result.more, result.mergeable)


def _policy(run: Run, plans: list[SilverPlan]) -> Policy:
    """What capture does where rows change without row events (capture.Policy)."""
    specs = run.pipeline.tables

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
        cannot_follow=lambda table: bronze.cannot_hold(run.lake, table),
        carried=lambda db, table, column: carries(plans, f"{db}.{table}", column),
        widen=widen)
