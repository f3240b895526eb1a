"""The steps of a batch: the statements one silver window runs, in order, built once from the
plan, the window and its facts (run by execute.run_batch, printed by `cdc-sql plan`). Pure."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from cdc_sql.lake import semantics
from cdc_sql.lake.lake import Lake
from cdc_sql.lake.silver.facts import Facts
from cdc_sql.lake.silver.plan import SilverPlan
from cdc_sql.lake.silver.sql_text import (binlog_images_sql, candidates_sql, changes_sql,
                                          history_merge_sql, history_resnapshot_sql,
                                          history_versions_sql, key_match, merge_sql,
                                          range_removes_sql, replace_again_sql,
                                          snapshot_images_sql,
                                          snapshot_rows_sql)
from cdc_sql.lake.tables import table_ref
from cdc_sql.sql import quote, render
from cdc_sql.window import SplitRef, Window


class StepKind(StrEnum):
    """What running a step does (execute.run_batch); a StrEnum, so it prints and compares as
    its text."""

    VIEW = "view"                  # a temp view named `name` (sent with the views it reads)
    SPLITS = "splits"              # a temp view `name` of the done splits' rows (`splits`)
    CASCADE = "cascade"            # a temp view `name` of the rows cascades changed
    APPEND = "append"              # write into the silver table `name` when it does not exist
    STAGE = "stage"                # write to the staging table `name`, read it back as `view`
    MERGE = "merge"                # the MERGE into silver (its targets first get the columns)
    HISTORY_MERGE = "history-merge"  # the MERGE into history
    REPLACE = "replace"            # silver `name` replaced, in one commit (a re-snapshot)
    MERGE_REPLACEMENT = "merge-replacement"  # the same rows merged (Window.replaced)
    EVOLVE_HISTORY = "evolve-history"  # history given the source's columns and types


@dataclass(frozen=True)
class Step:
    """One statement of a batch (built by keyword); `kind` says how it runs."""

    title: str
    sql: str
    kind: StepKind = StepKind.VIEW
    name: str = ""
    args: dict = field(default_factory=dict)
    splits: tuple[SplitRef, ...] = ()  # for a view of done splits: its rows
    view: str = ""
    crash_point: str = ""    # faults.point after it
    # A stage that is not needed when every key has one row: the check, and the view then
    unique_check: str = ""
    as_is: str = ""


def batch_steps(lake: Lake, plan: SilverPlan, window: Window, facts: Facts,
                cascaded: bool = False) -> list[Step]:
    """The statements of one silver batch, in order (run by run_batch, shown by `plan`).
    `cascaded`: foreign-key cascades changed rows in the window (cascade_rows)."""
    name = plan.spec.name
    images, candidates = f"cdc_images_{name}", f"cdc_candidates_{name}"
    steps, parts = [], []
    for i, source in enumerate(plan.sources):
        renames = facts.renames(source.qualified)
        if window.splits is not None:
            splits_view = f"{images}_{i}_splits"
            steps.append(Step(title=f"{splits_view}: the done splits of {source.qualified} "
                                    f"(id, attempt, watermark)", sql="", kind=StepKind.SPLITS,
                              name=splits_view, splits=window.splits.get(source.qualified, ())))
            steps.append(Step(
                title=f"{images}_{i}_s: snapshot rows of {source.qualified}",
                sql=snapshot_images_sql(lake, source, splits_view, renames,
                                        facts.snapshot_columns.get(source.qualified)),
                name=f"{images}_{i}_s", args={"source_table": source.qualified}))
            parts.append(f"{images}_{i}_s")
        if source.qualified not in facts.changes_columns and facts.changes_columns:
            continue  # nothing captured for it yet (snapshot-only)
        rename_args = {f"rename_{k}": offset for k, offset in
                       enumerate(o for chain in renames.values() for _, o in chain)}
        steps.append(Step(
            title=f"{images}_{i}_b: binlog changes of {source.qualified}",
            sql=binlog_images_sql(lake, source, renames,
                                  facts.changes_columns.get(source.qualified)),
            name=f"{images}_{i}_b",
            args={"source_table": source.qualified, "after": window.after,
                  "upto": window.upto, **rename_args}))
        parts.append(f"{images}_{i}_b")
    if cascaded:
        steps.append(Step(title=f"{images}_x: the rows foreign-key cascades changed (InnoDB's, "
                                f"not in the binlog)",
                          sql="-- worked out by cdc_sql/cascades.py from the parents' deletes "
                              "and key changes and the child's versions",
                          kind=StepKind.CASCADE, name=f"{images}_x"))
        parts.append(f"{images}_x")
    steps.append(Step(title=f"{images}: every image of the batch",
                      sql=" UNION ALL ".join(f"SELECT * FROM {quote(p)}" for p in parts),
                      name=images))
    steps.append(Step(title=f"{candidates}: the projection over {images}",
                      sql=candidates_sql(plan, images), name=candidates))
    if window.ranges and not semantics.skips(plan.spec, "delete"):
        steps += range_steps(lake, plan, window, candidates)
        candidates = f"{candidates}_r"
    merged = candidates
    if window.first and plan.snapshot_keys_unique:
        rows_sql, rows_args = snapshot_rows_sql(plan, candidates, window)
        steps.append(Step(title="the snapshot rows, written into silver as it is created "
                                "(first batch only)", sql=rows_sql, kind=StepKind.APPEND,
                          name=lake.silver_path(name), args=rows_args,
                          crash_point="silver.snapshot_written"))
        merged = f"cdc_rest_{name}"
        steps.append(Step(title=f"{merged}: what is left to MERGE after the snapshot rows",
                          sql=render("silver_snapshot_rest", candidates=quote(candidates)),
                          name=merged))
    unique = "" if plan.key_nullable else render(
        "silver_keys_unique", key=", ".join(quote(k) for k in plan.key), candidates=quote(merged))
    steps.append(Step(title=f"cdc_changes_{name}: the last candidate per key, staged in "
                            f"{lake.staging_path(name)} (when no key has two candidates, the "
                            f"candidates as they are)", sql=changes_sql(plan, merged),
                      kind=StepKind.STAGE, name=lake.staging_path(name),
                      view=f"cdc_changes_{name}",
                      crash_point="silver.staged", unique_check=unique,
                      as_is=f"SELECT {', '.join(quote(c) for c in (*plan.columns, '_cdc_remove'))}"
                            f" FROM {quote(merged)}"))
    if window.replace:
        return steps + replace_steps(lake, plan, window, f"cdc_changes_{name}",
                                     facts.silver_columns)
    steps.append(Step(title="the MERGE into silver (silver and history are first given the "
                            "source's columns)",
                      sql=merge_sql(lake, plan, f"cdc_changes_{name}", facts.dropped(plan)),
                      kind=StepKind.MERGE, crash_point="silver.merged"))
    if plan.spec.history:
        steps.append(Step(title=f"cdc_versions_{name}: the history versions, staged in "
                                f"{lake.staging_path(name + '_history')}",
                          sql=history_versions_sql(lake, plan, candidates,
                                                   window.history_untouched),
                          kind=StepKind.STAGE,
                          name=lake.staging_path(f"{name}_history"), view=f"cdc_versions_{name}",
                          crash_point="history.staged"))
        steps.append(_history_merge(lake, plan, facts.dropped(plan), window.history_untouched))
    return steps


def range_steps(lake: Lake, plan: SilverPlan, window: Window, candidates: str) -> list[Step]:
    """A window with range re-reads: the rows they no longer find, as removes at their
    watermarks, beside the candidates (`<candidates>_r`). With `skip: [delete]` there are
    none: silver keeps rows the source deleted, as a whole re-snapshot keeps them."""
    removes = f"cdc_range_removes_{plan.spec.name}"
    sql, args = range_removes_sql(lake, plan, window.ranges, candidates)
    return [Step(title=f"{removes}: rows matching a range re-read's predicate that it did not "
                       f"return (deleted at the source), as removes at its watermark",
                 sql=sql, name=removes, args=args),
            Step(title=f"{candidates}_r: the candidates and those removes",
                 sql=f"SELECT * FROM {quote(candidates)} UNION ALL SELECT * FROM "
                     f"{quote(removes)}", name=f"{candidates}_r")]


def replace_steps(lake: Lake, plan: SilverPlan, window: Window, changes_view: str,
                  silver_columns: tuple[str, ...] = ()) -> list[Step]:
    """A re-snapshot's last steps: history gains the differences as versions (first: a replay
    compares with history, and silver, once replaced, no longer holds the old rows), then silver
    is replaced by the last candidate of every key, in one commit."""
    name, steps = plan.spec.name, []
    if plan.spec.history:
        steps.append(Step(title="history given the source's columns and types (old versions "
                                "cast)", sql="", kind=StepKind.EVOLVE_HISTORY))
        steps.append(Step(title=f"cdc_versions_{name}: the rows that differ from history's "
                                f"current versions, staged in "
                                f"{lake.staging_path(name + '_history')}",
                          sql=history_resnapshot_sql(lake, plan, changes_view),
                          kind=StepKind.STAGE, name=lake.staging_path(f"{name}_history"),
                          args={"upto": window.upto}, view=f"cdc_versions_{name}",
                          crash_point="history.staged"))
        steps.append(_history_merge(lake, plan))
    kept = semantics.replace_kept(plan.spec, plan.columns, silver_columns,
                                  key_match(plan, "t", "s"),
                                  table_ref(lake.silver_path(name)), quote(changes_view))
    replacement = render("silver_replace", columns=", ".join(quote(c) for c in plan.columns),
                         changes=quote(changes_view), removes=semantics.removes(plan.spec),
                         kept=kept)
    args = {"upto": window.upto} if ":upto" in kept else {}
    if window.replaced:
        steps.append(Step(title="the re-snapshot's rows merged into silver, which a killed run "
                                "replaced already (its change data feed shows each row once)",
                          sql=replace_again_sql(lake, plan, replacement),
                          kind=StepKind.MERGE_REPLACEMENT, args=args,
                          crash_point="silver.merged"))
        return steps
    steps.append(Step(title="silver replaced by the re-snapshot's rows, in one commit",
                      sql=replacement, kind=StepKind.REPLACE, name=lake.silver_path(name),
                      args=args, crash_point="silver.merged"))
    return steps


def _history_merge(lake: Lake, plan: SilverPlan, dropped: tuple[str, ...] = (),
                   current_only: bool = False) -> Step:
    return Step(title="the MERGE into history" + (" (its current versions)" if current_only
                                                  else ""),
                sql=history_merge_sql(lake, plan, f"cdc_versions_{plan.spec.name}", dropped,
                                      current_only),
                kind=StepKind.HISTORY_MERGE, crash_point="history.merged")


def describe(steps: list[Step]) -> str:
    """The steps as `cdc-sql plan` prints them."""
    out = []
    for n, step in enumerate(steps, 1):
        sql = step.sql.strip() or f"-- rows: {[s.row for s in step.splits]}"
        bound = "".join(f"\n--   :{k} = {v!r}" for k, v in step.args.items())
        if step.unique_check:
            sql = (f"{step.unique_check.strip()}\n-- when it is true:\n{step.as_is}\n"
                   f"-- else:\n{sql}")
        out.append(f"-- step {n}: {step.title}{bound}\n{sql}\n")
    return "\n".join(out)
