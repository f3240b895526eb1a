"""The binlog reader: the captured tables' row changes, typed, transaction by transaction.

Events come from binlog_protocol.py (one replication connection, by position); table maps and
other event bodies are parsed by binlog_events.py, row images decoded into per-table builders by
rows.py (compiled where it was built, and then on worker threads: decoding.py). The reader
yields at every transaction boundary, and in the middle of a transaction once it holds
`part_rows` row changes: the caller lands what it holds (`take()`), so memory follows
`part_rows`, never a transaction's size.

Offsets: a row change's offset is (binlog file sequence, end position of its rows event, row
index in the event); a DDL statement's, (file sequence, end position of its query event, 0).
`position` is the last transaction boundary read, where a new reader may start.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import logging
from dataclasses import dataclass, field
from typing import Iterator

import pyarrow as pa
import pymysql

from cdc_sql.errors import SourceError, is_transient
from cdc_sql.source import binlog_events as ev
from cdc_sql.source import ddl, failover, mysql, rowdecode_c
from cdc_sql.source.binlog_protocol import BinlogStream, GtidStart, StreamError
from cdc_sql.source.charsets import Charsets, ServerConverter
from cdc_sql.source.decoding import Decoding, EventError
from cdc_sql.source.gtid import GtidSet, GtidWatermarks, MariaGtidState
from cdc_sql.source.offsets import Offset, Position, file_sequence
from cdc_sql.source.rows import DecodeError, TableDecoder, table_decoder
from cdc_sql.source.schema import SourceTable

# A change that cannot be decoded stops the run before anything of its batch is written: no table
# moves past it, so no table's silver silently skips it.
DECODE_ADVICE = ("The run stops here and no table moves past this change; report it with the "
                 "table's SHOW CREATE TABLE, or remove the table from the pipeline to go on "
                 "without it")

log = logging.getLogger(__name__)
_UTC = dt.timezone.utc
STATEMENTS_SCHEMA = pa.schema([
    ("offset", pa.string()), ("db", pa.string()), ("tbl", pa.string()), ("op", pa.string()),
    ("statement", pa.string()), ("commit_ts", pa.timestamp("us", tz="UTC")),
    ("gtid", pa.string()),
])
_UNSUPPORTED = {
    ev.MYSQL_TRANSACTION_PAYLOAD: "binlog_transaction_compression is on: turn it off on the "
                                  "source (SET GLOBAL binlog_transaction_compression = OFF)",
    ev.MYSQL_PARTIAL_UPDATE_ROWS: "binlog_row_value_options=PARTIAL_JSON writes partial JSON "
                                  "updates: set it to '' on the source",
    ev.MARIADB_START_ENCRYPTION: "the binlog is encrypted (encrypt_binlog=ON); cdc-sql cannot "
                                 "read encrypted binlogs",
}


@dataclass
class Batch:
    """What the builders held: Arrow batches per source table (db, table), DDL statements."""

    tables: dict[tuple[str, str], list[pa.RecordBatch]] = field(default_factory=dict)
    statements: list[dict] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(b.num_rows for batches in self.tables.values() for b in batches)

    @property
    def touched(self) -> list[tuple[str, str]]:
        return sorted(self.tables)


def stream_settings(source) -> dict:
    """pymysql settings for a replication stream (no session setup statements)."""
    return {k: v for k, v in mysql.connection_settings(source).items() if k != "init_command"}


class BinlogReader:
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
                 part_rows: int = 50_000, compiled: bool | None = None,
                 server: str = "", by_gtid: bool = False, base: int | None = None,
                 drop: dict[tuple[str, str], Offset] | None = None):
        self.source, self.mariadb, self.compiled = source, mariadb, compiled
        self._matches = matches  # does a pipeline table want db.table (a new shard, say)?
        self.schema_changed: list[str] = []  # tables a DDL changed: the pass ended after it
        self.tables = {(t.db, t.name): t for t in tables}
        self.start, self.stop_at = start, stop_at
        self.skip = skip or {}
        self.drop = drop or {}
        self.part_rows = part_rows
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
        self._statements: list[dict] = []
        self._gtids: list[str] = []
        self._gtid = ""
        self._ctl = None
        self._charsets: Charsets | None = None
        self._server_converter: ServerConverter | None = None
        self._txn_gtid: ev.Gtid | None = None  # the open transaction's, once it commits
        # By GTID (after a failover): the server finds the place and says where (MariaDB: an
        # artificial GTID_LIST event; MySQL: the PREVIOUS_GTIDS event of the file it starts
        # in); until then `position` stays `start`, the old server's last one.
        self.by_gtid = by_gtid
        self.base = start.base if base is None else base
        self._anchored = not by_gtid
        self._gtid_start = str(self.gtid_state)
        stream_start = GtidStart(self._gtid_start, mariadb) if by_gtid else start
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

    @property
    def pending_rows(self) -> int:
        return self._decoding.rows

    @property
    def pending_bytes(self) -> int:
        return self._decoding.nbytes

    # -- reading ---------------------------------------------------------------------------------
    def read(self) -> Iterator[str]:
        """Yields "txn" after each transaction (the position moved), "part" inside one whose
        changes reached `part_rows`; returns at `stop_at`, at the end of a non-blocking read, or
        after a DDL on a captured table (`schema_changed`)."""
        try:
            for event in self.stream:
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
        elif t in ev.ROWS_EVENTS:
            self._rows(event)
            if self.pending_rows >= self.part_rows:
                return "part"
        elif t == ev.MARIADB_GTID:
            gtid = ev.parse_mariadb_gtid(event.body, event.server_id)
            self._begin(gtid.text, event)
            self._txn_gtid = gtid
            if gtid.standalone:
                self.in_transaction = True  # the one statement that follows ends it
        elif t in (ev.MYSQL_GTID, ev.MYSQL_ANONYMOUS_GTID):
            gtid = ev.parse_mysql_gtid(event.body)
            if self.gtid_marks.pending and t == ev.MYSQL_GTID:
                self.gtid_marks.observe(gtid.text, self.position)
            self._begin(gtid.text if t == ev.MYSQL_GTID else "", event)
            if t == ev.MYSQL_GTID:
                self._txn_gtid = gtid
        elif t == ev.XID:
            return self._commit(event)
        elif t == ev.QUERY:
            return self._query(event)
        elif t in _UNSUPPORTED:
            raise SourceError(f"cannot read the binlog at {self.event_position}: "
                              f"{_UNSUPPORTED[t]}")
        elif t in ev.MARIADB_COMPRESSED_ROWS or t == ev.MARIADB_COMPRESSED_QUERY:
            raise SourceError(f"cannot read the binlog at {self.event_position}: it holds "
                              f"compressed events (log_bin_compress=ON); turn it off on the "
                              f"source")
        return None

    def _begin(self, gtid: str, event) -> None:
        self._gtid = gtid
        self.in_transaction = True
        self._txn_gtid = None

    def _commit(self, event) -> str:
        self.in_transaction = False
        self.position = self.event_position
        self.source_time = dt.datetime.fromtimestamp(event.timestamp, _UTC).isoformat()
        if self._txn_gtid is not None:
            self.gtid_state = self.gtid_state.advanced(self._txn_gtid)
            self._txn_gtid = None
        return "txn"

    def _query(self, event) -> str | None:
        query = ev.parse_query(event.body)
        statement = query.statement.strip()
        upper = statement[:10].upper()
        if upper.startswith("BEGIN") or upper.startswith("XA START") or \
                upper.startswith("XA END") or upper.startswith("SAVEPOINT"):
            self.in_transaction = True
            return None
        if upper.startswith("COMMIT") or upper.startswith("XA COMMIT") or \
                upper.startswith("XA PREPARE") or upper.startswith("ROLLBACK"):
            return self._commit(event)
        # DDL (or another statement logged as a statement): a transaction of its own
        touched = self._captured_in(query.schema, statement)
        landed = self.skip.get(("", ""))  # statements bronze already holds
        if touched and (landed is None or  # only the captured tables' statements are kept
                        (self._seq(), event.log_pos) > (landed.file_seq, landed.pos)):
            self._statements.append(self._ddl(query, event, touched))
        result = self._commit(event)
        if touched:  # the next pass reads with the tables' new definitions
            self.schema_changed = sorted(f"{db}.{t}" for db, t in touched)
            return "ddl-stop"
        return result

    def _table_map(self, body) -> None:
        key = bytes(body[6:])  # all but the table id
        tid = ev.table_id(body)
        decoder = self._decoders.get(key)
        if decoder is None:
            table_map = ev.parse_table_map(body, self.mariadb)
            source_table = self.tables.get((table_map.db, table_map.table))
            dropped = self.drop.get((table_map.db, table_map.table))
            if source_table is None or dropped is not None and \
                    self.event_position.offset <= dropped:
                self._maps[tid] = None
                return
            try:
                with self._cursor() as cur:
                    if self._charsets is None:
                        self._charsets = Charsets.read(cur)
                    decoder = table_decoder(table_map, source_table, self._charsets, cur,
                                            self._converter())
            except DecodeError as exc:
                raise SourceError(f"cannot decode {table_map.db}.{table_map.table} at "
                                  f"{self.event_position}: {exc}. {DECODE_ADVICE}") from None
            self._decoders[key] = decoder
        self._maps[tid] = decoder

    def _rows(self, event) -> None:
        header = ev.parse_rows_header(event.body, event.type)
        decoder = self._maps.get(header.table_id)
        if decoder is None:
            return
        seq, pos = self._seq(), event.log_pos
        skip = self.skip.get((decoder.db, decoder.table))
        if skip is not None and (seq, pos) <= (skip.file_seq, skip.pos):
            return  # already in bronze
        if header.op != "c" and header.flags & ev.NO_FOREIGN_KEY_CHECKS:
            self._no_fk_checks(decoder, event, seq, pos)
        if not self._gtids or self._gtids[-1] != self._gtid:
            self._gtids.append(self._gtid)
        try:
            self._decoding.add(decoder, event.body, header.start, header.op, seq, pos,
                               event.timestamp, len(self._gtids) - 1, self._file)
        except DecodeError as exc:
            raise self._undecodable(decoder, self._file, pos, exc) from None

    def _undecodable(self, decoder: TableDecoder, file: str, pos: int, exc) -> SourceError:
        return SourceError(f"cannot decode a row of {decoder.qualified} at binlog "
                           f"{Position(file, pos, self.base)}: {exc}. {DECODE_ADVICE}")

    def _no_fk_checks(self, decoder: TableDecoder, event, seq: int, pos: int) -> None:
        """Deletes or updates written with foreign_key_checks=0: InnoDB cascaded nothing, so
        silver must not either (cascades.py). Kept with the statements, by the event's offset."""
        landed = self.skip.get(("", ""))  # statements bronze already holds
        if landed is None or (seq, pos) > (landed.file_seq, landed.pos):
            self._statements.append({
                "offset": Offset(seq, pos, 0).text, "db": decoder.db, "tbl": decoder.table,
                "op": "no_fk_checks", "statement": "",
                "commit_ts": dt.datetime.fromtimestamp(event.timestamp, _UTC),
                "gtid": self._gtid})

    def _new_builder(self, decoder: TableDecoder):
        needs_source = any(c.text is not None and c.text.kind == "server"
                           for c in decoder.columns)
        return decoder.builder(self.compiled, self._converter() if needs_source else None)

    def take(self) -> Batch:
        """Everything decoded since the last take(), as Arrow batches; builders start empty."""
        batch = Batch(statements=self._statements)
        try:
            segments = self._decoding.take()
        except EventError as exc:
            raise self._undecodable(exc.decoder, exc.file, exc.pos, exc.error) from None
        for segment in segments:
            for decoder, builder in segment.builders.items():
                if builder.rows:
                    batch.tables.setdefault((decoder.db, decoder.table), []).append(
                        builder.finish(self._gtids))
        self._statements = []
        self._gtids = [self._gtid] if self.in_transaction else []
        return batch

    # -- DDL -----------------------------------------------------------------------------------
    def _captured_in(self, schema: str, statement: str) -> set[tuple[str, str]]:
        """The captured tables (db, table) a DDL statement may change."""
        named = ddl.touched_tables(statement, schema or "")
        if named is None:
            return {key for key in self.tables if key[0] == schema}
        captured = {(db.lower(), t.lower()): (db, t) for db, t in self.tables}
        new_matches = {key for key in named if self._matches(*key) and key not in captured}
        return {captured[key] for key in named if key in captured} | new_matches

    def _ddl(self, query: ev.Query, event, touched: set[tuple[str, str]]) -> dict:
        truncated = len(touched) == 1 and ddl.is_truncate(query.statement)
        db, table = next(iter(touched)) if len(touched) == 1 else (query.schema, "")
        return {"offset": Offset(self._seq(), event.log_pos, 0).text, "db": db,
                "tbl": table, "op": "truncate" if truncated else "ddl",
                "statement": query.statement,
                "commit_ts": dt.datetime.fromtimestamp(event.timestamp, _UTC),
                "gtid": self._gtid}

    # -- the source, for charsets --------------------------------------------------------------
    @contextlib.contextmanager
    def _cursor(self):
        """A cursor on a second connection to the source (charset tables, conversions)."""
        if self._ctl is None:
            self._ctl = mysql.connect(self.source)
        try:
            with self._ctl.cursor() as cur:
                yield cur
        except pymysql.err.MySQLError as exc:  # a lost connection is opened again next time
            with contextlib.suppress(pymysql.err.Error):
                self._ctl.close()
            self._ctl = None
            raise mysql.explain(exc, self.source) from None

    def _converter(self) -> ServerConverter:
        if self._server_converter is None:
            self._server_converter = ServerConverter(self._cursor)
        return self._server_converter


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
