"""One capture pass: the binlog from where capture stands up to a stop position, into bronze.

Batches close between transactions (`binlog_batch_rows/bytes/seconds`); a transaction larger
than `binlog_batch_rows` or `binlog_batch_bytes` lands in parts, each as soon as its builders
hold that many changes or bytes of row images, so memory never follows a transaction's size.
Each batch or part is written the same way:

1. state first records the tables about to be written (`CaptureEntry.landing`), unless an
   earlier batch of the pass listed them already;
2. one bronze commit per source table touched (and one for DDL statements);
3. after a whole batch (never after a part), state records the new position, a transaction
   boundary, with the GTID position there and the split watermarks resolved on the way.
   The tables stay listed until the pass's last batch (`landing_after`): a pass whose
   batches write the same tables commits state once a batch, not twice.

Landing runs on a writer thread, one batch or part at a time and in the order read, while the
reader decodes the next one (decoding and Parquet encoding overlap); at most one batch waits,
so memory stays at two batches. The steps above keep their order: the writer does them all.
Silver never reads past the recorded position, so a part, or a batch whose state commit was
lost, stays invisible. A run that starts again reads from the recorded position and skips, per
table listed in `landing`, the rows events bronze already holds (bronze.landed_after): nothing
twice, nothing lost, whichever commit the previous run died after.
"""
from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from cdc_sql import faults
from cdc_sql.lake import bronze
from cdc_sql.lake.lake import Lake
from cdc_sql.lake.tables import commit_workers, each
from cdc_sql.lake.state import CaptureEntry, ResnapshotEntry, SplitEntry
from cdc_sql.source import mysql
from cdc_sql.source.binlog import BinlogReader
from cdc_sql.source.binlog_rows import Batch
from cdc_sql.source.binlog_statements import Bypass, ddl_between
from cdc_sql.source.gtid import GtidSet, GtidWatermarks
from cdc_sql.source.offsets import Offset, Position

log = logging.getLogger("cdc_sql")
# Per server, point where a run read the tables' definitions, and captured tables: the lowest
# position from which the binlog up to that point holds no DDL of them (Capture.may_end).
_CLEAR_AHEAD: dict[tuple, Offset] = {}


@dataclass
class Pass:
    """What one capture pass did."""

    changes: int = 0
    changed_tables: set[str] = field(default_factory=set)
    schema_changed: list[str] = field(default_factory=list)
    started_at: str | None = None        # the offset it started from
    resnapshots: list[str] = field(default_factory=list)  # source tables it asked to read again
    commits: list[tuple[int, float]] = field(default_factory=list)  # each: rows, seconds
    more: bool = False  # it ended at its bound, before the position it was to reach
    mergeable: bool = True  # False: stopped before a DDL its definitions are from after


class Bound(NamedTuple):
    """Where a capture pass ends before the position it is to reach, at a transaction's end:
    past `bytes` of row images (engine.window_bytes: the engine's memory follows a window's
    size), or once `tables` source tables have changed (many small tables: their merges, in
    worker processes, overlap the next pass's capture); 0: no bound."""

    bytes: int = 0
    tables: int = 0


UNBOUNDED = Bound()


@dataclass(frozen=True)
class Policy:
    """What capture needs to know of the pipeline when a table's definition or rows change
    under it (source/binlog.py): each table's `on_schema_change`, whether silver holds a column
    as the source has it, and which source tables a re-snapshot of some must read with them."""

    on_change: object = lambda db, table: "evolve"
    cannot_follow: object = lambda table: ""  # why bronze cannot take a table now ("": it can)
    carried: object = lambda db, table, column: True
    widen: object = lambda tables: tables


class Capture:
    def __init__(self, lake: Lake, state, source, tables, mariadb: bool, matches, stop=None,
                 server: str = "", policy: Policy = Policy(), schema_at: Position | None = None,
                 bound: Bound = UNBOUNDED):
        self.lake, self.state, self.source = lake, state, source
        self.bound = bound  # where a pass ends before `stop_at`
        self.tables = {(t.db, t.name): t for t in tables}
        self.mariadb, self.matches, self.stop = mariadb, matches, stop
        self.server = server  # the identity of the server read (source/failover.py)
        self.policy, self.schema_at = policy, schema_at
        self._writer: ThreadPoolExecutor | None = None  # lands batches, one at a time, in order
        self._landed = None  # the future of the batch being written
        self._may_end: bool | None = None  # whether this pass may end at its bound

    @property
    def landing(self) -> set:
        """The tables the last state commit lists as landing: where a run that starts again
        looks for rows past its position."""
        return {tuple(t) for t in self.committed.landing}

    def run(self, checkpoint, start: Position, stop_at: Position, seen_at: str,
            gtid: str = "", by_gtid: bool = False, base: int = 0) -> Pass:
        """Capture from `start` (the recorded position, or the lowest watermark) to `stop_at`;
        `seen_at` is when the source was at `stop_at` (for lag). `by_gtid`: another server
        than the one `start` is a place on; read from the GTID position `gtid` there, its
        files numbered from `base` on."""
        saved = checkpoint.capture
        if by_gtid and saved and saved.landing:  # rows landed past `start` on the old server:
            bronze.drop_after(self.lake, sorted(map(tuple, saved.landing)), start.offset)
            saved = replace(saved, landing=[])  # read again here
            self.state.write(saved)
        self.committed = saved if saved and saved.position == str(start) else \
            CaptureEntry(position=str(start), gtid=gtid, server=self.server,
                         held=saved.held if saved else {},
                         landing=list(saved.landing) if saved else [])
        landing = self.landing
        skip = bronze.landed_after(self.lake, sorted(landing), start.offset) if landing else {}
        result = Pass(started_at=start.offset.text)
        # Rows an earlier run landed past `start` are this window's changes too: those tables
        # are not idle (a DDL statement there could be any table's).
        result.changed_tables.update(
            f"{db}.{name}" for db, name in (self.tables if bronze.STATEMENTS in landing
                                            else landing) if db)
        if start.offset >= stop_at.offset and not skip and not by_gtid:
            if not saved or saved.position != str(start) or landing or \
                    saved.server != self.server:
                self._commit(CaptureEntry(position=str(start), gtid=self.committed.gtid,
                                          source_time=seen_at, server=self.server,
                                          held=self.committed.held), [])
            return result
        pending = {s.name: s for s in checkpoint.all_splits() if s.done and not s.watermark}
        marks = GtidWatermarks({name: GtidSet.parse(s.watermark_gtid)
                                for name, s in pending.items()})
        batch_rows = self.source.binlog_batch_rows
        keys = {t.qualified: key for key, t in self.tables.items()}
        drop = {keys[e.source_table]: Offset.parse(e.start) for e in checkpoint.resnapshots()
                if e.prepared and e.source_table in keys}  # re-snapshots hold those
        reader = BinlogReader(self.source, list(self.tables.values()), start, stop_at,
                              self.mariadb, gtid_marks=marks, gtid_state=self.committed.gtid,
                              matches=self.matches, skip=skip, part_rows=batch_rows,
                              part_bytes=self.source.binlog_batch_bytes,
                              server=self.server, by_gtid=by_gtid, base=base, drop=drop,
                              held=self.committed.held, schema_at=self.schema_at,
                              policy=self.policy)
        last_flush, landed = time.monotonic(), 0  # bytes of row images landed by this pass
        ending = False  # the pass ends at its bound
        try:
            for kind in reader.read():
                if kind == "part":  # a large transaction: land what it has so far
                    landed += reader.pending_bytes
                    self._submit(reader.take(), None, result)
                    continue
                ending = ended(landed + reader.pending_bytes,
                               len(result.changed_tables) + reader.pending_tables,
                               self.bound) and self.may_end(reader.position)
                full = reader.pending_rows >= batch_rows or \
                    reader.pending_bytes >= self.source.binlog_batch_bytes or \
                    time.monotonic() - last_flush >= self.source.binlog_batch_seconds
                if full or ending:
                    landed += reader.pending_bytes
                    self.flush(reader, reader.source_time, pending, marks, result)
                    last_flush = time.monotonic()
                if self.stop is not None and self.stop.is_set() or ending:
                    break
            caught_up = reader.position.offset >= stop_at.offset
            result.more = not caught_up and ending
            result.mergeable = caught_up or self.stop is None or not self.stop.is_set() or \
                self.may_end(reader.position)
            self.flush(reader, seen_at if caught_up else reader.source_time, pending, marks,
                       result, last=True)
            self.wait()
        finally:
            if self._writer is not None:  # a batch being written ends as it would have
                self._writer.shutdown(wait=True)
                self._writer = None
            reader.close()
        result.schema_changed = reader.schema_changed
        log.info("binlog: %d changes captured, now at %s", result.changes, reader.position)
        if result.schema_changed:
            log.info("binlog: DDL on %s at %s; reading the tables' definitions again",
                     ", ".join(result.schema_changed), reader.position)
        return result

    def may_end(self, at: Position) -> bool:
        """Whether the pass may end at `at`, past its bound: not if a DDL that may
        change a captured table lies between `at` and where the tables' definitions were
        read (`schema_at`), by the server's list of its events (binlog_statements.ddl_between).
        The window up to `at` would be merged with the definitions from after that DDL, before
        capture meets it: a column renamed there would reach silver as a new column, and the
        values silver held under its old name would be lost. Such a pass goes on to the DDL,
        and ends after it as after any DDL; its window is larger than its bound. A pass
        stopped (the run asked to stop) before such a DDL is not merged (`Pass.mergeable`):
        the next run reads the definitions again and its first pass reaches the DDL. Asked
        once a pass."""
        if self._may_end is None:
            self._may_end = self.schema_at is None or at.offset >= self.schema_at.offset or \
                self._clear_ahead(at)
            if not self._may_end:
                log.info("binlog: a DDL of a captured table lies between %s and %s, where the "
                         "tables' definitions were read: the pass does not end before it (a "
                         "run asked to stop merges nothing)", at, self.schema_at)
        return self._may_end

    def _clear_ahead(self, at: Position) -> bool:
        """No DDL of a captured table between `at` and `schema_at`; a later pass of the run,
        which would ask about a part of the same stretch, is answered from the first answer
        (`_CLEAR_AHEAD`): the binlog up to `schema_at` does not change."""
        key = (self.server, str(self.schema_at), frozenset(self.tables))
        clear_from = _CLEAR_AHEAD.get(key)
        if clear_from is not None and at.offset >= clear_from:
            return True
        if ddl_between(lambda: mysql.cursor(self.source), self.tables, at, self.schema_at):
            return False
        _CLEAR_AHEAD[key] = at.offset
        return True

    def flush(self, reader: BinlogReader, source_time: str | None, pending: dict,
              marks: GtidWatermarks, result: Pass, last: bool = False) -> None:
        """Land a whole batch, then record its end in state with the watermarks resolved
        (`last`: the pass's last batch)."""
        resolved = [replace(pending[name], watermark=found.offset.text)
                    for name, found in marks.resolved.items()
                    if name in pending and not pending[name].watermark]
        for entry in resolved:
            pending[entry.name] = entry
        bypassed, reader.bypassed = reader.bypassed, []
        end = End(str(reader.position), source_time, str(reader.gtid_state),
                  reader.in_transaction, reader.by_gtid, resolved, reader.held_state, bypassed,
                  last)
        self._submit(reader.take(), end, result)

    def _submit(self, batch: Batch, end: End | None, result: Pass) -> None:
        """Hand a batch (or part) to the writer, once the one before it has landed."""
        self.wait()
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, "bronze")
        self._landed = self._writer.submit(self._write, batch, end, result)

    def wait(self) -> None:
        """Wait until the batch handed to the writer has landed; its error is raised here."""
        if self._landed is not None:
            landed, self._landed = self._landed, None
            landed.result()

    def _write(self, batch: Batch, end: End | None, result: Pass) -> None:
        """On the writer thread: land a batch in bronze, and for a whole batch (`end`) record
        where it ends in state."""
        self._land(batch, result)
        if end is None:
            return
        landing = landing_after(self.landing, end.in_transaction, end.last)
        if end.position == self.committed.position and landing == self.landing and \
                not end.resolved and self.committed.server == self.server and \
                not end.bypassed and end.held == self.committed.held:
            return
        if end.by_gtid and end.position == self.committed.position:
            return  # not a place on this server yet: nothing read here
        requests = self._requests(end.bypassed, result)
        self._commit(CaptureEntry(position=end.position, source_time=end.source_time,
                                  gtid=end.gtid, server=self.server,
                                  landing=sorted(map(list, landing)), held=end.held),
                     [*end.resolved, *requests])

    def _land(self, batch: Batch, result: Pass) -> None:
        """Write a batch's rows into bronze, after listing the tables it writes in state."""
        started = time.monotonic()
        touched = set(batch.touched) | ({bronze.STATEMENTS} if batch.statements else set())
        if not touched:
            return
        if not touched <= self.landing:  # the tables about to be written, before writing them
            self.committed = replace(self.committed,
                                     landing=sorted(map(list, self.landing | touched)))
            self.state.write(self.committed)
        workers = commit_workers(self.lake.local,
                                 [sum(b.nbytes for b in rows) for rows in batch.tables.values()])
        each(lambda item: bronze.append_changes(self.lake, self.tables[item[0]], item[1]),
             batch.tables.items(), workers)
        bronze.append_statements(self.lake, batch.statements)
        faults.point("bronze.appended")  # bronze has the batch, state not yet
        rows = batch.rows
        result.changes += rows
        result.changed_tables.update(f"{db}.{name}" for db, name in batch.tables)
        result.changed_tables.update(s.table for s in batch.statements)
        result.commits.append((rows, round(time.monotonic() - started, 3)))

    def _requests(self, bypassed: list[Bypass], result: Pass) -> list[ResnapshotEntry]:
        """Re-snapshot requests for tables whose rows changed without row events, recorded
        with the position past them: a run that dies before that commit meets them again."""
        if not bypassed:
            return []
        why = {b.table: f"{b.reason} (binlog offset {b.offset})" for b in bypassed}
        chosen = self.policy.widen(sorted(why))
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        result.resnapshots = sorted(set(result.resnapshots) | set(chosen))
        return [ResnapshotEntry(source_table=t, requested_at=now,
                                reason=why.get(t, f"read with {', '.join(sorted(why))}"))
                for t in chosen]

    def _commit(self, entry: CaptureEntry, resolved: list) -> None:
        self.state.write(entry, *resolved)
        self.committed = entry
        self.state.compact_if_due()  # a state commit a batch: a long pass compacts too


def landing_after(landing: set, in_transaction: bool, last: bool) -> set:
    """The tables state lists as `landing` with a batch's end: those listed so far while the
    pass goes on (its next batches write them without a commit first: a run that dies looks
    for rows past the recorded position in each, and finds none where there are none), or
    after its last batch none, unless it ended inside a transaction (the connection broke:
    its parts stay listed). Pure."""
    return set(landing) if in_transaction or not last else set()


def ended(landed: int, tables: int, bound: Bound) -> bool:
    """Whether a pass that landed `landed` bytes of row images in `tables` source tables ends
    at this transaction's end. Pure."""
    return 0 < bound.bytes <= landed or 0 < bound.tables <= tables


@dataclass(frozen=True)
class End:
    """Where a whole batch ends, as the reader stood after it: what state records."""

    position: str
    source_time: str | None
    gtid: str
    in_transaction: bool
    by_gtid: bool
    resolved: list[SplitEntry]
    held: dict = field(default_factory=dict)
    bypassed: list[Bypass] = field(default_factory=list)
    last: bool = False  # the pass's last batch
