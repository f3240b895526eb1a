"""Silver: the live source rows after projection, kept by one primary-key MERGE per batch.

A batch for one silver table covers the binlog window (P, U]: P the applied offset in state, U a
transaction boundary the capture has reached. The first batch also brings every snapshot split's
rows, placed at their watermarks; it waits until all splits of the table are done and capture
has passed the highest watermark, so silver is transaction-consistent from its first commit.
State records P := U only after the MERGE commits; a rerun of the same window is harmless.
"""
from __future__ import annotations

from dataclasses import dataclass

from cdc_sql.config.model import Table
from cdc_sql.config.projection import Projection, resolve_projection
from cdc_sql.engine import table_ref
from cdc_sql.errors import ConfigError, SourceError, StateError
from cdc_sql.lake import bronze
from cdc_sql.source.schema import SourceTable
from cdc_sql.source.values import decode_sql
from cdc_sql.sql import quote, render, string_literal

ENGINE_COLUMNS = ("_cdc_offset", "_cdc_op", "_cdc_ts")


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
        return self.projection.key + (("_cdc_source_table",) if self.sharded else ())

    @property
    def columns(self) -> tuple[str, ...]:
        extra = ("_cdc_source_table",) if self.sharded else ()
        return tuple(name for _, name in self.projection.columns) + ENGINE_COLUMNS + extra


def plan_silver(spec: Table, sources: list[SourceTable], file: str, index: int) -> SilverPlan:
    if not sources:
        raise SourceError(f"{file}: tables[{index}] (`{spec.name}`): no source table matches "
                          f"`{spec.source}`")
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


def staging_path(root: str, name: str) -> str:
    return f"{root}/_staging/{name}"


CONTENT_PRESERVING = ("OPTIMIZE", "VACUUM START", "VACUUM END")  # commits that keep every row


def check_untouched(engine, root: str, name: str, table_state: dict) -> None:
    """Refuse to merge over a silver table someone else changed since our last commit.
    Allowed after it: compaction and vacuum (content unchanged), a RESTORE back to content we
    wrote, and one final MERGE (ours, when a run died between its MERGE and the state commit;
    replaying the window is harmless)."""
    recorded = table_state.get("silver_version")
    path = silver_path(root, name)
    if recorded is None or not engine.exists(path):
        return
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
    if not foreign or foreign == [commits[-1][:2]] and foreign[0][1] == "MERGE":
        return
    shown = ", ".join(f"version {v}: {op}" for v, op in foreign)
    raise StateError(
        f"silver table {name} ({path}) was changed outside cdc-sql after its version "
        f"{recorded}, which cdc-sql wrote last ({shown}). cdc-sql does not merge over changes "
        f"it did not make. Undo them (Spark: RESTORE TABLE delta.`{path}` TO VERSION AS OF "
        f"{recorded}; delta-rs: DeltaTable(path).restore({recorded})), or start the pipeline "
        f"over by removing {root}")


def merge_batch(engine, root: str, plan: SilverPlan, after: str, upto: str,
                done_splits: dict[str, list[tuple[int, str, str]]] | None) -> None:
    """MERGE the window (after, upto] (and, on the first batch, the done splits) into silver."""
    spark = engine.spark
    view = f"cdc_images_{plan.spec.name}"
    parts = []
    for i, source in enumerate(plan.sources):
        if done_splits is not None:
            splits_view = f"{view}_{i}_splits"
            spark.createDataFrame(done_splits.get(source.qualified, []),
                                  "split_id INT, attempt STRING, watermark STRING") \
                .createOrReplaceTempView(splits_view)
            spark.sql(snapshot_images_sql(root, source, splits_view)) \
                .createOrReplaceTempView(f"{view}_{i}_s")
            parts.append(f"{view}_{i}_s")
        spark.sql(binlog_images_sql(root, source),
                  args={"db": source.db, "tbl": source.name, "after": after, "upto": upto}) \
            .createOrReplaceTempView(f"{view}_{i}_b")
        parts.append(f"{view}_{i}_b")
    spark.sql(" UNION ALL ".join(f"SELECT * FROM {quote(p)}" for p in parts)) \
        .createOrReplaceTempView(view)
    changes = f"cdc_changes_{plan.spec.name}"
    # The last change per key lands in a staging Delta table first: a MERGE whose source is a
    # query may evaluate it more than once (Sail 0.7 does: 4.3 s instead of 1.5 s for 200k
    # changes). A crash after staging just stages again.
    staging = staging_path(root, plan.spec.name)
    spark.sql(changes_sql(plan, view)).write.format("delta").mode("overwrite") \
        .option("overwriteSchema", "true").save(staging)
    engine.read(staging).createOrReplaceTempView(changes)
    path = silver_path(root, plan.spec.name)
    if not engine.exists(path):
        engine.append(spark.table(changes).drop("_cdc_remove").limit(0), path)
    spark.sql(merge_sql(root, plan, changes)).collect()


def snapshot_images_sql(root: str, source: SourceTable, splits_view: str) -> str:
    return render(
        "snapshot_images",
        columns=", ".join(f"b.{quote(c.name)}" for c in source.columns),
        source_table=string_literal(source.qualified),
        bronze_snapshot=table_ref(bronze.snapshot_path(root, source)),
        done_splits=quote(splits_view),
    )


def binlog_images_sql(root: str, source: SourceTable) -> str:
    return render(
        "binlog_images",
        columns=", ".join(
            f"{decode_sql(c, 'e.image[' + string_literal(c.name) + ']')} AS {quote(c.name)}"
            for c in source.columns),
        source_table=string_literal(source.qualified),
        bronze_binlog=table_ref(bronze.binlog_path(root)),
    )


def changes_sql(plan: SilverPlan, images_view: str) -> str:
    return render(
        "silver_changes",
        output=", ".join(quote(c) for c in (*plan.columns, "_cdc_remove")),
        projection=", ".join(f"{expr} AS {quote(name)}" for expr, name in plan.projection.columns),
        matches=plan.projection.where or "TRUE",
        key=", ".join(quote(k) for k in plan.key),
        images=quote(images_view),
    )


def merge_sql(root: str, plan: SilverPlan, changes_view: str) -> str:
    columns = [quote(c) for c in plan.columns]
    return render(
        "silver_merge",
        silver=table_ref(silver_path(root, plan.spec.name)),
        changes=quote(changes_view),
        key_match=" AND ".join(f"t.{quote(k)} <=> s.{quote(k)}" for k in plan.key),
        assignments=", ".join(f"t.{c} = s.{c}" for c in columns),
        columns=", ".join(columns),
        values=", ".join(f"s.{c}" for c in columns),
    )


def describe_sql(root: str, plan: SilverPlan) -> str:
    """The statements one silver batch runs, in order, as `cdc-sql plan` shows them."""
    view = f"cdc_images_{plan.spec.name}"
    steps = []
    for i, source in enumerate(plan.sources):
        steps.append((f"{view}_{i}_s: snapshot rows of {source.qualified} (first batch only)",
                      snapshot_images_sql(root, source, f"{view}_{i}_splits")))
        steps.append((f"{view}_{i}_b: binlog changes of {source.qualified}",
                      binlog_images_sql(root, source)))
    steps.append((f"cdc_changes_{plan.spec.name}: last change per key over {view} (the union "
                  f"of the above), written to {staging_path(root, plan.spec.name)}",
                  changes_sql(plan, view)))
    steps.append(("the MERGE", merge_sql(root, plan, f"cdc_changes_{plan.spec.name}")))
    return "\n".join(f"-- step {n}: {title}\n{sql.strip()}\n" for n, (title, sql)
                     in enumerate(steps, 1))
