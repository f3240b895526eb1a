"""`cdc-sql maintain`: prune bronze that silver no longer needs, compact and vacuum every table.

Pruned: bronze change rows of a source table at or before the lowest applied offset of the
silver tables it feeds (or whose foreign-key cascades it sets off), DDL statements at or
before the lowest applied offset of all, and snapshot rows of tables whose silver holds its
snapshot, in every case only rows older than
`target.retention_hours` (or --retention-hours). Nothing is pruned while any table is still
snapshotting. Then silver and history are clustered (cdc-sql's Z-order by `cluster_by` or the
key; a plain OPTIMIZE of a table Delta liquid-clusters: lake/spark_tables.py), bronze, silver,
staging and state compacted and vacuumed (files no version within the retention needs are
deleted), and the state log is rewritten to its latest entries.
Silver content never changes; a silver table changed outside cdc-sql is left alone and reported.
Run it between runs (the pipeline lock keeps it from overlapping one).
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import logging

from cdc_sql.config import layout
from cdc_sql.errors import StateError
from cdc_sql.lake.lake import Lake
from cdc_sql.lake.silver.ownership import check_untouched, owned_tables, owned_versions
from cdc_sql.lake.state import MaintainEntry, State, check_owner
from cdc_sql.lake.tables import LOG_TABLE
from cdc_sql.source.offsets import Offset

log = logging.getLogger("cdc_sql")


def due(last: MaintainEntry | None, every_hours: float, now: dt.datetime) -> bool:
    """Whether a run maintains the target now: `every_hours` (target.maintain_every_hours, 0:
    never) have passed since the last maintenance, or since a run first found none."""
    if every_hours <= 0 or last is None:
        return False
    try:
        at = dt.datetime.fromisoformat(last.at)
    except ValueError:  # not a time (written by hand): a maintenance writes one again
        return True
    at = at if at.tzinfo else at.replace(tzinfo=dt.timezone.utc)
    return now - at >= dt.timedelta(hours=every_hours)


def maintain(engine, pipeline, retention_hours: float | None = None,
             now: dt.datetime | None = None) -> dict:
    lake = Lake.open(engine, pipeline.root)
    retention = pipeline.target.retention_hours if retention_hours is None else retention_hours
    now = now or dt.datetime.now(dt.timezone.utc)
    cutoff = (now - dt.timedelta(hours=retention)).isoformat(sep=" ", timespec="microseconds")
    state = State(lake)
    checkpoint = state.load()
    check_owner(checkpoint, pipeline.name, lake.root)
    tables = {spec.name: checkpoint.table(spec.name) for spec in pipeline.tables}
    report: dict = {"retention_hours": retention, "pruned": {}, "files": {}, "skipped": []}
    sources = sorted({s.source_table for s in checkpoint.all_splits()} |
                     {name for t in tables.values() if t is not None for name in t.sources})

    if tables and all(t is not None and t.snapshot_merged for t in tables.values()):
        lowest = min(t.applied for t in tables.values())
        for source in sources:
            db, _, name = source.partition(".")
            feeding = [t.applied for spec, t in zip(pipeline.tables, tables.values())
                       if spec.matches(db, name) or source in t.cascade_parents]
            applied = min(feeding, default=lowest)
            # change rows every silver table reading them has applied, older than the cutoff
            report["pruned"][lake.changes_path(db, name)] = _delete(
                lake, lake.changes_path(db, name),
                [("_cdc_offset", "<=", _offset(applied)), ("_cdc_ts", "<", cutoff)])
            # snapshot rows: silver holds the snapshot
            report["pruned"][lake.snapshot_path(db, name)] = _delete(
                lake, lake.snapshot_path(db, name), [("_cdc_read_at", "<", cutoff)])
        report["pruned"][lake.statements_path] = _delete(
            lake, lake.statements_path,
            [("offset", "<=", _offset(lowest)), ("commit_ts", "<", cutoff)])
    else:
        report["skipped"].append("pruning: a table is still snapshotting")

    paths = [lake.statements_path, *(lake.changes_path(*s.split(".", 1)) for s in sources),
             *(lake.snapshot_path(*s.split(".", 1)) for s in sources), state.path]
    for path in paths:  # bronze and state of a target created before they kept a short log
        if lake.tables.exists(path) and _log_kept_long(lake, path):
            lake.tables.set_properties(path, LOG_TABLE)
    kept = []
    for spec in pipeline.tables:
        if not lake.tables.exists(lake.silver_path(spec.name)) or tables[spec.name] is None:
            continue
        try:
            check_untouched(lake, spec, tables[spec.name])
        except StateError as exc:
            report["skipped"].append(str(exc))
            continue
        paths += [*owned_tables(lake, spec).values(), lake.staging_path(spec.name),
                  lake.staging_path(f"{spec.name}_history")]
        kept.append(spec)
    state.compact()
    clustered = set()  # silver and history: one key range per file (see tables.cluster)
    for spec in kept:
        key = layout.cluster_columns(spec, tuple(tables[spec.name].key or ()))
        for path in owned_tables(lake, spec).values():
            if key and lake.tables.exists(path):
                lake.tables.cluster(path, key)
                clustered.add(path)
    for path in paths:
        if lake.tables.exists(path):
            report["files"][path] = lake.tables.compact_and_vacuum(
                path, retention, compact=path not in clustered)
    # Compaction commits new silver versions with the same rows: record them as ours.
    state.write(*(dataclasses.replace(tables[spec.name], **owned_versions(lake, spec))
                  for spec in kept), MaintainEntry(at=now.isoformat()))
    log.info("maintain: %s", report)
    return report


def _log_kept_long(lake: Lake, path: str) -> bool:
    """Whether a bronze or state table lacks tables.LOG_TABLE; False where the engine cannot
    say (Sail 0.7 has no DESCRIBE DETAIL: its tables are left as they are)."""
    try:
        return bool(LOG_TABLE.items() - lake.tables.properties(path).items())
    except Exception as exc:  # noqa: BLE001 - the engine's own error, of a statement it lacks
        log.debug("%s: table properties not read (%s)", path, exc)
        return False


def _offset(text: str) -> str:
    return Offset.parse(text).text  # an offset we wrote; checked before it is bound


def _delete(lake: Lake, path: str, where: list[tuple]) -> int:
    if not lake.tables.exists(path):
        return 0
    before = lake.engine.read(path).count()
    lake.tables.delete_rows(path, where)
    return before - lake.engine.read(path).count()
