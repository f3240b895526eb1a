"""A batch's steps carried out on the engine: views sent with the views they read, stages,
MERGEs; then the rows TRUNCATEs removed.

pyspark's types are imported where a session is used: `validate` and `plan` import the pure
modules of this package to print the steps, and need no Spark.
"""
from __future__ import annotations

import json
import logging
import re
import time

from cdc_sql import faults
from cdc_sql.config import layout
from cdc_sql.lake import semantics
from cdc_sql.lake.lake import Lake
from cdc_sql.lake.silver.evolve import create, evolve, start_history
from cdc_sql.lake.silver.facts import Facts
from cdc_sql.lake.silver.plan import SilverPlan
from cdc_sql.lake.silver.steps import Step, StepKind, batch_steps
from cdc_sql.lake.tables import RESNAPSHOT_MARK
from cdc_sql.source.offsets import Offset
from cdc_sql.sql import quote
from cdc_sql.window import Window

log = logging.getLogger("cdc_sql")


def run_batch(lake: Lake, plan: SilverPlan, window: Window, facts: Facts,
              cascaded: tuple | None = None) -> None:
    """MERGE the window into silver, then into its history table when the pipeline keeps one,
    through the engine's steps. `cascaded`: the rows cascades changed (cascade_rows), of this
    window and maybe beyond."""
    nothing = False  # no change to merge into silver
    inside = []
    if cascaded:
        schema, rows = cascaded
        at = schema.names.index("_cdc_offset")
        inside = [row for row in rows if window.after < row[at] <= window.upto]
    steps = batch_steps(lake, plan, window, facts, cascaded=bool(inside))
    for n, step in enumerate(steps):
        started = time.monotonic()
        if step.kind is StepKind.CASCADE:
            lake.spark.createDataFrame(inside, schema).createOrReplaceTempView(step.name)
            continue
        if step.kind is StepKind.VIEW:
            if not any(_references(later, step.name) for later in steps[n + 1:]
                       if later.kind is not StepKind.VIEW):
                continue  # sent with the view that reads it
            define_view(lake.engine, step, [s for s in steps[:n] if s.kind is StepKind.VIEW])
            log.debug("silver %s: %s in %.3fs", plan.spec.name, step.title.split(":")[0],
                      time.monotonic() - started)
            continue
        if step.kind in (StepKind.MERGE, StepKind.EVOLVE_HISTORY):
            changes = lake.spark.table(f"cdc_changes_{plan.spec.name}").drop("_cdc_remove")
            if step.kind is StepKind.EVOLVE_HISTORY:  # a re-snapshot: history takes the new types
                start_history(lake, plan)
                evolve(lake, lake.history_path(plan.spec.name), plan, changes.schema, {},
                       any_type=True)
                continue
            _prepare_targets(lake, plan, changes.schema, facts)  # with the source's columns
        if not (nothing and step.kind is StepKind.MERGE):
            nothing = execute_step(lake, step, layout.properties(plan.spec)) == 0
        if step.crash_point:
            faults.point(step.crash_point)
        log.debug("silver %s: %s in %.3fs", plan.spec.name, step.title.split(":")[0],
                  time.monotonic() - started)
    apply_truncates(lake, plan, facts)


def _references(step: Step, name: str) -> bool:
    return any(quote(name) in text for text in (step.sql, step.unique_check, step.as_is))


def define_view(engine, step: Step, earlier: list[Step]) -> None:
    """A view in one round trip with the earlier views it reads (as WITH clauses): each
    round trip to the engine costs most of a small table's batch. Parameters of
    different views that share a name and differ in value are renamed apart."""
    used, args, ctes = set(), {}, []

    def bind(view: Step) -> str:
        sql = view.sql
        for key, value in view.args.items():
            name = key
            while name in args and args[name] != value:
                name += "_"
            if name != key:
                sql = re.sub(rf"(?<![:\w]):{key}\b", f":{name}", sql)
            args[name] = value
        return sql

    def need(view: Step) -> None:
        for other in earlier:
            if other.name not in used and _references(view, other.name):
                used.add(other.name)
                need(other)
                ctes.append(f"{quote(other.name)} AS (\n{bind(other)}\n)")

    need(step)
    sql = bind(step)
    if ctes:
        sql = f"WITH {', '.join(ctes)}\n{sql}"
    engine.sql(sql, args).createOrReplaceTempView(step.name)


def execute_step(lake: Lake, step: Step, properties: dict | None = None) -> int | None:
    """Carry out one step other than a view (views go through define_view); a stage step
    returns its rows when it knows them. `properties`: those of a table an APPEND creates."""
    spark = lake.spark
    if step.kind is StepKind.SPLITS:
        spark.createDataFrame([s.row for s in step.splits],
                              "split_id INT, attempt STRING, watermark STRING") \
            .createOrReplaceTempView(step.name)
    elif step.kind is StepKind.APPEND:
        if not lake.tables.exists(step.name):
            rows = lake.engine.sql(step.sql, step.args)
            create(lake, step.name, rows, properties)  # the commit creating silver holds them
    elif step.kind is StepKind.REPLACE:
        lake.engine.replace(lake.engine.sql(step.sql, step.args), step.name, RESNAPSHOT_MARK)
    elif step.kind is StepKind.STAGE:
        unique, rows = spark.sql(step.unique_check).collect()[0] if step.unique_check \
            else (False, None)
        if unique:
            # One candidate per key: they are the changes. A MERGE evaluates a plain view of
            # bronze as fast as a staged table, and staging costs half as much again
            # (docs/performance.md).
            spark.sql(step.as_is).createOrReplaceTempView(step.view)
            return rows
        _staged(lake, step.name, lake.engine.sql(step.sql, step.args)) \
            .createOrReplaceTempView(step.view)
    else:
        lake.engine.sql(step.sql, step.args).collect()
    return None


def _prepare_targets(lake: Lake, plan: SilverPlan, schema, facts: Facts) -> None:
    """Silver created (empty) if it is not there; history started; both given the source's
    current columns."""
    path = lake.silver_path(plan.spec.name)
    if not lake.tables.exists(path):
        create(lake, path, lake.spark.createDataFrame([], schema), layout.properties(plan.spec))
    renames = {new: [old for old, _ in chain] for source in plan.sources
               for new, chain in facts.renames(source.qualified).items()}
    if plan.spec.history:
        start_history(lake, plan)  # before silver moves
    evolve(lake, path, plan, schema, renames)
    if plan.spec.history:
        evolve(lake, lake.history_path(plan.spec.name), plan, schema, renames)


def apply_truncates(lake: Lake, plan: SilverPlan, facts: Facts) -> None:
    """Rows a TRUNCATE in the window removed leave silver (the MERGE kept later changes), and
    their history versions end there; so do the rows of partitions a TRUNCATE or DROP
    PARTITION removed (op `delete`: the statement and the conditions on the partitioning
    column that say which rows, source/partitions.py), where silver's row at that offset was
    still the one the partition held."""
    if not semantics.applies_truncate(plan.spec):  # skip: [truncate]
        return
    for source in plan.sources:
        found = facts.statements.get(source.qualified, ())
        truncates = [(offset, ts) for op, offset, ts, _ in found if op == "truncate"]
        removals = [(offset, ts, where) for op, offset, ts, statement in found
                    if op == "delete" and not (truncates and offset < truncates[-1][0])
                    for where in json.loads(statement)["where"]]
        if truncates:
            removals.insert(0, (*truncates[-1], []))
        shard = [("_cdc_source_table", "=", source.qualified)] if plan.sharded else []
        for removed_at, removed_ts, where in removals:
            Offset.parse(removed_at)  # ours, as written by capture
            conditions = [(column, op, value) for column, op, value in where]
            semantics.remove_rows(lake, plan.spec, lake.silver_path(plan.spec.name),
                                  removed_at, removed_ts,
                                  [("_cdc_offset", "<", removed_at), *conditions, *shard])
            if plan.spec.history:
                lake.tables.update_rows(
                    lake.history_path(plan.spec.name),
                    {"_cdc_valid_to": removed_at, "_cdc_current": False,
                     "_cdc_valid_to_ts": removed_ts.strftime("%Y-%m-%d %H:%M:%S.%f")},
                    [("_cdc_current", "=", True), ("_cdc_valid_from", "<", removed_at),
                     *conditions, *shard])


def _staged(lake: Lake, staging: str, df):
    """Land a MERGE's source in a staging Delta table and read it back: a MERGE whose source is
    a query may evaluate it more than once (Sail does: docs/engines.md), and a history batch
    reads the table it merges into. A crash after staging just stages again."""
    lake.engine.stage(df, staging)
    return lake.engine.read(staging)
