"""The child rows foreign-key cascades changed in a window (InnoDB's, not in the binlog), as
images of the batch: read from bronze and silver on the engine, worked out by cascades.py."""
from __future__ import annotations

import logging
from dataclasses import replace

from cdc_sql import cascades
from cdc_sql.lake import semantics
from cdc_sql.lake.lake import Lake, read_version
from cdc_sql.lake.silver.execute import define_view, execute_step
from cdc_sql.lake.silver.facts import Statement, read_facts, read_statements
from cdc_sql.lake.silver.plan import SilverPlan
from cdc_sql.lake.silver.steps import StepKind, batch_steps
from cdc_sql.lake.tables import table_ref
from cdc_sql.source.offsets import Offset
from cdc_sql.source.schema import SourceTable, key_text_name
from cdc_sql.sql import quote, render
from cdc_sql.window import Window

log = logging.getLogger("cdc_sql")


def cascade_rows(lake: Lake, plan: SilverPlan, window: Window, statements: list[Statement] | None,
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


def _child_versions(lake: Lake, plan: SilverPlan, window: Window, statements: list[Statement] | None,
                    silver_version: int | None):
    """Every image of the child the window reads (snapshot rows, binlog changes) and, after the
    first batch, silver's rows as the window began, in the images' columns."""
    spark, name, source = lake.spark, plan.spec.name, plan.sources[0]
    facts = read_facts(lake, plan, window, statements)
    steps = [s for s in batch_steps(lake, plan, window, facts)
             if s.name.startswith(f"cdc_images_{name}_0_")]
    for n, step in enumerate(steps):
        if step.kind is StepKind.SPLITS:
            execute_step(lake, step)
        else:
            define_view(lake.engine, step, [s for s in steps[:n] if s.kind is StepKind.VIEW])
    parts = [spark.table(s.name) for s in steps if s.kind is StepKind.VIEW]
    silver = lake.silver_path(name)
    if not (window.first or window.replace) and lake.tables.exists(silver):
        view = f"cdc_silver_{name}_as_of"
        read_version(lake.engine, silver, silver_version).createOrReplaceTempView(view)
        present = set(spark.table(view).columns)  # that version's columns
        schema = parts[0].schema
        columns = ", ".join(quote(c) if c in present else
                            f"CAST(NULL AS {schema[c].dataType.simpleString()}) AS {quote(c)}"
                            for c in _row_columns(source, schema.names))
        parts.append(lake.engine.sql(render("cascade_silver_rows", columns=columns,
                                            silver=quote(view),
                                            live=semantics.live_where(present)),  # not soft-deleted ones
                                     {"source_table": source.qualified}))
    versions = parts[0]
    for part in parts[1:]:
        versions = versions.unionByName(part)
    return versions


def _reached(spark, plan: SilverPlan, versions, changes):
    """The versions of the child rows whose foreign key, in any version, holds a key the parent
    changes name (old or new): the rows a cascade may reach, with all their versions, in one
    query. Through a foreign key to the table itself, the rows below those too, level by
    level: a query a level, its keys brought here."""
    from pyspark.sql.types import StructType

    key = list(plan.key)
    table = plan.sources[0].qualified
    wanted = [{c.old for c in changes if c.parent == fk.parent} |
              {c.new for c in changes if c.parent == fk.parent and c.new is not None}
              for fk in plan.cascades]
    if any(wanted) and all(fk.parent != table for fk in plan.cascades):
        return versions.join(_holding(spark, plan, versions, wanted), key, "left_semi")
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
