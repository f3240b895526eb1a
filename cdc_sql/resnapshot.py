"""Re-snapshot: chosen source tables read again while the pipeline runs (docs/operations.md).

1. A request (a `ResnapshotEntry` without `start`) comes from `cdc-sql resnapshot`, or from a run
   that found the binlog capture needed purged (`source.on_purged_binlog: resnapshot`).
2. A run prepares it before its snapshot phase: the table's bronze is emptied, then one state
   commit plans its new splits (retiring old ids beyond them), sets `start` to the source's
   position, and marks the silver tables reading it (`TableEntry.resnapshot`). From then on
   capture drops the table's changes at or before `start`: the new splits, read after it,
   hold them. A run that dies before that commit prepares again; emptying twice is harmless.
3. The splits are read like a first snapshot's, each at its watermark (past `start`).
4. Once capture has passed every watermark, one window replaces silver, in one commit, by the
   first batch's rules; history gains the differences as versions first (planner.py,
   lake/silver/). Until then silver stays readable as it stood, and the table waits.

The decisions are pure functions of state and what the source says.
"""
from __future__ import annotations

from dataclasses import replace

from cdc_sql.lake.state import Checkpoint, Entry, ResnapshotEntry, SplitEntry
from cdc_sql.source.offsets import file_sequence
from cdc_sql.source.splits import Split
from cdc_sql.sql import quote


def closure(chosen: list[str], sources: dict[str, list[str]],
            parents: dict[str, list[str]] | None = None) -> tuple[list[str], list[str]]:
    """The silver tables and the source tables a re-snapshot of the `chosen` silver tables
    reads (`sources`: silver table -> its source tables): every source table of theirs, and
    every other silver table reading one of those (bronze is shared, and it is emptied), or
    applying the cascades of one (`parents`: silver table -> the source tables whose cascades
    it applies; their changes before the re-snapshot are gone with their bronze)."""
    tables, found = set(chosen), set()
    reads = {t: set(sources.get(t, [])) | set((parents or {}).get(t, []))
             for t in {*sources, *(parents or {})}}
    while True:
        found = {s for t in tables for s in sources.get(t, [])}
        more = {t for t, mine in reads.items() if mine & found} - tables
        if not more:
            return sorted(tables), sorted(found)
        tables |= more


def requests(source_tables: list[str], reason: str, at: str) -> list[ResnapshotEntry]:
    return [ResnapshotEntry(source_table=t, reason=reason, requested_at=at)
            for t in source_tables]


def prepared(checkpoint: Checkpoint, planned: dict[str, list[Split]], start: str,
             silver: list[str]) -> list[Entry]:
    """The state commit that prepares re-snapshots of the source tables in `planned` (their
    new splits), `start` the source's position: the new split entries (old ids beyond them
    retired), the requests with their start, and the silver tables reading them marked
    (`silver`; a table not merged yet needs no mark: its first batch reads the new splits)."""
    entries: list[Entry] = []
    for table, splits in planned.items():
        entries += [SplitEntry.planned(s) for s in splits]
        entries += [replace(old, status="retired") for old in checkpoint.splits(table)
                    if old.split_id >= len(splits)]
    for entry in checkpoint.resnapshots():
        if not entry.prepared:
            entries.append(replace(entry, start=start))
    for name in silver:
        table = checkpoint.table(name)
        if table is not None and table.snapshot_merged:
            entries.append(replace(table, resnapshot=min(table.resnapshot or start, start)))
    return entries


def purged(recorded_file: str, first_file: str) -> bool:
    """The server no longer has the binlog file capture stopped in."""
    return file_sequence(recorded_file) < file_sequence(first_file)


def needed_from(checkpoint: Checkpoint, sources: dict[str, list[str]],
                parents: dict[str, list[str]] | None = None) -> dict[str, str]:
    """Per source table, the offset after which a silver table reading it (or applying its
    cascades, `parents`) still needs its binlog changes: its applied offset; its re-snapshot's
    start while one is under way; before its first batch, its done splits' lowest watermark
    ("" where one is not resolved yet). Source tables no silver table needs changes of yet
    (splits still to read) are left out."""
    needs: dict[str, str] = {}

    def need(source: str, offset: str) -> None:
        needs[source] = min(needs.get(source, offset), offset)

    for silver, tables in sources.items():
        entry = checkpoint.table(silver)
        merged = entry is not None and entry.snapshot_merged
        marks = {t: [s.watermark or "" for s in checkpoint.splits(t) if s.done] for t in tables}
        for source in tables:
            if merged or marks[source]:
                need(source, (entry.resnapshot or entry.applied) if merged
                     else min(marks[source]))
        lowest = [m for found in marks.values() for m in found]
        for parent in (parents or {}).get(silver, []):
            if merged or lowest:  # cascades from the child's lowest watermark on
                need(parent, (entry.resnapshot or entry.applied) if merged else min(lowest))
    return needs


def affected_by_purge(checkpoint: Checkpoint, sources: dict[str, list[str]],
                      oldest: str, parents: dict[str, list[str]] | None = None) -> list[str]:
    """The source tables that need changes from before `oldest` (the offset of the oldest
    binlog the server still has), with every other source table of a silver table they feed
    (a silver table is replaced as a whole): they are read again; the others carry on from the
    binlog that is left. Tables a request is already pending for are left out."""
    asked = requested(checkpoint)
    lost = {t for t, need in needed_from(checkpoint, sources, parents).items() if need < oldest}
    hit = [name for name, mine in sources.items()
           if set(mine) & lost or set((parents or {}).get(name, [])) & lost]
    _, again = closure(hit, sources, parents)
    return [t for t in again if t not in asked]


def requested(checkpoint: Checkpoint) -> set[str]:
    """The source tables with a request no run has prepared yet."""
    return {e.source_table for e in checkpoint.resnapshots() if not e.prepared}


def pending(checkpoint: Checkpoint) -> bool:
    return bool(requested(checkpoint))


def ranges_pending(checkpoint: Checkpoint) -> bool:
    """A range re-read (`resnapshot --where`) is asked for and not read yet."""
    return any(s.predicate and not s.done for s in checkpoint.all_splits())


# -- range re-reads (`cdc-sql resnapshot --where`, `verify --repair`) ---------------------------
def range_refusal(checkpoint: Checkpoint, source: str, readers: list, columns: set[str]) -> str:
    """Why a range re-read of `source` (a db.table) over a predicate naming `columns` cannot
    be done now, or "". `readers`: the plans of every silver table reading it (all of them
    merge the read's rows: bronze is shared). Each must hold the source's key columns as they
    are, read no other source table and apply no cascades, so the predicate selects in silver
    exactly the keys it selects at the source; and one range re-read runs at a time."""
    for plan in readers:
        name = plan.spec.name
        if len(plan.sources) > 1 or plan.sharded:
            return f"{name} reads several source tables: re-snapshot it whole"
        if plan.cascades:
            return f"{name} applies foreign-key cascades: re-snapshot it whole"
        passed = {out for expr, out in plan.projection.columns if expr == quote(out)}
        for column in sorted(columns):
            if column not in plan.projection.key or column not in passed:
                return (f"{name} does not hold the key column `{column}` as it is (its "
                        f"projection renames or computes it): re-snapshot it whole")
        entry = checkpoint.table(name)
        if entry is None or not entry.snapshot_merged or entry.resnapshot:
            return f"{name} is not merged yet (a snapshot or re-snapshot is under way)"
    if source in requested(checkpoint):
        return f"a re-snapshot of {source} is asked for already"
    for split in checkpoint.splits(source):
        if split.predicate and (not split.done or _unmerged(checkpoint, split, readers)):
            return (f"a range re-read of {source} ({split.predicate}) is not merged yet: run "
                    f"the pipeline first")
    return ""


def _unmerged(checkpoint: Checkpoint, split: SplitEntry, readers: list) -> bool:
    entries = [checkpoint.table(plan.spec.name) for plan in readers]
    return any(e is not None and split.split_id > e.ranged and (split.watermark or "") >=
               e.applied for e in entries)


def range_request(checkpoint: Checkpoint, source: str, predicate: str) -> SplitEntry:
    """The split a range re-read is asked for with: planned, under a fresh id."""
    return SplitEntry.planned(Split(source, checkpoint.next_split_id(source), None, None,
                                    predicate))
