"""`cdc-sql maintain`: prune bronze that silver no longer needs, compact and vacuum every table.

Pruned: bronze binlog rows at or before the lowest applied offset of all silver tables, and
snapshot rows of tables whose silver holds its snapshot, in both cases only rows older than
`target.retention_hours` (or --retention-hours). Nothing is pruned while any table is still
snapshotting. Then bronze, silver, staging and state are compacted and vacuumed (files no version
within the retention needs are deleted), and the state log is rewritten to its latest entries.
Silver content never changes; a silver table changed outside cdc-sql is left alone and reported.
Run it between runs (the pipeline lock keeps it from overlapping one).
"""
from __future__ import annotations

import datetime as dt
import logging

from cdc_sql.engine import table_ref
from cdc_sql.errors import StateError
from cdc_sql.lake import bronze
from cdc_sql.lake.silver import (check_untouched, owned_tables, owned_versions, silver_path,
                                 staging_path)
from cdc_sql.lake.state import State, check_owner
from cdc_sql.source.offsets import Offset
from cdc_sql.sql import render, string_literal

log = logging.getLogger("cdc_sql")


def maintain(engine, pipeline, retention_hours: float | None = None,
             now: dt.datetime | None = None) -> dict:
    root = str(pipeline.root)
    retention = pipeline.target.retention_hours if retention_hours is None else retention_hours
    cutoff = (now or dt.datetime.now(dt.timezone.utc)) - dt.timedelta(hours=retention)
    cutoff_micros = str(int(cutoff.timestamp() * 1_000_000))
    state = State(engine, root)
    checkpoint = state.load()
    check_owner(checkpoint, pipeline.name, root)
    tables = {spec.name: checkpoint.get("table", spec.name) or {} for spec in pipeline.tables}
    report: dict = {"retention_hours": retention, "pruned": {}, "files": {}, "skipped": []}

    if tables and all(t.get("snapshot_merged") for t in tables.values()):
        lowest = min(t["applied"] for t in tables.values())
        Offset.parse(lowest)  # an offset we wrote; checked before it goes into SQL
        report["pruned"][bronze.binlog_path(root)] = _delete(engine, bronze.binlog_path(root), render(
            "prune_binlog", bronze_binlog=table_ref(bronze.binlog_path(root)),
            applied=string_literal(lowest), cutoff_micros=cutoff_micros))
        for path in _snapshot_tables(root, checkpoint):
            report["pruned"][path] = _delete(engine, path, render(
                "prune_snapshot", bronze_snapshot=table_ref(path), cutoff_micros=cutoff_micros))
    else:
        report["skipped"].append("pruning: a table is still snapshotting")

    paths = [bronze.binlog_path(root), *_snapshot_tables(root, checkpoint), state.path]
    versions = []
    for spec in pipeline.tables:
        if not engine.exists(silver_path(root, spec.name)):
            continue
        try:
            check_untouched(engine, root, spec, tables[spec.name])
        except StateError as exc:
            report["skipped"].append(str(exc))
            continue
        paths += [*owned_tables(root, spec).values(), staging_path(root, spec.name),
                  staging_path(root, f"{spec.name}_history")]
        versions.append(spec)
    state.compact()
    clustered = set()  # silver and history: one key range per file (see Engine.cluster)
    for spec in versions:
        key = tables[spec.name].get("key")
        for path in owned_tables(root, spec).values():
            if key and engine.exists(path):
                engine.cluster(path, key)
                clustered.add(path)
    for path in paths:
        if engine.exists(path):
            report["files"][path] = engine.compact_and_vacuum(path, retention,
                                                              compact=path not in clustered)
    # Compaction commits new silver versions with the same rows: record them as ours.
    state.write(*(("table", spec.name, {**tables[spec.name], **owned_versions(engine, root, spec)})
                  for spec in versions if tables[spec.name]))
    log.info("maintain: %s", report)
    return report


def _delete(engine, path: str, sql: str) -> int:
    if not engine.exists(path):
        return 0
    before = engine.read(path).count()
    engine.spark.sql(sql).collect()
    return before - engine.read(path).count()


def _snapshot_tables(root: str, checkpoint) -> list[str]:
    """The bronze snapshot table of every source table with splits."""
    names = sorted({s["source_table"] for s in checkpoint.of_kind("split").values()})
    return [f"{root}/bronze/_snapshot/{name}" for name in names]
