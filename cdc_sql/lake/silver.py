"""Silver: the live source rows after projection, kept by one primary-key MERGE per batch.

A batch for one silver table carries out a planner.Window: the bronze changes in (P, U] (and,
with the first batch, the snapshot splits' rows, placed at their watermarks). The statements a
batch runs are built once, as a list of `Step`s, from the plan, the window and a few facts read
from the lake (`Facts`: bronze's columns, renames and TRUNCATEs in the window); `cdc-sql plan`
prints that same list. State records P := U only after the MERGE commits; a rerun of the same
window is harmless (docs/architecture.md, "Why silver is exactly-once").

pyspark's types are imported where a session is used: `validate` and `plan` import this module
to print the steps, and need no Spark.
"""
from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.compute as pc

from cdc_sql import cascades, faults
from cdc_sql.cascades import ForeignKey
from cdc_sql.config.model import Table
from cdc_sql.config.projection import Projection, resolve_projection
from cdc_sql.errors import ConfigError, SourceError, StateError
from cdc_sql.lake import semantics, small_merge
from cdc_sql.lake.tables import (EVOLVE_MARK, OWN_MERGE, RESNAPSHOT_MARK, stats_properties,
                                 table_ref)
from cdc_sql.planner import Window
from cdc_sql.source import ddl
from cdc_sql.source.offsets import Offset
from cdc_sql.source.schema import SourceTable, arrow_type, key_text_name
from cdc_sql.sql import quote, render

log = logging.getLogger("cdc_sql")
ENGINE_COLUMNS = ("_cdc_offset", "_cdc_op", "_cdc_ts")
HISTORY_COLUMNS = ("_cdc_op", "_cdc_valid_from", "_cdc_valid_from_ts", "_cdc_valid_to",
                   "_cdc_valid_to_ts", "_cdc_current")
# Commits after our recorded version that need no one's attention: compaction, vacuum and
# table properties (same content: e.g. deletion vectors or column mapping turned on), and our
# own schema changes and MERGEs (a run that died before its state commit; replaying a window
# is harmless, however often it happened).
CONTENT_PRESERVING = ("OPTIMIZE", "VACUUM START", "VACUUM END", "SET TBLPROPERTIES",
                      "UPGRADE PROTOCOL", EVOLVE_MARK, OWN_MERGE, RESNAPSHOT_MARK)


@dataclass(frozen=True)
class SilverPlan:
    """How one pipeline table becomes one silver table."""

    spec: Table
    sources: tuple[SourceTable, ...]
    projection: Projection
    key_texts: tuple[tuple[str, str], ...] = ()  # temporal key columns: (source, output name)
    cascades: tuple[ForeignKey, ...] = ()  # foreign keys whose cascades silver applies

    @property
    def as_is(self) -> bool:
        """Silver holds the source's rows unchanged: one source table, no projection."""
        return not self.sharded and self.projection.where is None and \
            self.projection.columns == tuple((quote(c.name), c.name)
                                             for c in self.sources[0].columns)

    @property
    def sharded(self) -> bool:
        return self.spec.is_pattern

    @property
    def key(self) -> tuple[str, ...]:
        per_shard = self.sharded and not self.spec.key_unique_across_shards
        texts = {out for _, out in self.key_texts}
        return tuple(key_text_name(k) if k in texts else k for k in self.projection.key) + \
            (("_cdc_source_table",) if per_shard else ())

    @property
    def row_key(self) -> tuple[str, ...]:
        """The key in the columns users see (temporal key columns by their typed value)."""
        per_shard = self.sharded and not self.spec.key_unique_across_shards
        return self.projection.key + (("_cdc_source_table",) if per_shard else ())

    @property
    def row_columns(self) -> tuple[str, ...]:
        """The row as users see it: the projected columns, the text of temporal key columns,
        and the shard a row came from."""
        extra = ("_cdc_source_table",) if self.sharded else ()
        return tuple(name for _, name in self.projection.columns) + \
            tuple(key_text_name(out) for _, out in self.key_texts) + extra

    @property
    def columns(self) -> tuple[str, ...]:
        """Silver's columns."""
        n = len(self.projection.columns)
        return self.row_columns[:n] + ENGINE_COLUMNS + semantics.extra_columns(self.spec) + \
            self.row_columns[n:]

    @property
    def snapshot_keys_unique(self) -> bool:
        """No two snapshot rows share a silver key: splits are disjoint ranges of a real key,
        and shards' rows differ by `_cdc_source_table` unless declared unique across them."""
        single = len(self.sources) == 1 or not self.spec.key_unique_across_shards
        return single and not any(s.key_nullable for s in self.sources)

    @property
    def key_nullable(self) -> bool:
        return any(s.key_nullable for s in self.sources)

    @property
    def history_columns(self) -> tuple[str, ...]:
        return self.row_columns + HISTORY_COLUMNS


def plan_silver(spec: Table, sources: list[SourceTable], file: str, index: int) -> SilverPlan:
    if not sources:
        raise SourceError(f"{file}: tables[{index}] (`{spec.name}`): no source table matches "
                          f"`{spec.source}` (if it was dropped or renamed, silver keeps its last "
                          f"rows: remove the entry from the pipeline, or restore the table)")
    first = sources[0]
    for other in sources[1:]:
        if [c.name for c in other.columns] != [c.name for c in first.columns] or \
                other.key != first.key:
            raise SourceError(f"{file}: tables[{index}] (`{spec.name}`): shard {other.qualified} "
                              f"has other columns or key than {first.qualified}: "
                              f"{_shard_difference(first, other)}")
    try:
        projection = resolve_projection(spec, [c.name for c in first.columns], list(first.key))
    except ConfigError as exc:
        raise ConfigError(f"{exc.detail} (table {first.qualified})", file,
                          f"tables[{index}].{exc.path or 'projection'}") from None
    texts = {c.name for c in first.key_text_columns}
    key_texts = tuple((source, out) for source, out in zip(first.key, projection.key)
                      if source in texts)
    return SilverPlan(spec, tuple(sources), projection, key_texts)


def silver_plans(pipeline, view, kept: dict[str, set[str]] | None = None) -> list[SilverPlan]:
    """Every table of the pipeline planned over the source tables `view` found for it, with
    the foreign-key cascades it applies. `kept`: per silver table with `on_schema_change:
    ignore_new_columns` that exists, its columns: source columns added since stay out."""
    plans = [plan_silver(spec, tables, pipeline.file, i)
             for i, (spec, tables) in enumerate(zip(pipeline.tables, view.tables))]
    plans = [without_new_columns(plan, (kept or {}).get(plan.spec.name)) for plan in plans]
    applied, _ = _cascades(plans, view)
    return [replace(plan, cascades=applied.get(plan.sources[0].qualified, ())) if plan.as_is
            else plan for plan in plans]


def without_new_columns(plan: SilverPlan, columns: set[str] | None) -> SilverPlan:
    """The plan without the output columns silver does not have (`columns`: silver's, None
    when it does not exist yet), for `on_schema_change: ignore_new_columns`."""
    if columns is None or plan.spec.on_schema_change != "ignore_new_columns":
        return plan
    chosen = tuple(c for c in plan.projection.columns
                   if c[1] in columns or c[1] in plan.projection.key)
    return replace(plan, projection=replace(plan.projection, columns=chosen))


def cascade_warnings(plans: list[SilverPlan], view) -> list[str]:
    """The cascading foreign keys into captured tables that silver cannot apply (or only in
    part), for `validate` and the run's log."""
    return _cascades(plans, view)[1]


def _cascades(plans: list[SilverPlan], view):
    captured = {t.qualified: t.key for plan in plans for t in plan.sources}
    as_is = {plan.sources[0].qualified for plan in plans if plan.as_is}
    return cascades.assign(view.foreign_keys, captured, as_is)


def sources_by_table(plans: list[SilverPlan]) -> dict[str, list[str]]:
    """Silver table -> the db.table names it reads."""
    return {plan.spec.name: [t.qualified for t in plan.sources] for plan in plans}


def chained(plans: list[SilverPlan]) -> list[list[SilverPlan]]:
    """Groups of tables whose cascades set off cascades, parents first (cascades.chains)."""
    by_source: dict[str, list[SilverPlan]] = {}
    for plan in plans:
        if plan.cascades:
            by_source.setdefault(plan.sources[0].qualified, []).append(plan)
    applied = {source: found[0].cascades for source, found in by_source.items()}
    return [[plan for source in chain for plan in by_source[source]]
            for chain in cascades.chains(applied)]


def snapshot_levels(plans: list[SilverPlan]) -> dict[str, int]:
    """Per source table of a chain (`chained`), how many chain tables cascade into it before
    it. A table's splits are read only once those of the levels before it are done: every
    watermark of a table then comes after those of the tables it gets cascade moves from, so a
    cascade between them is in the child's snapshot rows or after them, never lost between."""
    levels: dict[str, int] = {}
    for group in chained(plans):
        for plan in group:
            source = plan.sources[0].qualified
            levels[source] = max([levels[fk.parent] + 1 for fk in plan.cascades
                                  if fk.parent in levels] + [levels.get(source, 0)])
    return levels


def read_whole(plans: list[SilverPlan]) -> set[str]:
    """Source tables whose key a cascade can change (an ON UPDATE CASCADE of key columns). Their
    splits are read in one consistent read, all again if one is unfinished: a cascade moves a
    row from one key range to another without a binlog event, so with ranges read at different
    watermarks the row could be in neither (moved out of a range read after the cascade, into
    one read before it)."""
    return {plan.sources[0].qualified for plan in plans for fk in plan.cascades
            if fk.on_update == "CASCADE" and set(fk.columns) & set(plan.sources[0].key)}


def cascade_parents(plans: list[SilverPlan]) -> dict[str, list[str]]:
    """Silver table -> the db.table names whose cascades it applies."""
    return {plan.spec.name: sorted({fk.parent for fk in plan.cascades}) for plan in plans
            if plan.cascades}


def carries(plans: list[SilverPlan], source: str, column: str) -> bool:
    """Every silver table reading `source` (db.table) holds its `column` as it is, so rows can
    be removed from silver by that column's values (a partition's rows: apply_truncates)."""
    readers = [p for p in plans if any(s.qualified == source for s in p.sources)]
    return bool(readers) and all((quote(column), column) in p.projection.columns
                                 for p in readers)


def _shard_difference(first: SourceTable, other: SourceTable) -> str:
    mine, theirs = [c.name for c in first.columns], [c.name for c in other.columns]
    parts = []
    if set(theirs) - set(mine):
        parts.append(f"only in {other.qualified}: {', '.join(sorted(set(theirs) - set(mine)))}")
    if set(mine) - set(theirs):
        parts.append(f"only in {first.qualified}: {', '.join(sorted(set(mine) - set(theirs)))}")
    if not parts and mine != theirs:
        parts.append(f"the columns are in another order ({', '.join(theirs)})")
    if first.key != other.key:
        parts.append(f"key ({', '.join(first.key)}) against ({', '.join(other.key)})")
    return "; ".join(parts)


# -- the hand-change check ------------------------------------------------------------------------
def owned_tables(lake, spec: Table) -> dict[str, str]:
    """The Delta tables a pipeline table writes, by the state field recording our last version."""
    tables = {"silver_version": lake.silver_path(spec.name)}
    if spec.history:
        tables["history_version"] = lake.history_path(spec.name)
    return tables


def owned_versions(lake, spec: Table) -> dict[str, int | None]:
    """Our last version of each table, for state: what check_untouched compares against."""
    return {key: lake.tables.version(path) if lake.tables.exists(path) else None
            for key, path in owned_tables(lake, spec).items()}


def check_untouched(lake, spec: Table, entry) -> None:
    """Refuse to merge over a silver (or history) table someone else changed since our last
    commit. Allowed after it: compaction and vacuum (content unchanged), cdc-sql's own marked
    schema changes, a RESTORE back to content we wrote, and our own MERGEs (runs that died
    between a MERGE and the state commit; replaying a window is harmless)."""
    for key, path in owned_tables(lake, spec).items():
        recorded = getattr(entry, key)
        if recorded is not None and lake.tables.exists(path):
            kind = "history" if key == "history_version" else "silver"
            _check_commits(lake, f"{kind} table {path.rsplit('/', 1)[-1]}", path, recorded)


def _check_commits(lake, label: str, path: str, recorded: int) -> None:
    commits = lake.tables.history(path, recorded)
    if commits is None:
        return
    ours, foreign = {recorded}, []  # versions holding what we wrote; commits since that are not
    for version, operation, restored_to in commits:
        if operation == "RESTORE" and restored_to.isdigit() and int(restored_to) in ours:
            foreign = []
        elif operation not in CONTENT_PRESERVING:
            foreign.append((version, operation))
        if not foreign:
            ours.add(version)
    if not foreign:
        return
    shown = ", ".join(f"version {v}: {op}" for v, op in foreign)
    raise StateError(
        f"{label} ({path}) was changed outside cdc-sql after its version "
        f"{recorded}, which cdc-sql wrote last ({shown}). cdc-sql does not merge over changes "
        f"it did not make. Undo them (Spark: RESTORE TABLE delta.`{path}` TO VERSION AS OF "
        f"{recorded}; delta-rs: DeltaTable(path).restore({recorded})), or start the pipeline "
        f"over by removing {lake.root}")


# -- what a batch needs to know before its SQL can be written -----------------------------------
@dataclass(frozen=True)
class Facts:
    """Read from the lake before a batch: per source table, the columns its bronze tables hold
    and the DDL/TRUNCATE statements in the window."""

    snapshot_columns: dict[str, dict] = field(default_factory=dict)  # name -> Arrow type
    changes_columns: dict[str, dict] = field(default_factory=dict)
    statements: dict[str, tuple] = field(default_factory=dict)  # (op, offset, ts, statement)
    silver_types: dict = field(default_factory=dict)  # silver's columns, when it exists

    @property
    def silver_columns(self) -> tuple[str, ...]:
        return tuple(self.silver_types)

    def dropped(self, plan: "SilverPlan") -> tuple[str, ...]:
        """Silver columns the source no longer has (NULL in rows changed from now on)."""
        return tuple(c for c in self.silver_columns
                     if c not in plan.columns and not c.startswith("_cdc_"))

    def renames(self, source: str) -> dict[str, list[tuple[str, str]]]:
        """Columns renamed in the window: new name -> [(earlier name, offset of the rename)],
        oldest first."""
        return renamed_columns(self.statements.get(source, ()))


STATEMENT_OPS = ("ddl", "truncate", "delete", "no_fk_checks")


def read_statements(lake) -> list[tuple]:
    """Every DDL statement and TRUNCATE bronze holds, and the rows events written with
    foreign_key_checks=0 (no cascade happened), in order, as (db, table, op, offset, commit
    time, statement): read once for all the tables of a merge, each of which takes those of
    its source tables in its window. Read by the lake's table reader, not a query: a run that
    merges every table in this process need not start the engine for it."""
    if not lake.tables.exists(lake.statements_path):
        return []
    rows = lake.tables.read_arrow(lake.statements_path,
                                  ["db", "tbl", "op", "offset", "commit_ts", "statement"])
    rows = rows.filter(pc.is_in(rows["op"], pa.array(STATEMENT_OPS))).sort_by("offset")
    return [tuple(row.values()) for row in rows.to_pylist()]


def read_facts(lake, plan: SilverPlan, window: Window,
               statements: list[tuple] | None = None) -> Facts:
    """What the window's SQL depends on; `statements` as read_statements gives them (read here
    when not given)."""
    if statements is None:
        statements = read_statements(lake)
    snapshot, changes, in_window = {}, {}, {}
    silver = lake.silver_path(plan.spec.name)
    silver_types = {f.name: f.type for f in lake.tables.schema(silver)} \
        if lake.tables.exists(silver) else {}
    for source in plan.sources:
        for found, path in ((snapshot, lake.snapshot_path(source.db, source.name)),
                            (changes, lake.changes_path(source.db, source.name))):
            if found is snapshot and window.splits is None:
                continue  # no snapshot rows in the window
            if lake.tables.exists(path):
                found[source.qualified] = {f.name: f.type for f in lake.tables.schema(path)}
        in_window[source.qualified] = tuple(
            (op, offset, ts, statement) for db, tbl, op, offset, ts, statement in statements
            if (db, tbl) == (source.db, source.name) and window.after < offset <= window.upto)
    return Facts(snapshot, changes, in_window, silver_types)


def renamed_columns(statements) -> dict[str, list[tuple[str, str]]]:
    """Columns a DDL renamed: new name -> [(earlier name, offset of that rename)], oldest
    first (a chain a -> b -> c gives c: [(a, R1), (b, R2)])."""
    earlier: dict[str, list[tuple[str, str]]] = {}
    for op, offset, _, statement in statements:
        for old, new in ddl.renamed_columns(statement) if op == "ddl" else []:
            earlier[new] = [*earlier.pop(old, []), (old, offset)]
    return earlier


# -- the steps of a batch ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    """One statement of a batch. `kind`: view (a temp view named `name`), merge (run it),
    stage (write to the staging table `name`, then read it back as view `view`), append
    (write into the silver table `name` when it does not exist yet)."""

    title: str
    sql: str
    kind: str = "view"
    name: str = ""
    args: dict = field(default_factory=dict)
    splits: tuple = ()       # for a view of done splits: its rows
    view: str = ""
    crash_point: str = ""    # faults.point after it
    # A stage that is not needed when every key has one row: the check, and the view then
    unique_check: str = ""
    as_is: str = ""


def batch_steps(lake, plan: SilverPlan, window: Window, facts: Facts,
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
            steps.append(Step(f"{splits_view}: the done splits of {source.qualified} (id, "
                              f"attempt, watermark)", "", "splits", splits_view,
                              splits=window.splits.get(source.qualified, ())))
            steps.append(Step(
                f"{images}_{i}_s: snapshot rows of {source.qualified}",
                snapshot_images_sql(lake, source, splits_view, renames,
                                    facts.snapshot_columns.get(source.qualified)),
                name=f"{images}_{i}_s", args={"source_table": source.qualified}))
            parts.append(f"{images}_{i}_s")
        if source.qualified not in facts.changes_columns and facts.changes_columns:
            continue  # nothing captured for it yet (snapshot-only)
        rename_args = {f"rename_{k}": offset for k, offset in
                       enumerate(o for chain in renames.values() for _, o in chain)}
        steps.append(Step(
            f"{images}_{i}_b: binlog changes of {source.qualified}",
            binlog_images_sql(lake, source, renames,
                              facts.changes_columns.get(source.qualified)),
            name=f"{images}_{i}_b",
            args={"source_table": source.qualified, "after": window.after,
                  "upto": window.upto, **rename_args}))
        parts.append(f"{images}_{i}_b")
    if cascaded:
        steps.append(Step(f"{images}_x: the rows foreign-key cascades changed (InnoDB's, not in "
                          f"the binlog)", "-- worked out by cdc_sql/cascades.py from the "
                          "parents' deletes and key changes and the child's versions", "cascade",
                          f"{images}_x"))
        parts.append(f"{images}_x")
    steps.append(Step(f"{images}: every image of the batch",
                      " UNION ALL ".join(f"SELECT * FROM {quote(p)}" for p in parts), name=images))
    steps.append(Step(f"{candidates}: the projection over {images}", candidates_sql(plan, images),
                      name=candidates))
    merged = candidates
    if window.first and plan.snapshot_keys_unique:
        rows_sql, rows_args = snapshot_rows_sql(plan, candidates, window)
        steps.append(Step("the snapshot rows, written into silver as it is created (first "
                          "batch only)", rows_sql, "append", lake.silver_path(name), rows_args,
                          crash_point="silver.snapshot_written"))
        merged = f"cdc_rest_{name}"
        steps.append(Step(f"{merged}: what is left to MERGE after the snapshot rows",
                          render("silver_snapshot_rest", candidates=quote(candidates)),
                          name=merged))
    unique = "" if plan.key_nullable else render(
        "silver_keys_unique", key=", ".join(quote(k) for k in plan.key), candidates=quote(merged))
    steps.append(Step(f"cdc_changes_{name}: the last candidate per key, staged in "
                      f"{lake.staging_path(name)} (when no key has two candidates, the "
                      f"candidates as they are)", changes_sql(plan, merged), "stage",
                      lake.staging_path(name), view=f"cdc_changes_{name}",
                      crash_point="silver.staged", unique_check=unique,
                      as_is=f"SELECT {', '.join(quote(c) for c in (*plan.columns, '_cdc_remove'))}"
                            f" FROM {quote(merged)}"))
    if window.replace:
        return steps + replace_steps(lake, plan, window, f"cdc_changes_{name}",
                                     facts.silver_columns)
    steps.append(Step("the MERGE into silver (silver and history are first given the "
                      "source's columns)",
                      merge_sql(lake, plan, f"cdc_changes_{name}", facts.dropped(plan)), "merge",
                      "silver", crash_point="silver.merged"))
    if plan.spec.history:
        steps.append(Step(f"cdc_versions_{name}: the history versions, staged in "
                          f"{lake.staging_path(name + '_history')}",
                          history_versions_sql(lake, plan, candidates), "stage",
                          lake.staging_path(f"{name}_history"), view=f"cdc_versions_{name}",
                          crash_point="history.staged"))
        steps.append(Step("the MERGE into history",
                          history_merge_sql(lake, plan, f"cdc_versions_{name}"), "merge",
                          crash_point="history.merged"))
    return steps


def replace_steps(lake, plan: SilverPlan, window: Window, changes_view: str,
                  silver_columns: tuple[str, ...] = ()) -> list[Step]:
    """A re-snapshot's last steps: history gains the differences as versions (first: a replay
    compares with history, and silver, once replaced, no longer holds the old rows), then silver
    is replaced by the last candidate of every key, in one commit."""
    name, steps = plan.spec.name, []
    if plan.spec.history:
        steps.append(Step("history given the source's columns and types (old versions cast)",
                          "", "evolve-history"))
        steps.append(Step(f"cdc_versions_{name}: the rows that differ from history's current "
                          f"versions, staged in {lake.staging_path(name + '_history')}",
                          history_resnapshot_sql(lake, plan, changes_view), "stage",
                          lake.staging_path(f"{name}_history"), {"upto": window.upto},
                          view=f"cdc_versions_{name}",
                          crash_point="history.staged"))
        steps.append(Step("the MERGE into history",
                          history_merge_sql(lake, plan, f"cdc_versions_{name}"), "merge",
                          crash_point="history.merged"))
    kept = semantics.replace_kept(plan.spec, plan.columns, silver_columns,
                                  _key_match(plan, "t", "s"),
                                  table_ref(lake.silver_path(name)), quote(changes_view))
    steps.append(Step("silver replaced by the re-snapshot's rows, in one commit",
                      render("silver_replace", columns=", ".join(quote(c) for c in plan.columns),
                             changes=quote(changes_view),
                             removes=semantics.removes(plan.spec),  # hook: change semantics
                             kept=kept),
                      "replace", lake.silver_path(name),
                      {"upto": window.upto} if ":upto" in kept else {},
                      crash_point="silver.merged"))
    return steps


def describe(steps: list[Step]) -> str:
    """The steps as `cdc-sql plan` prints them."""
    out = []
    for n, step in enumerate(steps, 1):
        sql = step.sql.strip() or f"-- rows: {list(step.splits)}"
        bound = "".join(f"\n--   :{k} = {v!r}" for k, v in step.args.items())
        if step.unique_check:
            sql = (f"{step.unique_check.strip()}\n-- when it is true:\n{step.as_is}\n"
                   f"-- else:\n{sql}")
        out.append(f"-- step {n}: {step.title}{bound}\n{sql}\n")
    return "\n".join(out)


# -- carrying out a window ---------------------------------------------------------------------
def merge_window(lake, plan: SilverPlan, window: Window,
                 statements: list[tuple] | None = None, silver_version: int | None = None,
                 cascading: list[cascades.ParentChange] = ()) -> list[cascades.ParentChange]:
    """The first batch (silver created from the snapshot rows; with history, history begins
    once silver is past every split's read) or an ordinary one. `silver_version`: silver's
    version state recorded with the window's start (where cascades start from); `cascading`:
    keys of parents that cascades deleted or changed in the window. Returns this table's own
    such keys (for the tables it cascades into)."""
    cascaded, moves = cascade_rows(lake, plan, window, statements, silver_version, cascading) \
        if plan.cascades else (None, [])
    if not window.first or not plan.spec.history:
        run_batch(lake, plan, window, statements, cascaded)
        return moves
    start = window.history_start or window.upto
    if not lake.tables.exists(lake.history_path(plan.spec.name)):  # else a rerun: past it
        silver_only = replace(plan, spec=replace(plan.spec, history=False))
        run_batch(lake, silver_only, replace(window, upto=min(start, window.upto)), statements,
                  cascaded)
        _start_history(lake, plan)
    if start < window.upto:
        run_batch(lake, plan, Window(start, window.upto), statements, cascaded)
    return moves


def run_batch(lake, plan: SilverPlan, window: Window, statements: list[tuple] | None = None,
              cascaded: tuple | None = None) -> None:
    """MERGE the window into silver, then into its history table when the pipeline keeps one.
    `cascaded`: the rows cascades changed (cascade_rows), of this window and maybe beyond."""
    started = time.monotonic()
    with lake.tables.pinned():  # nothing else writes silver or bronze until the engine's steps
        facts = read_facts(lake, plan, window, statements)
        log.debug("silver %s: facts in %.3fs", plan.spec.name, time.monotonic() - started)
        if not cascaded and small_merge.merged(lake, plan, window, facts):
            return
    nothing = False  # no change to merge into silver
    inside = []
    if cascaded:
        schema, rows = cascaded
        at = schema.names.index("_cdc_offset")
        inside = [row for row in rows if window.after < row[at] <= window.upto]
    steps = batch_steps(lake, plan, window, facts, cascaded=bool(inside))
    for n, step in enumerate(steps):
        started = time.monotonic()
        if step.kind == "cascade":
            lake.spark.createDataFrame(inside, schema).createOrReplaceTempView(step.name)
            continue
        if step.kind == "view":
            if not any(_references(later, step.name) for later in steps[n + 1:]
                       if later.kind != "view"):
                continue  # sent with the view that reads it
            _define_view(lake.engine, step, [s for s in steps[:n] if s.kind == "view"])
            log.debug("silver %s: %s in %.3fs", plan.spec.name, step.title.split(":")[0],
                      time.monotonic() - started)
            continue
        if step.name == "silver" or step.kind == "evolve-history":
            changes = lake.spark.table(f"cdc_changes_{plan.spec.name}").drop("_cdc_remove")
            if step.kind == "evolve-history":  # a re-snapshot: history takes the new types
                _start_history(lake, plan)
                evolve(lake, lake.history_path(plan.spec.name), plan, changes.schema, {},
                       any_type=True)
                continue
            _prepare_targets(lake, plan, changes.schema, facts)  # with the source's columns
        if not (nothing and step.name == "silver"):
            nothing = _execute(lake, step) == 0
        if step.crash_point:
            faults.point(step.crash_point)
        log.debug("silver %s: %s in %.3fs", plan.spec.name, step.title.split(":")[0],
                  time.monotonic() - started)
    apply_truncates(lake, plan, facts)


# -- foreign-key cascades ------------------------------------------------------------------------
def cascade_rows(lake, plan: SilverPlan, window: Window, statements: list[tuple] | None,
                 silver_version: int | None, cascading: list[cascades.ParentChange] = ()
                 ) -> tuple[tuple | None, list[cascades.ParentChange]]:
    """The child rows the foreign-key cascades of the window changed, as images of the batch:
    (Spark schema, rows), or None when no parent deleted or changed a key; and the child keys
    the cascades deleted or changed. Read: each parent's deletes and key changes (with
    `cascading`, those cascades made); the child's versions that may be reached (silver's rows
    at `silver_version`, or the snapshot rows in a first batch; and the window's own changes)
    of the rows whose foreign key holds one of those parent keys. Worked out by
    cascades.cascade."""
    spark, source = lake.spark, plan.sources[0]
    parents = {fk.parent for fk in plan.cascades}
    changes = [c for c in cascading
               if c.parent in parents and window.after < c.offset <= window.upto]
    stamps = {c.offset: c.ts for c in changes}
    if statements is None:
        statements = read_statements(lake)
    for parent_table in sorted({fk.parent_table for fk in plan.cascades}):
        path = lake.changes_path(*parent_table)
        if not lake.tables.exists(path):
            continue
        fk = next(f for f in plan.cascades if f.parent_table == parent_table)
        rows = lake.engine.sql(render("cascade_parent_changes",
                                      key=", ".join(quote(k) for k in fk.referenced),
                                      bronze_changes=table_ref(path)),
                               {"after": window.after, "upto": window.upto}).collect()
        unchecked = {_event_of(offset) for db, tbl, op, offset, _, _ in statements
                     if op == "no_fk_checks" and (db, tbl) == parent_table}
        stamps.update((row["_cdc_offset"], row["_cdc_ts"]) for row in rows)
        changes += cascades.parent_changes(fk.parent, [
            (row["_cdc_offset"], row["_cdc_op"], tuple(row[k] for k in fk.referenced))
            for row in rows if _event_of(row["_cdc_offset"]) not in unchecked])
    if not changes:
        return None, []
    changes.sort(key=lambda c: c.offset)  # stable: a cascade's moves keep their order
    versions = _child_versions(lake, plan, window, statements, silver_version)
    columns = _row_columns(source, versions.columns)
    reached = _reached(spark, plan, versions, changes).collect()
    found = [cascades.Version(row["_cdc_offset"], {c: row[c] for c in columns},
                              row["_cdc_deleted"]) for row in reached]
    out = []
    outcome = cascades.cascade(plan.cascades, plan.key, found, changes, source.qualified)
    for offset, op, image in outcome.rows:
        meta = {"_cdc_offset": offset, "_cdc_op": op, "_cdc_ts": stamps.get(offset),
                "_cdc_source_table": source.qualified, "_cdc_deleted": op == "d",
                "_cdc_attempt": None}
        out.append(tuple({**image, **meta}[c] for c in versions.columns))
    log.info("silver %s: %d rows changed by foreign-key cascades in (%s, %s]", plan.spec.name,
             len(out), window.after, window.upto)
    return (versions.schema, out), [replace(c, ts=stamps.get(c.offset))
                                    for c in outcome.as_parent(source.qualified)]


def _row_columns(source: SourceTable, names: list[str]) -> list[str]:
    """Of an image's columns, the row's own: the source's and their key texts."""
    texts = {key_text_name(k.name) for k in source.key_text_columns}
    return [n for n in names if not n.startswith("_cdc_") or n in texts]


def _event_of(offset: str) -> tuple[int, int]:
    """The rows event an offset is a row of."""
    parsed = Offset.parse(offset)
    return parsed.file_seq, parsed.pos


def _child_versions(lake, plan: SilverPlan, window: Window, statements: list[tuple] | None,
                    silver_version: int | None):
    """Every image of the child the window reads (snapshot rows, binlog changes) and, after the
    first batch, silver's rows as the window began, in the images' columns."""
    spark, name, source = lake.spark, plan.spec.name, plan.sources[0]
    facts = read_facts(lake, plan, window, statements)
    steps = [s for s in batch_steps(lake, plan, window, facts)
             if s.name.startswith(f"cdc_images_{name}_0_")]
    for n, step in enumerate(steps):
        if step.kind == "splits":
            _execute(lake, step)
        else:
            _define_view(lake.engine, step, [s for s in steps[:n] if s.kind == "view"])
    parts = [spark.table(s.name) for s in steps if s.kind == "view"]
    silver = lake.silver_path(name)
    if not (window.first or window.replace) and lake.tables.exists(silver):
        view = f"cdc_silver_{name}_as_of"
        lake.engine.read(silver, silver_version).createOrReplaceTempView(view)
        present = set(spark.table(view).columns)  # that version's columns
        schema = parts[0].schema
        columns = ", ".join(quote(c) if c in present else
                            f"CAST(NULL AS {schema[c].dataType.simpleString()}) AS {quote(c)}"
                            for c in _row_columns(source, schema.names))
        parts.append(lake.engine.sql(render("cascade_silver_rows", columns=columns,
                                            silver=quote(view),
                                            live=semantics.live_where(present)),  # hook
                                     {"source_table": source.qualified}))
    versions = parts[0]
    for part in parts[1:]:
        versions = versions.unionByName(part)
    return versions


def _reached(spark, plan: SilverPlan, versions, changes):
    """The versions of the child rows whose foreign key, in any version, holds a key the parent
    changes name (old or new): the rows a cascade may reach, with all their versions. Through a
    foreign key to the table itself, the rows below those too, level by level."""
    from pyspark.sql.types import StructType

    key = list(plan.key)
    table = plan.sources[0].qualified
    wanted = [{c.old for c in changes if c.parent == fk.parent} |
              {c.new for c in changes if c.parent == fk.parent and c.new is not None}
              for fk in plan.cascades]
    found: set[tuple] = set()
    while any(wanted):
        new = {tuple(row) for row in _holding(spark, plan, versions, wanted).collect()} - found
        found |= new
        wanted = [new if fk.parent == table else set() for fk in plan.cascades]
    keys = spark.createDataFrame(sorted(found, key=repr),
                                 StructType([versions.schema[k] for k in key]))
    return versions.join(keys, key, "left_semi")


def _holding(spark, plan: SilverPlan, versions, wanted: list[set[tuple]]):
    """The keys of the versions whose foreign key `n` holds one of `wanted[n]`."""
    from functools import reduce

    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    hits = None
    for fk, values in zip(plan.cascades, wanted):
        if not values:
            continue
        fields = [StructField(f"_cdc_v{i}", versions.schema[c].dataType)
                  for i, c in enumerate(fk.columns)]
        given = spark.createDataFrame(sorted(values, key=repr), StructType(fields))
        matches = []
        for i, column in enumerate(fk.columns):
            left, right = versions[column], given[f"_cdc_v{i}"]
            if fk.folded[i] and isinstance(fields[i].dataType, StringType):
                left, right = F.lower(F.rtrim(left)), F.lower(F.rtrim(right))
            matches.append(left == right)
        found = versions.join(given, reduce(lambda a, b: a & b, matches), "left_semi") \
            .select(*plan.key)
        hits = found if hits is None else hits.union(found)
    return hits.distinct()


def _references(step: Step, name: str) -> bool:
    return any(quote(name) in text for text in (step.sql, step.unique_check, step.as_is))


def _define_view(engine, step: Step, earlier: list[Step]) -> None:
    """A view in one round trip with the earlier views it reads (as WITH clauses): each
    round trip to the engine costs 7-10 ms, most of a small table's batch. Parameters of
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


def _execute(lake, step: Step) -> int | None:
    """Carry out one step other than a view (views go through _define_view); a stage step
    returns its rows when it knows them."""
    spark = lake.spark
    if step.kind == "splits":
        spark.createDataFrame(list(step.splits), "split_id INT, attempt STRING, watermark STRING") \
            .createOrReplaceTempView(step.name)
    elif step.kind == "append":
        if not lake.tables.exists(step.name):
            rows = lake.engine.sql(step.sql, step.args)
            create(lake, step.name, rows)  # the commit that creates silver holds the rows
    elif step.kind == "replace":
        lake.engine.replace(lake.engine.sql(step.sql, step.args), step.name, RESNAPSHOT_MARK)
    elif step.kind == "stage":
        unique, rows = spark.sql(step.unique_check).collect()[0] if step.unique_check \
            else (False, None)
        if unique:
            # One candidate per key: they are the changes. A MERGE evaluates a plain view of
            # bronze as fast as a staged table (measured: 0.40-0.46 s each for 100k changes),
            # and staging costs another 0.2-0.5 s.
            spark.sql(step.as_is).createOrReplaceTempView(step.view)
            return rows
        _staged(lake, step.name, lake.engine.sql(step.sql, step.args)) \
            .createOrReplaceTempView(step.view)
    else:
        lake.engine.sql(step.sql, step.args).collect()
    return None


def _prepare_targets(lake, plan: SilverPlan, schema, facts: Facts) -> None:
    """Silver created (empty) if it is not there; history started; both given the source's
    current columns."""
    path = lake.silver_path(plan.spec.name)
    if not lake.tables.exists(path):
        create(lake, path, lake.spark.createDataFrame([], schema))
    renames = {new: [old for old, _ in chain] for source in plan.sources
               for new, chain in facts.renames(source.qualified).items()}
    if plan.spec.history:
        _start_history(lake, plan)  # before silver moves
    evolve(lake, path, plan, schema, renames)
    if plan.spec.history:
        evolve(lake, lake.history_path(plan.spec.name), plan, schema, renames)


def _start_history(lake, plan: SilverPlan) -> None:
    """A history table starts from silver as it stands: after the first batch's snapshot, or
    when a pipeline turns history on later."""
    path = lake.history_path(plan.spec.name)
    if not lake.tables.exists(path):
        create(lake, path, _history_seed(lake.engine.read(lake.silver_path(plan.spec.name)), plan))


def create(lake, path: str, rows) -> None:
    """A silver or history table created with its first rows, in one commit (a run killed
    after it finds the table complete), its statistics leaving out decimals wider than 64 bits:
    Sail 0.7 reads a file whose min equals its max from the statistics, through a 64-bit
    integer (BIGINT UNSIGNED's maximum came back as 2^63-1)."""
    lake.engine.append(rows, path, stats_properties(rows.schema))


def apply_truncates(lake, plan: SilverPlan, facts: Facts) -> None:
    """Rows a TRUNCATE in the window removed leave silver (the MERGE kept later changes), and
    their history versions end there; so do the rows of partitions a TRUNCATE or DROP
    PARTITION removed (op `delete`: the statement and the conditions on the partitioning
    column that say which rows, source/partitions.py), where silver's row at that offset was
    still the one the partition held."""
    if not semantics.applies_truncate(plan.spec):  # hook: skip: [truncate]
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
            semantics.remove_rows(lake, plan.spec, lake.silver_path(plan.spec.name),  # hook
                                  removed_at, removed_ts,
                                  [("_cdc_offset", "<", removed_at), *conditions, *shard])
            if plan.spec.history:
                lake.tables.update_rows(
                    lake.history_path(plan.spec.name),
                    {"_cdc_valid_to": removed_at, "_cdc_current": False,
                     "_cdc_valid_to_ts": removed_ts.strftime("%Y-%m-%d %H:%M:%S.%f")},
                    [("_cdc_current", "=", True), ("_cdc_valid_from", "<", removed_at),
                     *conditions, *shard])


def evolve(lake, path: str, plan: SilverPlan, changes_schema,
           renames: dict[str, list[str]], any_type: bool = False) -> list[str]:
    """Bring a silver (or history) table's columns up to the source's after a DDL, in one
    commit marked as cdc-sql's own: columns added there are added (NULL in older rows); a
    renamed column is added under its new name, filled from the old one; a widened type (INT to
    BIGINT, more DECIMAL digits, FLOAT to DOUBLE) is rewritten. Columns dropped there stay, and
    their names are returned (NULL from now on). Any other type change stops the table."""
    from pyspark.sql.types import StructField

    current = {f.name: f.dataType for f in lake.engine.read(path).schema.fields}
    wanted = {f.name: f for f in changes_schema.fields}
    widened = {}
    for name, field_ in wanted.items():
        if name in current and current[name] != field_.dataType:
            if not any_type and not widens(current[name], field_.dataType):
                raise SourceError(
                    f"column `{name}` of {plan.spec.name} changed type in the source, from "
                    f"{current[name].simpleString()} to {field_.dataType.simpleString()}, which "
                    f"is not a widening cdc-sql can apply to {path}. Re-snapshot the table: "
                    f"cdc-sql resnapshot PIPELINE --tables {plan.spec.name}")
            widened[name] = field_.dataType
    added = [(f.name, f.dataType, next((old for old in reversed(renames.get(f.name, []))
                                        if old in current), None))
             for name, f in wanted.items() if name not in current]
    if widened or any(source for _, _, source in added):
        try:  # one commit: a crash leaves all or nothing
            lake.tables.reshape(path, widened, added)
        except Exception as exc:  # noqa: BLE001 - a cast of old values that failed, explained
            if not any_type:
                raise
            types = ", ".join(f"`{n}` {t.simpleString()}" for n, t in widened.items())
            raise SourceError(
                f"{path}: the re-snapshot gives {types}, and this table's old values do not all "
                f"convert ({exc}). Keep its old versions elsewhere and remove the table: it "
                f"starts again from silver") from None
    elif added:
        lake.tables.add_columns(path, [StructField(name, t, True) for name, t, _ in added])
    return [name for name in current if name not in wanted and not name.startswith("_cdc_")]


def widens(old, new) -> bool:
    """Every value of Spark type `old` is exactly a value of `new`."""
    from pyspark.sql import types as T

    digits = {T.ByteType: 3, T.ShortType: 5, T.IntegerType: 10, T.LongType: 19}
    order = list(digits)
    if type(old) in digits and type(new) in digits:
        return order.index(type(old)) <= order.index(type(new))
    if type(old) in digits and isinstance(new, T.DecimalType):
        return new.precision - new.scale >= digits[type(old)]
    if isinstance(old, T.DecimalType) and isinstance(new, T.DecimalType):
        return new.scale >= old.scale and new.precision - new.scale >= old.precision - old.scale
    return isinstance(old, T.FloatType) and isinstance(new, T.DoubleType)


def _history_seed(silver, plan: SilverPlan):
    """Silver's rows as current versions, each since its last change: the start of a history
    (empty with a new silver table), typed like silver."""
    from pyspark.sql import functions as F

    offset, ts = F.col("_cdc_offset"), F.col("_cdc_ts")
    silver = silver.where(semantics.live(silver.columns))  # hook: soft-deleted rows are not
    return silver.select(*plan.row_columns, "_cdc_op", offset.alias("_cdc_valid_from"),
                         ts.alias("_cdc_valid_from_ts"),
                         F.lit(None).cast("string").alias("_cdc_valid_to"),
                         F.lit(None).cast(silver.schema["_cdc_ts"].dataType).alias("_cdc_valid_to_ts"),
                         F.lit(True).alias("_cdc_current"))


def _staged(lake, staging: str, df):
    """Land a MERGE's source in a staging Delta table and read it back: a MERGE whose source is
    a query may evaluate it more than once (Sail 0.7 does: 4.3 s instead of 1.5 s for 200k
    changes), and a history batch reads the table it merges into. A crash after staging just
    stages again."""
    lake.engine.stage(df, staging)
    return lake.engine.read(staging)


# -- the SQL of each step ----------------------------------------------------------------------
def _image_columns(source: SourceTable, present: dict | None, renames: dict, prefix: str,
                   by_offset: bool) -> str:
    """The source's columns read from a bronze table whose columns (name -> Arrow type) are
    `present` (None: not known, every column taken as there): by name; for rows written before
    a rename, by the earlier name (`renames`: column -> [(earlier name, offset)], oldest first;
    binlog rows by their offset against bound parameters, snapshot rows by the newest name
    bronze has); NULL where bronze has no such column; cast where bronze's type is not the
    contract's (a widened column, say)."""
    def read(name: str) -> str:
        return f"{prefix}{quote(name)}" if present is None or name in present else "NULL"

    def typed(expr: str, column, name: str | None) -> str:
        if name is not None and expr != "NULL" and \
                (present is None or present[name] == arrow_type(column.spark_type)):
            return expr
        return f"CAST({expr} AS {column.spark_type})"

    items, k = [], 0
    for column in source.columns:
        chain = renames.get(column.name, [])
        if chain and by_offset:
            cases = "".join(f"WHEN _cdc_offset < :rename_{k + n} THEN {read(old)} "
                            for n, (old, _) in enumerate(chain))
            value = typed(f"CASE {cases}ELSE {read(column.name)} END", column, None)
        elif chain:
            names = [column.name, *(old for old, _ in reversed(chain))]
            name = next((n for n in names if present is None or n in present), None)
            value = typed(read(name) if name else "NULL", column, name)
        else:
            value = typed(read(column.name), column, column.name)
        k += len(chain)
        items.append(f"{value} AS {quote(column.name)}")
    for column in source.key_text_columns:
        name = key_text_name(column.name)
        items.append(f"{read(name)} AS {quote(name)}")
    return ",\n  ".join(items)


def snapshot_images_sql(lake, source: SourceTable, splits_view: str,
                        renames: dict | None = None, present=None) -> str:
    return render(
        "snapshot_images",
        columns=_image_columns(source, present, renames or {}, "b.", by_offset=False),
        bronze_snapshot=table_ref(lake.snapshot_path(source.db, source.name)),
        done_splits=quote(splits_view),
    )


def binlog_images_sql(lake, source: SourceTable, renames: dict | None = None,
                      present=None) -> str:
    return render(
        "binlog_images",
        columns=_image_columns(source, present, renames or {}, "", by_offset=True),
        bronze_changes=table_ref(lake.changes_path(source.db, source.name)),
    )


def candidates_sql(plan: SilverPlan, images_view: str) -> str:
    items = [f"{expr} AS {quote(name)}" for expr, name in plan.projection.columns]
    items += [f"{quote(key_text_name(source))} AS {quote(key_text_name(out))}"
              for source, out in plan.key_texts]
    matches = plan.projection.where or "TRUE"
    return render(
        "silver_candidates",
        projection=",\n  ".join(items),
        matches=matches,
        images=quote(images_view),
        extra=semantics.candidate_columns(plan.spec, matches),  # hook: change semantics
        kept=semantics.candidate_filter(plan.spec),
    )


def snapshot_rows_sql(plan: SilverPlan, candidates_view: str,
                      window: Window) -> tuple[str, dict]:
    """The snapshot rows silver is created with, one UNION ALL branch per group of splits read
    together (an attempt: one bronze commit, one key range). Each branch reads only its own
    bronze files, so Sail writes silver's first files with disjoint key ranges and they need no
    clustering (measured, 10M rows: one query mixed the groups' files into two partitions that
    each spanned every key, and a 22 s z-order followed)."""
    attempts = sorted({attempt for entries in (window.splits or {}).values()
                       for _, attempt, _ in entries})
    if len(attempts) < 2:
        return render("silver_snapshot_rows", output=", ".join(quote(c) for c in plan.columns),
                      candidates=quote(candidates_view), group=""), {}
    branches = [render("silver_snapshot_rows", output=", ".join(quote(c) for c in plan.columns),
                       candidates=quote(candidates_view), group=f" AND _cdc_attempt = :group_{i}")
                for i in range(len(attempts))]
    branches[1:] = ["\n".join(line for line in branch.splitlines() if not line.startswith("--"))
                    for branch in branches[1:]]  # the template's comment once
    return "\nUNION ALL\n".join(branches), {f"group_{i}": a for i, a in enumerate(attempts)}


def changes_sql(plan: SilverPlan, candidates_view: str) -> str:
    return render(
        "silver_changes",
        output=", ".join(f"c.{quote(c)}" for c in (*plan.columns, "_cdc_remove")),
        key_match=_key_match(plan, "c", "later"),
        candidates=quote(candidates_view),
    )


def history_versions_sql(lake, plan: SilverPlan, candidates_view: str) -> str:
    return render(
        "history_versions",
        key=", ".join(quote(k) for k in plan.key),
        candidates=quote(candidates_view),
        columns=", ".join(quote(c) for c in plan.row_columns),
        history_columns=", ".join(f"h.{quote(c)}" for c in plan.row_columns),
        history=table_ref(lake.history_path(plan.spec.name)),
        key_match=_key_match(plan, "h", "f"),
    )


def history_resnapshot_sql(lake, plan: SilverPlan, changes_view: str) -> str:
    return render(
        "history_resnapshot",
        changes=quote(changes_view),
        history=table_ref(lake.history_path(plan.spec.name)),
        columns=", ".join(f"f.{quote(c)}" for c in plan.row_columns),
        history_columns=", ".join(f"h.{quote(c)}" for c in plan.row_columns),
        key_match=_key_match(plan, "h", "f"),
        same=" AND ".join(f"h.{quote(c)} <=> f.{quote(c)}" for c in plan.row_columns),
    )


def history_merge_sql(lake, plan: SilverPlan, versions_view: str) -> str:
    columns = [quote(c) for c in plan.history_columns]
    return render(
        "history_merge",
        history=table_ref(lake.history_path(plan.spec.name)),
        versions=quote(versions_view),
        key_match=_key_match(plan, "t", "s"),
        columns=", ".join(columns),
        values=", ".join(f"s.{c}" for c in columns),
    )


def _key_match(plan: SilverPlan, left: str, right: str) -> str:
    """Keys compare with `=`; with `<=>` only where a declared key may hold NULLs (a MERGE on
    `<=>` is about 20% slower)."""
    equals = "<=>" if plan.key_nullable else "="
    return " AND ".join(f"{left}.{quote(k)} {equals} {right}.{quote(k)}" for k in plan.key)


def merge_sql(lake, plan: SilverPlan, changes_view: str, dropped: tuple[str, ...] = ()) -> str:
    """`dropped`: silver columns the source no longer has; an update sets them NULL."""
    columns = [quote(c) for c in plan.columns]
    return render(
        "silver_merge",
        silver=table_ref(lake.silver_path(plan.spec.name)),
        changes=quote(changes_view),
        key_match=_key_match(plan, "t", "s"),
        assignments=", ".join([*(f"t.{c} = s.{c}" for c in columns),
                               *(f"t.{quote(c)} = NULL" for c in dropped)]),
        columns=", ".join(columns),
        values=", ".join(f"s.{c}" for c in columns),
        removes=semantics.removes(plan.spec, "s"),  # hook: change semantics
    )

