"""Which window of changes each silver table merges next: a pure function of the checkpoint.

A window (P, U] takes the bronze changes after the applied offset P up to U, a transaction
boundary capture has committed, and, with the first batch (or a table that began to match
later, a new shard), the rows of the snapshot splits being merged. The rules
(docs/architecture.md, "Why silver is exactly-once"):

- the first batch waits until every split of the table is done with a known watermark and
  capture has reached the highest one, so silver is transaction-consistent from its first
  commit; with history it waits past every split's read (history starts there);
- later batches take (P, capture position]; splits that appeared since (a new shard) join the
  batch that passes all their watermarks, and until then the table waits;
- a table being re-snapshotted (`cdc-sql resnapshot`, a purged binlog) waits, its silver as
  it stood, until every new split is done and capture has passed their watermarks; then one
  window replaces silver: the new splits' rows and the changes after the re-snapshot's start,
  by the first batch's rules (the old silver plays no part);
- a range re-read (`cdc-sql resnapshot --where`, `verify --repair`) is a split holding the
  rows matching a predicate: the table waits until it is done and capture has passed its
  watermark W (never before W: it is read after the request, P <= W), then merges it like a
  new shard's split, and silver's rows matching the predicate that it did not return are
  removed at W; `TableEntry.ranged` says it is merged (W may equal P when nothing changed);
- a table none of whose source tables changed in a window this run captured whole moves P
  without a MERGE (idle);
- `snapshot-only` pipelines take the first batch up to the highest watermark and stop there.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Iterable

from cdc_sql.lake.state import CaptureEntry, SplitEntry, TableEntry
from cdc_sql.source.offsets import Offset, Position
from cdc_sql.window import SplitRef, Splits, Window


def done_splits(splits: list[SplitEntry]) -> Splits:
    """Split entries as a window carries them: per source table, in split order."""
    found: dict[str, list[SplitRef]] = {}
    for s in sorted(splits, key=lambda s: (s.source_table, s.split_id)):
        found.setdefault(s.source_table, []).append(SplitRef(s.split_id, s.attempt, s.watermark))
    return {table: tuple(entries) for table, entries in found.items()}


def next_window(entry: TableEntry | None, splits: list[SplitEntry],
                capture: CaptureEntry | None, *, snapshot_only: bool = False,
                history: bool = False, idle: bool = False) -> Window | None:
    """The window a table merges next, or None when it must wait.

    `splits`: every split of the table's source tables; `idle`: this run captured the whole of
    (P, capture position] and none of it touched the table."""
    if entry is None or not entry.snapshot_merged:
        return _first_window(splits, capture, snapshot_only, history)
    if entry.resnapshot:
        window = _first_window(splits, capture, snapshot_only, history=False)
        return window and replace(window, after=entry.resnapshot, first=False, replace=True)
    applied = entry.applied
    ranges = [s for s in splits if s.predicate and s.split_id > entry.ranged and
              (not s.watermark or s.watermark >= applied)]
    if capture is None or capture.offset < applied or capture.offset == applied and not ranges:
        return None
    upto = capture.offset
    fresh = [s for s in splits if not s.predicate and (not s.watermark or s.watermark > applied)]
    if fresh or ranges:
        if not all(s.ready for s in fresh + ranges) or \
                upto < max(s.watermark for s in fresh + ranges):
            return None
        ranges = [replace(s, watermark=just_after(s.watermark)) for s in ranges]
        return Window(applied, upto, done_splits(fresh + ranges),
                      ranges=tuple((s.source_table, s.predicate, s.watermark, s.read_at)
                                   for s in ranges),
                      ranged=max([entry.ranged, *(s.split_id for s in ranges)]))
    return Window(applied, upto, idle=idle)


def just_after(watermark: str) -> str:
    """Where a range re-read's rows stand: just after its watermark W (row 1 of W's place,
    which no binlog change has: row events end before a transaction's boundary). They must
    win over silver's rows at W itself (a first snapshot's rows at the same watermark, when
    nothing changed since), which the MERGE's guard keeps against an equal offset, and lose
    to every change after W."""
    at = Offset.parse(watermark)
    return replace(at, row=at.row + 1).text


def _first_window(splits: list[SplitEntry], capture: CaptureEntry | None, snapshot_only: bool,
                  history: bool) -> Window | None:
    splits = [s for s in splits if not s.predicate]  # range re-reads join later windows only
    if not splits or not all(s.ready for s in splits):
        return None  # snapshot unfinished, or a GTID watermark not yet resolved
    highest = max(s.watermark for s in splits)
    history_start = None
    if history:  # history starts where every split's read had ended
        highest = history_start = max(highest, *(s.read_end or "" for s in splits))
    if snapshot_only:
        upto = highest
    elif capture is None or capture.offset < highest:
        return None  # capture has not reached every split's watermark yet
    else:
        upto = capture.offset
    return Window("", upto, done_splits(splits), first=True, history_start=history_start)


def chain_merge(members: list[tuple[str, tuple[str, ...], Window | None, str | None]]) -> str:
    """How a group of tables whose cascades set off cascades (cascades.chains) merges this pass:
    `wait` (one of them waits for its snapshot: all do; or none has a window), `together`
    (parents first, each passing its moves on), or `apart` (a table's window starts before one
    of its parents' cascade moves are known: it cannot get them). `members`: per table, its
    source, the sources it gets cascades from, its window, and, without a window, its applied
    offset when it is caught up (None when it waits for something)."""
    if all(window is None for _, _, window, _ in members) or \
            any(window is None and applied is None for _, _, window, applied in members):
        return "wait"
    start = {source: window.after if window else applied
             for source, _, window, applied in members}
    windows = [(parents, window) for _, parents, window, _ in members if window is not None]
    if len({window.upto for _, window in windows}) > 1 or \
            any(start.get(parent, "") > window.after for parents, window in windows
                for parent in parents):
        return "apart"
    return "together"


def caught_up(entry: TableEntry | None, capture: CaptureEntry | None) -> str | None:
    """The applied offset of a table with nothing to merge; None when it waits for something
    (a snapshot, a re-snapshot)."""
    caught = entry is not None and entry.snapshot_merged and not entry.resnapshot and \
        capture is not None and entry.applied >= capture.offset
    return entry.applied if caught else None


def idle(captured_from: str | None, applied: str, reads: Iterable[str],
         changed: set[str], tables_exist: bool) -> bool:
    """True when this run captured all of (applied, now] (`captured_from`: where its capture
    began) and none of it touched the table (`reads`: the source tables it reads and those
    whose cascades it applies; `changed`: the tables capture wrote past `applied`, as far as
    its passes tell: merge_phase.Seen.changed_since): its applied offset then
    moves on without a MERGE. Never while its silver or history table is missing."""
    return captured_from is not None and captured_from <= applied and \
        not any(t in changed for t in reads) and tables_exist


def lowest_watermark(splits: Iterable[SplitEntry]) -> Position | None:
    """Where capture starts the first time: the lowest watermark of the done splits."""
    marks = [Position.parse(s.watermark_position) for s in splits if s.done]
    return min(marks, key=lambda p: p.offset) if marks else None
