"""Silver: the live source rows after projection, kept by one primary-key MERGE per batch.

A batch for one silver table covers the binlog window (P, U]: P the applied offset in state, U a
transaction boundary the capture has reached. The first batch also brings every snapshot split's
rows, placed at their watermarks; it waits until all splits of the table are done and capture
has passed the highest watermark, so silver is transaction-consistent from its first commit.
State records P := U only after the MERGE commits; a rerun of the same window is harmless.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass, replace

from cdc_sql import faults
from cdc_sql.config.model import Table
from cdc_sql.config.projection import Projection, resolve_projection
from cdc_sql.engine import EVOLVE_MARK, OWN_MERGE, table_ref
from cdc_sql.errors import ConfigError, SourceError, StateError
from cdc_sql.lake import bronze
from cdc_sql.source import ddl
from cdc_sql.source.offsets import Offset
from cdc_sql.source.schema import SourceTable
from cdc_sql.source.values import decode_sql
from cdc_sql.sql import quote, render, string_literal

ENGINE_COLUMNS = ("_cdc_offset", "_cdc_op", "_cdc_ts")
HISTORY_COLUMNS = ("_cdc_op", "_cdc_valid_from", "_cdc_valid_from_ts", "_cdc_valid_to",
                   "_cdc_valid_to_ts", "_cdc_current")


@dataclass(frozen=True)
class SilverPlan:
    """How one pipeline table becomes one silver table."""

    spec: Table
    sources: tuple[SourceTable, ...]
    projection: Projection

    @property
    def sharded(self) -> bool:
        return self.spec.is_pattern

    @property
    def key(self) -> tuple[str, ...]:
        per_shard = self.sharded and not self.spec.key_unique_across_shards
        return self.projection.key + (("_cdc_source_table",) if per_shard else ())

    @property
    def row_columns(self) -> tuple[str, ...]:
        """The row as users see it: the projected columns (and the shard it came from)."""
        extra = ("_cdc_source_table",) if self.sharded else ()
        return tuple(name for _, name in self.projection.columns) + extra

    @property
    def columns(self) -> tuple[str, ...]:
        """Silver's columns."""
        return self.row_columns[:len(self.projection.columns)] + ENGINE_COLUMNS + \
            self.row_columns[len(self.projection.columns):]

    @property
    def snapshot_keys_unique(self) -> bool:
        """No two snapshot rows share a silver key: splits are disjoint ranges of a real key,
        and shards' rows differ by `_cdc_source_table` unless declared unique across them."""
        single = len(self.sources) == 1 or not self.spec.key_unique_across_shards
        return single and not any(s.key_nullable for s in self.sources)

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
                              f"has other columns or key than {first.qualified}")
    try:
        projection = resolve_projection(spec, [c.name for c in first.columns], list(first.key))
    except ConfigError as exc:
        raise ConfigError(f"{exc.detail} (table {first.qualified})", file,
                          f"tables[{index}].projection") from None
    return SilverPlan(spec, tuple(sources), projection)


def silver_path(root: str, name: str) -> str:
    return f"{root}/silver/{name}"


def history_path(root: str, name: str) -> str:
    return f"{root}/silver/{name}_history"


def staging_path(root: str, name: str) -> str:
    return f"{root}/_staging/{name}"


# Commits after our recorded version that need no one's attention: compaction and vacuum (same
# content), and our own schema changes and MERGEs (a run that died before its state commit;
# replaying a window is harmless, however often it happened).
CONTENT_PRESERVING = ("OPTIMIZE", "VACUUM START", "VACUUM END", EVOLVE_MARK, OWN_MERGE)


def owned_tables(root: str, spec: Table) -> dict[str, str]:
    """The Delta tables a pipeline table writes, by the state key recording our last version."""
    tables = {"silver_version": silver_path(root, spec.name)}
    if spec.history:
        tables["history_version"] = history_path(root, spec.name)
    return tables


def owned_versions(engine, root: str, spec: Table) -> dict[str, int | None]:
    """Our last version of each table, for state: what check_untouched compares against."""
    return {key: engine.version(path) if engine.exists(path) else None
            for key, path in owned_tables(root, spec).items()}


def check_untouched(engine, root: str, spec: Table, table_state: dict) -> None:
    """Refuse to merge over a silver (or history) table someone else changed since our last
    commit. Allowed after it: compaction and vacuum (content unchanged), cdc-sql's own marked
    schema changes, a RESTORE back to content we wrote, and our own MERGEs (runs that died
    between a MERGE and the state commit; replaying a window is harmless)."""
    for key, path in owned_tables(root, spec).items():
        recorded = table_state.get(key)
        if recorded is not None and engine.exists(path):
            kind = "history" if key == "history_version" else "silver"
            _check_commits(engine, root, f"{kind} table {path.rsplit('/', 1)[-1]}", path, recorded)


def _check_commits(engine, root: str, label: str, path: str, recorded: int) -> None:
    commits = engine.history(path, recorded)
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
        f"over by removing {root}")


def merge_snapshot(engine, root: str, plan: SilverPlan, upto: str,
                   done_splits: dict[str, list[tuple[int, str, str]]],
                   history_start: str | None = None) -> None:
    """The first batch: every done split's rows and the binlog window ("", upto].

    The snapshot rows are written into silver as they are (the commit that creates it), and
    only the binlog changes go through the last-change-per-key step and the MERGE, whose offset
    guard lets a row's later changes win: the same silver as one MERGE of every candidate, but
    without pushing every snapshot row through a join (10M rows: 3.4 GB of memory on Sail).
    A rerun finds silver created and replays the MERGE, which is harmless.

    With history, silver is first brought to `history_start` (an offset past which no split's
    rows hold a change; default: the highest watermark), history starts from silver as it
    stands there, and the rest of the window is an ordinary batch."""
    start = history_start or max(w for splits in done_splits.values() for _, _, w in splits)
    if not plan.spec.history:
        merge_batch(engine, root, plan, "", upto, done_splits, write_snapshot=True)
        return
    if not engine.exists(history_path(root, plan.spec.name)):  # else a rerun: silver is past it
        silver_only = replace(plan, spec=replace(plan.spec, history=False))
        merge_batch(engine, root, silver_only, "", min(start, upto), done_splits,
                    write_snapshot=True)
        _start_history(engine, root, plan)
    if start < upto:
        merge_batch(engine, root, plan, start, upto)


def merge_batch(engine, root: str, plan: SilverPlan, after: str, upto: str,
                done_splits: dict[str, list[tuple[int, str, str]]] | None = None,
                write_snapshot: bool = False) -> None:
    """MERGE the window (after, upto] into silver, then into its history table when the
    pipeline keeps one. `done_splits`: splits merged with the window (the first
    batch's, or those of a table that began to match later: a new shard). `write_snapshot`
    (the first batch): their rows are written into silver when it is created, not merged."""
    spark = engine.spark
    name = plan.spec.name
    images = f"cdc_images_{name}"
    parts, renames, schema_events = [], {}, {}
    for i, source in enumerate(plan.sources):
        if done_splits is not None:
            splits_view = f"{images}_{i}_splits"
            spark.createDataFrame(done_splits.get(source.qualified, []),
                                  "split_id INT, attempt STRING, watermark STRING") \
                .createOrReplaceTempView(splits_view)
            spark.sql(snapshot_images_sql(root, source, splits_view)) \
                .createOrReplaceTempView(f"{images}_{i}_s")
            parts.append(f"{images}_{i}_s")
        window = {"db": source.db, "tbl": source.name, "after": after, "upto": upto}
        schema_events[source.qualified] = spark.sql(render(
            "window_ddl", bronze_binlog=table_ref(bronze.binlog_path(root))), args=window).collect()
        renames.update(renamed_columns(schema_events[source.qualified]))
        spark.sql(binlog_images_sql(root, source, renames), args=window) \
            .createOrReplaceTempView(f"{images}_{i}_b")
        parts.append(f"{images}_{i}_b")
    spark.sql(" UNION ALL ".join(f"SELECT * FROM {quote(p)}" for p in parts)) \
        .createOrReplaceTempView(images)
    candidates = f"cdc_candidates_{name}"
    spark.sql(candidates_sql(plan, images)).createOrReplaceTempView(candidates)
    path = silver_path(root, name)
    merged = candidates
    if write_snapshot and plan.snapshot_keys_unique:
        if not engine.exists(path):
            engine.append(spark.sql(snapshot_rows_sql(plan, candidates)), path)
            faults.point("silver.snapshot_written")
        merged = f"cdc_rest_{name}"
        spark.sql(render("silver_snapshot_rest", candidates=quote(candidates))) \
            .createOrReplaceTempView(merged)
    changes = _staged(engine, staging_path(root, name), spark.sql(changes_sql(plan, merged)))
    faults.point("silver.staged")
    if not engine.exists(path):
        engine.append(changes.drop("_cdc_remove").limit(0), path)
    if plan.spec.history:
        _start_history(engine, root, plan)  # before silver moves
    dropped = evolve(engine, path, plan, changes.drop("_cdc_remove").schema, renames)
    if plan.spec.history:
        evolve(engine, history_path(root, name), plan, changes.drop("_cdc_remove").schema, renames)
    changes.createOrReplaceTempView(f"cdc_changes_{name}")
    spark.sql(merge_sql(root, plan, f"cdc_changes_{name}", dropped)).collect()
    faults.point("silver.merged")
    if plan.spec.history:
        merge_history(engine, root, plan, candidates)
    apply_truncates(engine, root, plan, schema_events)


def _start_history(engine, root: str, plan: SilverPlan) -> None:
    """A history table starts from silver as it stands: after the first batch's snapshot, or
    when a pipeline turns history on later."""
    if not engine.exists(history_path(root, plan.spec.name)):
        engine.append(_history_seed(engine.read(silver_path(root, plan.spec.name)), plan),
                      history_path(root, plan.spec.name))


def renamed_columns(schema_events: list) -> dict[str, list[str]]:
    """Columns a DDL in the window renamed: new name -> its earlier names, newest first."""
    earlier: dict[str, list[str]] = {}
    for op, _, _, statement in schema_events:
        for old, new in ddl.renamed_columns(statement) if op == "ddl" else []:
            earlier[new] = [old, *earlier.pop(old, [])]
    return earlier


def apply_truncates(engine, root: str, plan: SilverPlan, schema_events: dict[str, list]) -> None:
    """Rows a TRUNCATE in the window removed leave silver (the MERGE kept later changes), and
    their history versions end there."""
    for source in plan.sources:
        truncates = [(offset, ts) for op, offset, ts, _ in schema_events[source.qualified]
                     if op == "truncate"]
        if not truncates:
            continue
        truncated_at, truncated_ts = truncates[-1]
        Offset.parse(truncated_at)  # ours, as written by capture
        shard = [("_cdc_source_table", "=", source.qualified)] if plan.sharded else []
        engine.delete_rows(silver_path(root, plan.spec.name),
                           [("_cdc_offset", "<", truncated_at), *shard])
        if plan.spec.history:
            engine.update_rows(history_path(root, plan.spec.name),
                               {"_cdc_valid_to": truncated_at, "_cdc_current": False,
                                "_cdc_valid_to_ts": truncated_ts.strftime("%Y-%m-%d %H:%M:%S.%f")},
                               [("_cdc_current", "=", True),
                                ("_cdc_valid_from", "<", truncated_at), *shard])


def evolve(engine, path: str, plan: SilverPlan, changes_schema,
           renames: dict[str, list[str]]) -> list[str]:
    """Bring a silver (or history) table's columns up to the source's after a DDL, in one
    commit marked as cdc-sql's own: columns added there are added (NULL in older rows); a
    renamed column is added under its new name, filled from the old one; a widened type (INT to
    BIGINT, more DECIMAL digits, FLOAT to DOUBLE) is rewritten. Columns dropped there stay, and
    their names are returned (NULL from now on). Any other type change stops the table."""
    from pyspark.sql.types import StructField

    current = {f.name: f.dataType for f in engine.read(path).schema.fields}
    wanted = {f.name: f for f in changes_schema.fields}
    widened = {}
    for name, field_ in wanted.items():
        if name in current and current[name] != field_.dataType:
            if not widens(current[name], field_.dataType):
                raise SourceError(
                    f"column `{name}` of {plan.spec.name} changed type in the source, from "
                    f"{current[name].simpleString()} to {field_.dataType.simpleString()}, which "
                    f"is not a widening cdc-sql can apply to {path}. Re-snapshot the table: "
                    f"remove {path} and its `table` entry's state (or the whole target.path), "
                    f"then run")
            widened[name] = field_.dataType
    added = [(f.name, f.dataType, next((old for old in renames.get(f.name, []) if old in current),
                                       None)) for name, f in wanted.items() if name not in current]
    if widened or any(source for _, _, source in added):
        engine.reshape(path, widened, added)  # one commit: a crash leaves all or nothing
    elif added:
        engine.add_columns(path, [StructField(name, t, True) for name, t, _ in added])
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


def merge_history(engine, root: str, plan: SilverPlan, candidates: str) -> None:
    """Add the batch's versions to <name>_history and end the versions they follow."""
    spark = engine.spark
    versions = _staged(engine, staging_path(root, f"{plan.spec.name}_history"),
                       spark.sql(history_versions_sql(root, plan, candidates)))
    faults.point("history.staged")
    versions.createOrReplaceTempView(f"cdc_versions_{plan.spec.name}")
    spark.sql(history_merge_sql(root, plan, f"cdc_versions_{plan.spec.name}")).collect()
    faults.point("history.merged")


def _history_seed(silver, plan: SilverPlan):
    """Silver's rows as current versions, each since its last change: the start of a history
    (empty with a new silver table), typed like silver."""
    from pyspark.sql import functions as F

    offset, ts = F.col("_cdc_offset"), F.col("_cdc_ts")
    return silver.select(*plan.row_columns, "_cdc_op", offset.alias("_cdc_valid_from"),
                         ts.alias("_cdc_valid_from_ts"),
                         F.lit(None).cast("string").alias("_cdc_valid_to"),
                         F.lit(None).cast(silver.schema["_cdc_ts"].dataType).alias("_cdc_valid_to_ts"),
                         F.lit(True).alias("_cdc_current"))


def _staged(engine, staging: str, df):
    """Land a MERGE's source in a staging Delta table and read it back: a MERGE whose source is
    a query may evaluate it more than once (Sail 0.7 does: 4.3 s instead of 1.5 s for 200k
    changes), and a history batch reads the table it merges into. A crash after staging just
    stages again."""
    if "://" not in staging:  # a fresh table each time: Sail cannot overwrite one whose
        shutil.rmtree(staging, ignore_errors=True)  # schema gains a column with a table feature
    df.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(staging)
    return engine.read(staging)


def snapshot_images_sql(root: str, source: SourceTable, splits_view: str) -> str:
    return render(
        "snapshot_images",
        columns=", ".join(f"b.{quote(c.name)}" for c in source.columns),
        source_table=string_literal(source.qualified),
        bronze_snapshot=table_ref(bronze.snapshot_path(root, source)),
        done_splits=quote(splits_view),
    )


def binlog_images_sql(root: str, source: SourceTable,
                      renames: dict[str, list[str]] | None = None) -> str:
    """`renames`: column -> its earlier names, for images written before a RENAME COLUMN."""
    return render(
        "binlog_images",
        columns=",\n  ".join(
            f"{decode_sql(c, _image_value(i, c.name, (renames or {}).get(c.name, [])))} "
            f"AS {quote(c.name)}" for i, c in enumerate(source.columns)),
        names=f"array({', '.join(string_literal(c.name) for c in source.columns)})",
        source_table=string_literal(source.qualified),
        bronze_binlog=table_ref(bronze.binlog_path(root)),
    )


def candidates_sql(plan: SilverPlan, images_view: str) -> str:
    return render(
        "silver_candidates",
        projection=", ".join(f"{expr} AS {quote(name)}" for expr, name in plan.projection.columns),
        matches=plan.projection.where or "TRUE",
        images=quote(images_view),
    )


def _image_value(position: int, name: str, earlier: list[str]) -> str:
    by_name = "".join(f"WHEN array_contains(map_keys(e.image), {string_literal(n)}) "
                      f"THEN e.image[{string_literal(n)}] " for n in [name, *earlier])
    return f"CASE WHEN e.in_order THEN get(e.image_values, {position}) {by_name}END"


def snapshot_rows_sql(plan: SilverPlan, candidates_view: str) -> str:
    return render(
        "silver_snapshot_rows",
        output=", ".join(quote(c) for c in plan.columns),
        candidates=quote(candidates_view),
    )


def changes_sql(plan: SilverPlan, candidates_view: str) -> str:
    return render(
        "silver_changes",
        output=", ".join(f"c.{quote(c)}" for c in (*plan.columns, "_cdc_remove")),
        key_match=_key_match(plan, "c", "later"),
        candidates=quote(candidates_view),
    )


def history_versions_sql(root: str, plan: SilverPlan, candidates_view: str) -> str:
    return render(
        "history_versions",
        key=", ".join(quote(k) for k in plan.key),
        candidates=quote(candidates_view),
        columns=", ".join(quote(c) for c in plan.row_columns),
        history_columns=", ".join(f"h.{quote(c)}" for c in plan.row_columns),
        history=table_ref(history_path(root, plan.spec.name)),
        key_match=_key_match(plan, "h", "f"),
    )


def history_merge_sql(root: str, plan: SilverPlan, versions_view: str) -> str:
    columns = [quote(c) for c in plan.history_columns]
    return render(
        "history_merge",
        history=table_ref(history_path(root, plan.spec.name)),
        versions=quote(versions_view),
        key_match=_key_match(plan, "t", "s"),
        columns=", ".join(columns),
        values=", ".join(f"s.{c}" for c in columns),
    )


def _key_match(plan: SilverPlan, left: str, right: str) -> str:
    """Keys compare with `=`; with `<=>` only where a declared key may hold NULLs (a MERGE on
    `<=>` is about 20% slower)."""
    equals = "<=>" if any(s.key_nullable for s in plan.sources) else "="
    return " AND ".join(f"{left}.{quote(k)} {equals} {right}.{quote(k)}" for k in plan.key)


def merge_sql(root: str, plan: SilverPlan, changes_view: str, dropped: list[str] = ()) -> str:
    """`dropped`: silver columns the source no longer has; an update sets them NULL."""
    columns = [quote(c) for c in plan.columns]
    return render(
        "silver_merge",
        silver=table_ref(silver_path(root, plan.spec.name)),
        changes=quote(changes_view),
        key_match=_key_match(plan, "t", "s"),
        assignments=", ".join([*(f"t.{c} = s.{c}" for c in columns),
                               *(f"t.{quote(c)} = NULL" for c in dropped)]),
        columns=", ".join(columns),
        values=", ".join(f"s.{c}" for c in columns),
    )


def describe_sql(root: str, plan: SilverPlan) -> str:
    """The statements one silver batch runs, in order, as `cdc-sql plan` shows them."""
    name = plan.spec.name
    images, candidates = f"cdc_images_{name}", f"cdc_candidates_{name}"
    steps = []
    for i, source in enumerate(plan.sources):
        steps.append((f"{images}_{i}_s: snapshot rows of {source.qualified} (first batch only)",
                      snapshot_images_sql(root, source, f"{images}_{i}_splits")))
        steps.append((f"DDL and TRUNCATEs of {source.qualified} in the window (renamed columns, "
                      f"rows a TRUNCATE removes)",
                      render("window_ddl", bronze_binlog=table_ref(bronze.binlog_path(root)))))
        steps.append((f"{images}_{i}_b: binlog changes of {source.qualified}",
                      binlog_images_sql(root, source)))
    steps.append((f"{candidates}: the projection over {images} (the union of the above)",
                  candidates_sql(plan, images)))
    steps.append(("first batch only: the snapshot rows, written into silver as it is created",
                  snapshot_rows_sql(plan, candidates)))
    steps.append((f"cdc_rest_{name}: first batch only, what is left to MERGE (afterwards, all "
                  f"of {candidates})",
                  render("silver_snapshot_rest", candidates=quote(candidates))))
    steps.append((f"cdc_changes_{name}: the last candidate per key, written to "
                  f"{staging_path(root, name)}", changes_sql(plan, candidates)))
    steps.append(("the MERGE into silver", merge_sql(root, plan, f"cdc_changes_{name}")))
    if plan.spec.history:
        steps.append((f"cdc_versions_{name}: the history versions (history begins as a copy "
                      f"of silver once the first batch has reached past every split's read), "
                      f"written to "
                      f"{staging_path(root, name + '_history')}",
                      history_versions_sql(root, plan, candidates)))
        steps.append(("the MERGE into history", history_merge_sql(root, plan, f"cdc_versions_{name}")))
    return "\n".join(f"-- step {n}: {title}\n{sql.strip()}\n" for n, (title, sql)
                     in enumerate(steps, 1))
