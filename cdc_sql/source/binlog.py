"""The binlog reader: the captured tables' row changes, typed, transaction by transaction.

Events come from binlog_protocol.py (one replication connection, by position); table maps and
other event bodies are parsed by binlog_events.py, row images decoded into per-table builders by
rows.py (compiled where it was built, and then on worker threads: decoding.py). The reader
yields at every transaction boundary, and in the middle of a transaction once it has read
`part_rows` row changes or `part_bytes` of row images of it (or the reader holds twice those):
the caller lands what it holds (`take()`), so memory follows those, never a transaction's size
(nor its rows' width), and small transactions never land in parts (`lands_part`).

Offsets: a row change's offset is (binlog file sequence, end position of its rows event, row
index in the event); a DDL statement's, (file sequence, end position of its query event, 0).
`position` is the last transaction boundary read, where a new reader may start.

Changes that reach rows without row events (partition maintenance, DML written as a statement,
RENAME TABLE onto a captured name) are applied from the statement where it says exactly which
rows, or the table is asked to be read again (`bypassed`); a prepared XA transaction is held
until its XA COMMIT and lands there (docs/architecture.md, "Rows changed without row events").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa

from cdc_sql.errors import SourceError, is_transient
from cdc_sql.source import binlog_events as ev
from cdc_sql.source import failover, mysql, rowdecode_c
from cdc_sql.source.binlog_protocol import BinlogStream, GtidStart, StreamError
from cdc_sql.source.binlog_rows import CapturedStatement, RowEvents
from cdc_sql.source.binlog_statements import Bypass, DdlEvents, PartitionEvents
from cdc_sql.source.binlog_xa import Held, XaEvents
from cdc_sql.source.charsets import Charsets, ServerConverter
from cdc_sql.source.decoding import Decoding
from cdc_sql.source.gtid import GtidSet, GtidWatermarks, MariaGtidState
from cdc_sql.source.offsets import Offset, Position, file_sequence
from cdc_sql.source.rows import TableDecoder
from cdc_sql.source.schema import SourceTable

_UNSUPPORTED = {
    ev.MYSQL_TRANSACTION_PAYLOAD: "binlog_transaction_compression is on: turn it off on the "
                                  "source (SET GLOBAL binlog_transaction_compression = OFF)",
    ev.MYSQL_PARTIAL_UPDATE_ROWS: "binlog_row_value_options=PARTIAL_JSON writes partial JSON "
                                  "updates: set it to '' on the source",
    ev.MARIADB_START_ENCRYPTION: "the binlog is encrypted (encrypt_binlog=ON); cdc-sql cannot "
                                 "read encrypted binlogs",
}


@dataclass(frozen=True)
class _NoPolicy:
    """capture.Policy's defaults, for a reader used on its own."""

    def on_change(self, db: str, table: str) -> str:
        return "evolve"

    def cannot_follow(self, table) -> str:
        return ""

    def carried(self, db: str, table: str, column: str) -> bool:
        return True


_NO_POLICY = _NoPolicy()


def stream_settings(source) -> dict:
    """pymysql settings for a replication stream (no session setup statements)."""
    return {k: v for k, v in mysql.connection_settings(source).items() if k != "init_command"}



def lands_part(held: tuple[int, int], transaction_from: tuple[int, int],
               part: tuple[int, int]) -> bool:
    """Whether the reader, inside a transaction, lands what it holds as a part: once the
    transaction's own row changes or bytes of row images (those `held` now, less those held
    when it began) reach a part's, or all it holds twice a part's (memory stays bounded).
    Otherwise the batch closes at the end of the transaction that filled it (capture.py), a
    boundary state records: a part cut inside a small transaction that only happened to
    cross the batch's size carried no boundary, and state recorded none until the batch
    timer (binlog_batch_seconds) fired. Pure."""
    rows, nbytes = held
    return rows - transaction_from[0] >= part[0] or nbytes - transaction_from[1] >= part[1] \
        or rows >= 2 * part[0] or nbytes >= 2 * part[1]


class BinlogReader(RowEvents, DdlEvents, PartitionEvents, XaEvents):
    """Reads one pass of the binlog from `start` (a transaction boundary) up to `stop_at`.

    `skip`: per source table, the offset up to which bronze already holds its changes (a run
    that died between its bronze and state commits, or between the parts of a transaction):
    rows events at or before it are not decoded again. `drop`: per source table, a transaction
    boundary at or before which its changes are not wanted (a re-snapshot's start): they are
    not decoded at all, so rows of a definition bronze no longer holds cannot stop capture."""

    def __init__(self, source, tables: list[SourceTable], start: Position,
                 stop_at: Position | None, mariadb: bool, blocking: bool = False,
                 gtid_marks: GtidWatermarks | None = None, gtid_state: str = "",
                 matches=lambda db, table: False, skip: dict | None = None,
                 part_rows: int = 50_000, part_bytes: int = 64 * 2**20,
                 compiled: bool | None = None,
                 server: str = "", by_gtid: bool = False, base: int | None = None,
                 drop: dict[tuple[str, str], Offset] | None = None,
                 held: dict[str, dict] | None = None, schema_at: Position | None = None,
                 policy=None):
        self.source, self.mariadb, self.compiled = source, mariadb, compiled
        # Rows changed without row events, and DDL a table's `on_schema_change` cannot evolve
        # through: tables to read again (`bypassed`), unless that policy stops the run.
        # `policy` (capture.Policy) says, per table, that policy, why bronze cannot take its
        # rows as now defined, and whether silver holds a column as it is (a partition's rows
        # can then be removed from silver by the column's values). `schema_at`: the binlog end
        # read just after the tables' definitions.
        self.bypassed: list[Bypass] = []
        self.policy, self.schema_at = policy or _NO_POLICY, schema_at
        self._matches = matches  # does a pipeline table want db.table (a new shard, say)?
        self.schema_changed: list[str] = []  # tables a DDL changed: the pass ended after it
        self.tables = {(t.db, t.name): t for t in tables}
        self.start, self.stop_at = start, stop_at
        self.skip = skip or {}
        self.drop = drop or {}
        self.part_rows, self.part_bytes = part_rows, part_bytes
        self.position = start  # the last transaction boundary read
        self.event_position = start  # the end of the last event read
        self.source_time: str | None = None  # commit time of the transaction ending there
        self.gtid_marks = gtid_marks or GtidWatermarks({})
        self.gtid_state = gtid_state_of(gtid_state, mariadb)
        self.in_transaction = False
        self._file = start.file
        self._maps: dict[int, TableDecoder | None] = {}
        self._decoders: dict[bytes, TableDecoder] = {}
        self._decoding = Decoding(self._new_builder,
                                  parallel=compiled is not False and rowdecode_c.available())
        self._statements: list[CapturedStatement] = []
        self._gtids: list[str] = []
        self._gtid = ""
        self._ctl = None
        self._charsets: Charsets | None = None
        self._server_converter: ServerConverter | None = None
        self._txn_gtid: ev.Gtid | None = None  # the open transaction's, once it commits
        self._standalone = False  # the open transaction is one statement (no BEGIN/COMMIT)
        self._event_start = start  # where the event being read begins
        self._txn_start = start   # where the open transaction began
        self._txn_from = (0, 0)   # the rows and bytes held when it began (lands_part)
        # Prepared XA transactions (XID -> Held), the one being read (`_xa`), and the rows of
        # those committed since the last take(). A run resuming with some held reads again from
        # the first one's start; before `start` it only gathers their events (`_replay_until`).
        self.held = {xid: Held(Position.parse(h["start"]), h.get("gtid", ""))
                     for xid, h in (held or {}).items()}
        self._xa: Held | None = None
        self._xa_batches: dict[tuple[str, str], list[pa.RecordBatch]] = {}
        self._xa_rows = 0
        earliest = min((h.start for h in self.held.values()), key=lambda p: p.offset,
                       default=start)
        self._replay_until = start if earliest.offset < start.offset else None
        if self.held and by_gtid:
            raise SourceError(f"prepared XA transactions {', '.join(sorted(self.held))} are "
                              f"held at positions of the server capture read before; they "
                              f"cannot be followed to another server: {failover.RESNAPSHOT}")
        # By GTID (after a failover): the server finds the place and says where (MariaDB: an
        # artificial GTID_LIST event; MySQL: the PREVIOUS_GTIDS event of the file it starts
        # in); until then `position` stays `start`, the old server's last one.
        self.by_gtid = by_gtid
        self.base = start.base if base is None else base
        self._anchored = not by_gtid
        self._gtid_start = str(self.gtid_state)
        stream_start = GtidStart(self._gtid_start, mariadb) if by_gtid else \
            earliest if self._replay_until else start
        if self._replay_until:
            self._file, self._event_start = earliest.file, earliest
        try:
            self.stream = BinlogStream(stream_settings(source), source.server_id, stream_start,
                                       blocking, expect_server=server, mariadb=mariadb)
        except StreamError as exc:
            raise self._explain(exc) from None

    def close(self) -> None:
        self._decoding.close()
        self.stream.close()
        if self._ctl is not None:
            self._ctl.close()

    # -- reading ---------------------------------------------------------------------------------
    def read(self) -> Iterator[str]:
        """Yields "txn" after each transaction (the position moved), "part" inside one whose
        changes reached `part_rows` or `part_bytes`; returns at `stop_at`, at the end of a
        non-blocking read, or after a DDL on a captured table (`schema_changed`)."""
        try:
            for event in self.stream:
                if self._replay_until is not None:
                    if self._replaying(event):
                        continue
                    self._replay_until = None
                self._event_start = self.event_position
                if event.log_pos and self._anchored:
                    self.event_position = Position(self._file, event.log_pos, self.base)
                kind = self._event(event)
                if kind == "ddl-stop":
                    yield "txn"
                    return
                if kind:
                    yield kind
                if not self.in_transaction and self.stop_at and \
                        self.position.offset >= self.stop_at.offset and \
                        not self.gtid_marks.pending:
                    return
            if not self.in_transaction:  # the end of a non-blocking read is a boundary
                self.position = max(self.position, self.event_position, key=lambda p: p.offset)
            self.gtid_marks.finish(self.position)
        except StreamError as exc:
            raise self._explain(exc) from None

    def _explain(self, exc: StreamError) -> SourceError:
        if self.by_gtid and exc.code == 1236:
            return SourceError(f"the source cannot send its binlog from GTID position "
                               f"{self._gtid_start}: {exc.message}. {failover.RESNAPSHOT}")
        return explain_stream_error(exc.code, exc.message, self.start)

    def _seq(self) -> int:
        """The current file's number in offsets."""
        return file_sequence(self._file) + self.base

    def _event(self, event) -> str | None:  # noqa: C901 - one branch per event kind
        t = event.type
        if t in ev.MARIADB_COMPRESSED_ROWS:  # log_bin_compress=ON: the plain event, unpacked
            event = self._uncompressed(event)
            t = event.type
        if t == ev.ROTATE:
            self._file = ev.parse_rotate(event.body)[0]
            if not self.in_transaction:
                self._maps.clear()  # table ids are not kept across files (a restart)
            return None
        if not self._anchored and event.log_pos and (
                t == ev.MARIADB_GTID_LIST and event.flags & ev.ARTIFICIAL or
                t == ev.MYSQL_PREVIOUS_GTIDS):  # a GTID start: the boundary the server found
            self.position = self.event_position = Position(self._file, event.log_pos, self.base)
            self._anchored = True
        elif t == ev.TABLE_MAP:
            self._table_map(event.body)
            if self._xa is not None:
                self._xa.events.append((t, bytes(event.body), event.timestamp))
        elif t in ev.ROWS_EVENTS:
            if self._xa is not None:  # prepared, maybe never committed: kept, not decoded
                if self._maps.get(ev.table_id(event.body)) is not None:
                    self._xa.events.append((t, bytes(event.body), event.timestamp))
                return None
            self._rows(event)
            if lands_part((self.pending_rows, self.pending_bytes), self._txn_from,
                          (self.part_rows, self.part_bytes)):
                return "part"
        elif t == ev.MARIADB_GTID:
            gtid = ev.parse_mariadb_gtid(event.body, event.server_id)
            self._begin(gtid.text, event)
            self._txn_gtid = gtid
            self._standalone = gtid.standalone
            if gtid.standalone:
                self.in_transaction = True  # the one statement that follows ends it
            if gtid.xa:  # XA START ... XA PREPARE: held until its XA COMMIT
                self._xa = Held(self._txn_start, gtid.text)
        elif t == ev.XA_PREPARE:
            return self._xa_prepare(event)
        elif t in (ev.MYSQL_GTID, ev.MYSQL_ANONYMOUS_GTID):
            gtid = ev.parse_mysql_gtid(event.body)
            if self.gtid_marks.pending and t == ev.MYSQL_GTID:
                self.gtid_marks.observe(gtid.text, self.position)
            self._begin(gtid.text if t == ev.MYSQL_GTID else "", event)
            if t == ev.MYSQL_GTID:
                self._txn_gtid = gtid
        elif t == ev.XID:
            return self._commit(event)
        elif t in (ev.QUERY, ev.MARIADB_COMPRESSED_QUERY, ev.EXECUTE_LOAD_QUERY):
            return self._query(event)
        elif t in _UNSUPPORTED:
            raise SourceError(f"cannot read the binlog at {self.event_position}: "
                              f"{_UNSUPPORTED[t]}")
        return None

class NoGtids:
    """The GTID position of MySQL capture that began without one (gtid_mode=OFF): nothing to
    track, nothing to resume from on another server."""

    def advanced(self, gtid) -> "NoGtids":
        return self

    def __str__(self) -> str:
        return ""


def gtid_state_of(text: str, mariadb: bool):
    """The GTID position capture goes on from: MariaDB's per-domain state, MySQL's executed
    set (only from a recorded one: a set begun mid-stream would lack the earlier GTIDs)."""
    if mariadb:
        return MariaGtidState.parse(text)
    return GtidSet.parse(text) if text else NoGtids()


def mysql_gtids_at(source, position: Position) -> str:
    """MySQL's executed GTID set at a transaction boundary of its binlog (MySQL has no
    BINLOG_GTID_POS), read from the file's start by framing only. Opens a replication stream
    with the pipeline's server_id: call it only while no capture stream of the run is open."""
    stream = BinlogStream(stream_settings(source), source.server_id, Position(position.file, 4),
                          mariadb=False)
    try:
        return str(gtids_before(stream, position))
    except StreamError as exc:
        raise explain_stream_error(exc.code, exc.message, position) from None
    finally:
        stream.close()


def gtids_before(events, position: Position) -> GtidSet:
    """The GTID set at `position`, from the events of its file read from the start: the file's
    PREVIOUS_GTIDS (every earlier file's) and each transaction whose GTID event ends at or
    before `position` (a transaction boundary, so that transaction ended before it too)."""
    found: dict[str, list[tuple[int, int]]] = {}
    for event in events:
        if event.type == ev.ROTATE and event.log_pos:  # the file ended: so did the search
            break
        if event.type == ev.MYSQL_PREVIOUS_GTIDS:
            for uuid, ranges in ev.parse_previous_gtids(event.body).items():
                found.setdefault(uuid, []).extend(ranges)
        elif event.type == ev.MYSQL_GTID:
            if event.log_pos > position.pos:
                break
            gtid = ev.parse_mysql_gtid(event.body)
            uuid = gtid.text.rpartition(":")[0]
            found.setdefault(uuid, []).append((gtid.seq, gtid.seq))
    return GtidSet.of(found)


def explain_stream_error(code, message: str, start) -> SourceError:
    if code == 1236:  # ER_MASTER_FATAL_ERROR_READING_BINLOG: purged, or bad position
        return SourceError(f"the source cannot send its binlog from {start}: {message}. If that "
                           f"binlog was purged, the changes since are lost to this pipeline: raise "
                           f"the binlog retention, and {failover.RESNAPSHOT}")
    if code in (1227, 1045):
        return SourceError(f"the source user lacks REPLICATION SLAVE / REPLICATION CLIENT grants: "
                           f"{message}")
    transient = is_transient(code, message)
    if code is None:
        return SourceError(message, transient)
    return SourceError(f"binlog read failed at {start}: {message}", transient)
