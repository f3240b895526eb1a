"""The hand-change check: cdc-sql merges only over silver and history tables it wrote last."""
from __future__ import annotations

from cdc_sql.config.model import Table
from cdc_sql.errors import StateError
from cdc_sql.lake.lake import Lake
from cdc_sql.lake.tables import EVOLVE_MARK, OWN_MERGE, RESNAPSHOT_MARK

# Commits that leave a table's rows as they were: compaction, vacuum, table properties and the
# columns Delta clusters by (e.g. deletion vectors or column mapping turned on, ALTER TABLE
# CLUSTER BY).
MAINTENANCE = ("OPTIMIZE", "VACUUM START", "VACUUM END", "SET TBLPROPERTIES",
               "UPGRADE PROTOCOL", "CLUSTER BY")
# Commits after our recorded version that need no one's attention: maintenance, and our own
# schema changes and MERGEs (a run that died before its state commit; replaying a window is
# harmless, however often it happened).
CONTENT_PRESERVING = (*MAINTENANCE, EVOLVE_MARK, OWN_MERGE, RESNAPSHOT_MARK)


def owned_tables(lake: Lake, spec: Table) -> dict[str, str]:
    """The Delta tables a pipeline table writes, by the state field recording our last version."""
    tables = {"silver_version": lake.silver_path(spec.name)}
    if spec.history:
        tables["history_version"] = lake.history_path(spec.name)
    return tables


def owned_versions(lake: Lake, spec: Table) -> dict[str, int | str | None]:
    """Our last version of each table, for state: what check_untouched compares against;
    with history, its table's id (a history table removed and started again is another)."""
    versions = {key: lake.tables.version(path) if lake.tables.exists(path) else None
                for key, path in owned_tables(lake, spec).items()}
    if versions.get("history_version") is not None:
        versions["history_id"] = lake.tables.table_id(lake.history_path(spec.name)) or ""
    return versions


def rows_untouched(lake: Lake, path: str, recorded: int | None, recorded_id: str) -> bool:
    """Whether a table's rows are those of the version state recorded with the window's
    start: the same table (`recorded_id`: its Delta id then), every commit since maintenance.
    False when either is not recorded, or the log says nothing (a run killed after a MERGE,
    before its state commit, left its rows there; a table removed and started again since
    has other commits under the same version numbers)."""
    if recorded is None or not recorded_id or not lake.tables.exists(path) or \
            lake.tables.table_id(path) != recorded_id:
        return False
    commits = lake.tables.history(path, recorded)
    return commits is not None and all(op in MAINTENANCE for _, op, _ in commits)


def check_untouched(lake: Lake, spec: Table, entry) -> None:
    """Refuse to merge over a silver (or history) table someone else changed since our last
    commit. Allowed after it: compaction and vacuum (content unchanged), cdc-sql's own marked
    schema changes, a RESTORE back to content we wrote, and our own MERGEs (runs that died
    between a MERGE and the state commit; replaying a window is harmless)."""
    for key, path in owned_tables(lake, spec).items():
        recorded = getattr(entry, key)
        if recorded is not None and lake.tables.exists(path):
            kind = "history" if key == "history_version" else "silver"
            _check_commits(lake, f"{kind} table {path.rsplit('/', 1)[-1]}", path, recorded)


def _check_commits(lake: Lake, label: str, path: str, recorded: int) -> None:
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
