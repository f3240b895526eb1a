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

Changes that reach rows without row events (partition maintenance, DML written as a statement,
RENAME TABLE onto a captured name) are applied from the statement where it says exactly which
rows, or the table is asked to be read again (`bypassed`); a prepared XA transaction is held
until its XA COMMIT and lands there (docs/architecture.md, "Rows changed without row events").
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import logging
from dataclasses import dataclass, field
from typing import Iterator

import pyarrow as pa
import pymysql

from cdc_sql.config.model import SHADOW_TABLE
from cdc_sql.errors import SourceError, is_transient
from cdc_sql.source import binlog_events as ev
from cdc_sql.source import ddl, failover, mysql, rowdecode_c, versioning
from cdc_sql.source.binlog_protocol import BinlogStream, GtidStart, StreamError
from cdc_sql.source.charsets import Charsets, ServerConverter
from cdc_sql.source.decoding import Decoding, EventError
from cdc_sql.source.gtid import GtidSet, GtidWatermarks, MariaGtidState
from cdc_sql.source.offsets import Offset, Position, file_sequence
from cdc_sql.source.rows import DecodeError, TableDecoder, table_decoder
from cdc_sql.source.schema import SourceTable, read_table

# A change that cannot be decoded stops the run before anything of its batch is written: no table
# moves past it, so no table's silver silently skips it.
DECODE_ADVICE = ("The run stops here and no table moves past this change; report it with the "
                 "table's SHOW CREATE TABLE, or remove the table from the pipeline to go on "
                 "without it")

STOPPED = ("Its pipeline table has on_schema_change: stop. To go on, re-snapshot it (cdc-sql "
           "resnapshot PIPELINE --tables <name>) or choose another on_schema_change")
log = logging.getLogger(__name__)
_UTC = dt.timezone.utc
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


@dataclass(frozen=True)
class Bypass:
    """Rows of a captured table changed without row events (partition maintenance, DML
    written as a statement, an XA transaction prepared before capture began): the table must
    be read again (or the run stop, by its policy). `offset`: where capture met it."""

    table: str
    reason: str
    offset: str


@dataclass
class Held:
    """A prepared XA transaction: where its events begin, and, once read, the table maps and
    rows events of captured tables in it (raw), landed at its XA COMMIT."""

    start: Position
    gtid: str = ""
    events: list[tuple[int, bytes, int]] = field(default_factory=list)  # (type, body, time)


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
        self._standalone = False  # the open transaction is one statement (no BEGIN/COMMIT)
        self._event_start = start  # where the event being read begins
        self._txn_start = start   # where the open transaction began
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

    @property
    def pending_rows(self) -> int:
        return self._decoding.rows + self._xa_rows

    @property
    def held_state(self) -> dict[str, dict]:
        """The prepared XA transactions held back, as state records them."""
        return {xid: {"start": str(h.start), "gtid": h.gtid} for xid, h in self.held.items()}

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
            if self.pending_rows >= self.part_rows:
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

    def _uncompressed(self, event):
        try:
            type_, body = ev.uncompressed_rows(event.type, event.body)
        except ev.EventError as exc:
            raise SourceError(f"cannot read the binlog at {self.event_position}: {exc}") \
                from None
        return dataclasses.replace(event, type=type_, body=memoryview(body))

    def _begin(self, gtid: str, event) -> None:
        self._gtid = gtid
        self.in_transaction = True
        self._txn_gtid = None
        self._standalone = False
        self._txn_start = self._event_start

    def _commit(self, event) -> str:
        self.in_transaction = False
        self._standalone = False
        self._xa = None
        self.position = self.event_position
        self.source_time = dt.datetime.fromtimestamp(event.timestamp, _UTC).isoformat()
        if self._txn_gtid is not None:
            self.gtid_state = self.gtid_state.advanced(self._txn_gtid)
            self._txn_gtid = None
        return "txn"

    def _query(self, event) -> str | None:  # noqa: C901 - one branch per statement kind
        query = ev.parse_query(event.body, event.type)
        statement = ddl.without_comments(query.statement)  # what it does, comments aside
        kind = "dml" if event.type == ev.EXECUTE_LOAD_QUERY else ddl.statement_kind(statement)
        if kind in ("begin", "savepoint", "xa_end", "xa_prepare"):
            self.in_transaction = True
            return None
        if kind == "xa_start":  # MySQL writes it as a statement (MariaDB: in the GTID event)
            self.in_transaction = True
            self._xa = Held(self._txn_start, self._gtid)
            return None
        if kind == "xa_commit":  # of a prepared one, or of this one (ONE PHASE)
            xid = ddl.xa_id(statement)
            self._xa_commit(self.held.pop(xid, None) or self._xa, xid, event)
            return self._commit(event)
        if kind == "xa_rollback":
            self.held.pop(ddl.xa_id(statement), None)
            return self._commit(event)
        if kind in ("commit", "rollback"):
            return self._commit(event)
        if kind == "dml":  # written as a statement: the rows it changed are not in the binlog
            self._statement_dml(query, statement)
            return self._commit(event) if self._standalone or not self.in_transaction else None
        moves = ddl.renames(statement, query.schema or "")
        if moves is not None:
            return self._renamed(moves, query, event)
        change = ddl.partition_change(statement, query.schema or "")
        if change is not None:
            return self._partition(change, query, event)
        return self._statement_ddl(query, event, self._captured_in(query.schema, statement))

    def _renamed(self, moves, query: ev.Query, event) -> str | None:
        """RENAME TABLE. A captured name that another table takes (renamed in, or the swap of
        an online schema-change tool: t TO _t_del, _t_gho TO t) holds rows capture never saw
        under it: read again. A captured table renamed to a name its pipeline table also
        matches (a pattern) is followed: its silver table is read again (its rows under the
        old name go), the new name is snapshotted. Renamed to a name the pipeline does not
        capture (nor a tool's shadow name): the run stops, saying what to do."""
        captured = {(db.lower(), t.lower()): (db, t) for db, t in self.tables}
        offset = Offset(self._seq(), self.event_position.pos, 0)
        touched, again, new = set(), [], set()
        for old, to in moves:
            if old in captured:
                table = captured[old]
                touched.add(table)
                dropped = self.drop.get(table)
                followed = self._matches(*to)
                if not followed and not SHADOW_TABLE.fullmatch(to[1]) and \
                        (dropped is None or offset > dropped) and \
                        self.policy.on_change(*table) != "stop":
                    raise SourceError(
                        f"{table[0]}.{table[1]} was renamed to {to[0]}.{to[1]} at binlog "
                        f"{self.event_position}: the pipeline does not capture that name, and "
                        f"silver keeps the rows it had. Name {to[0]}.{to[1]} in the pipeline (or "
                        f"rename the table back), then re-snapshot it: cdc-sql resnapshot "
                        f"PIPELINE --tables <name>")
                if followed:
                    again.append(table)
            if to in captured:
                touched.add(captured[to])
                again.append(captured[to])
            elif self._matches(*to):
                new.add(to)
        self._policies(query, touched)
        if again:
            self._bypass(sorted(set(again)), "RENAME TABLE gave the name another table's rows "
                                             "(or the table another name the pipeline "
                                             "captures)")
        return self._statement_ddl(query, event, touched | new)

    def _statement_ddl(self, query: ev.Query, event, touched: set[tuple[str, str]],
                       op: str = "", stop: bool = True, where: list | None = None,
                       row_of: tuple[str, str] | None = None) -> str | None:
        """A DDL statement (or another statement logged as a statement): a transaction of its
        own. Kept in bronze when it may concern a captured table (as `op`, for the table
        `row_of`, with `where`: _ddl); after one that touches a captured table the pass ends
        (`stop`), so the next one reads the new definitions."""
        self._policies(query, {t for t in touched if t in self.tables})
        landed = self.skip.get(("", ""))  # statements bronze already holds
        if touched and (landed is None or  # only the captured tables' statements are kept
                        (self._seq(), event.log_pos) > (landed.file_seq, landed.pos)):
            self._statements.append(self._ddl(query, event, {row_of} if row_of else touched,
                                              op, where))
        result = self._commit(event)
        if touched and stop:  # the next pass reads with the tables' new definitions
            self.schema_changed = sorted(f"{db}.{t}" for db, t in touched)
            return "ddl-stop"
        return result

    def _policies(self, query: ev.Query, tables: set[tuple[str, str]]) -> None:
        """A DDL that may change these captured tables, by their pipeline tables'
        `on_schema_change`: `stop` stops the run here; `resnapshot` reads the table again if
        its definition now is one silver cannot evolve to (another key, a type that is no
        widening); the others go on (the pass ends, and the next reads the definitions)."""
        offset = Offset(self._seq(), self.event_position.pos, 0)
        for db, table in sorted(tables):
            dropped = self.drop.get((db, table))
            if dropped is not None and offset <= dropped:
                continue  # a re-snapshot whose rows are read after this is under way
            policy = self.policy.on_change(db, table)
            if policy == "stop":
                verb = " ".join(query.statement.split(None, 2)[:2]).upper()
                raise SourceError(f"{db}.{table} at binlog {self.event_position}: a DDL statement "
                                  f"that may change it ({verb} ...). {STOPPED}")
            if policy == "resnapshot":
                why = self._incompatible(self.tables[db, table])
                if why:
                    self._bypass([(db, table)], f"a DDL statement: {why}, which silver cannot "
                                                f"evolve to (on_schema_change: resnapshot)")

    def _incompatible(self, table: SourceTable) -> str:
        """Why the table as now defined cannot be followed by evolving ("" if it can, or if
        the table is gone: the run then says so): its key changed, or bronze cannot take a
        column's new type."""
        try:
            with self._cursor() as cur:
                now = read_table(cur, table.db, table.name, table.key)
        except SourceError:
            return ""
        if tuple(now.key) != tuple(table.key):
            return f"its key changed from ({', '.join(table.key)}) to ({', '.join(now.key)})"
        return self.policy.cannot_follow(now)

    def _statement_dml(self, query: ev.Query, statement: str) -> None:
        """DML the source wrote as a statement (binlog_format STATEMENT or MIXED, LOAD DATA in
        statement form): its captured tables are read again (or the run stops)."""
        named = ddl.dml_targets(statement, query.schema or "")
        captured = {(db.lower(), t.lower()): (db, t) for db, t in self.tables}
        tables = [key for key in captured if named is None and key[0] == (query.schema or "")
                  .lower() or named is not None and key in named]
        verb = statement.split(None, 1)[0].upper() if statement else "DML"
        self._bypass([captured[key] for key in tables],
                     f"{verb} written as a statement (binlog_format STATEMENT or MIXED): its "
                     f"rows are not in the binlog")

    def _bypass(self, tables, reason: str) -> None:
        """Rows of these captured tables changed without row events."""
        offset = Offset(self._seq(), self.event_position.pos, 0)
        for db, table in tables:
            dropped = self.drop.get((db, table))
            if dropped is not None and offset <= dropped:
                continue  # a re-snapshot whose rows are read after this is under way
            where = f"{db}.{table} at binlog {self.event_position}"
            if self.policy.on_change(db, table) == "stop":
                raise SourceError(f"{where}: {reason}. {STOPPED}")
            log.warning("%s: %s; the table is read again (re-snapshot)", where, reason)
            self.bypassed.append(Bypass(f"{db}.{table}", reason, offset.text))

    def _partition(self, change: ddl.PartitionChange, query: ev.Query, event) -> str | None:
        """An ALTER TABLE on partitions. TRUNCATE, DROP and CONVERT PARTITION TO TABLE remove
        the partitions' rows without row events: silver removes them too where the partitions'
        ranges at that statement are known (op `delete`), else the table is read again;
        EXCHANGE swaps rows in unseen: read again. The others move rows between partitions
        and change no row: kept as DDL (the layout is read again)."""
        captured = {(db.lower(), t.lower()): (db, t) for db, t in self.tables}
        table = captured.get(change.table)
        other = captured.get(change.other) if change.other else None
        touched = {t for t in (table, other) if t is not None}
        new = {key for key in (change.table, change.other)
               if key and key not in captured and self._matches(*key)}
        if not change.changes_rows or not touched:
            return self._statement_ddl(query, event, touched | new)
        why = f"ALTER TABLE ... {change.action} PARTITION changes rows without row events"
        if change.action == "EXCHANGE":
            self._bypass(sorted(touched), why)
            return self._statement_ddl(query, event, set(), stop=False)
        if change.partitions == ("ALL",):
            return self._statement_ddl(query, event, {table}, op="truncate", stop=False)
        where = self._partition_rows(table, change.partitions)
        if where is None:
            self._bypass([table], why + ", and which rows the partitions held then cannot be "
                                        "told from here")
            return self._statement_ddl(query, event, {table} | new, op="ddl")
        log.info("binlog: %s.%s at %s: %s PARTITION %s, its rows removed from silver", *table,
                 self.event_position, change.action, ", ".join(change.partitions))
        # DROP and CONVERT change the layout: the pass ends, and the next reads it again
        return self._statement_ddl(query, event, {table} | new, "delete", where=where,
                                   stop=change.action != "TRUNCATE", row_of=table)

    def _partition_rows(self, table: tuple[str, str], names: tuple[str, ...]
                        ) -> list[list[tuple]] | None:
        """Conditions on the rows of these partitions, where the table's layout held by this
        reader is the one at this statement, and silver holds the column as it is."""
        source = self.tables[table]
        layout = source.partitioning
        if layout is None or layout.column is None or \
                not self.policy.carried(*table, layout.column):
            return None
        where = layout.rows_of(names)
        if where is None or not self._layout_current(table):
            return None
        return where

    def _layout_current(self, table: tuple[str, str]) -> bool:
        """The layout held was read just before `schema_at`; it is the one at this statement
        if that came after it (capture ends its pass at any DDL of the table, so none lies in
        between), or if no DDL that could touch the table lies between this statement and
        `schema_at` (the server's own list of its binlog events says)."""
        here = self.event_position
        if self.schema_at is None:
            return False
        if here.offset > self.schema_at.offset:
            return True
        return not ddl_between(self._cursor, table, here, self.schema_at)

    def _table_map(self, body) -> None:
        self._maps[ev.table_id(body)] = self._decoder_of(body, self.event_position.offset)

    def _decoder_of(self, body, at: Offset) -> TableDecoder | None:
        """The decoder of a table map's rows; None for a table not captured, or whose changes
        up to a re-snapshot's start are not wanted (`drop`) and `at` is not past it."""
        key = bytes(body[6:])  # all but the table id
        decoder = self._decoders.get(key)
        if decoder is None:
            table_map = ev.parse_table_map(body, self.mariadb)
            source_table = self.tables.get((table_map.db, table_map.table))
            dropped = self.drop.get((table_map.db, table_map.table))
            if source_table is None or dropped is not None and at <= dropped:
                return None
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
        return decoder

    # -- XA: prepared transactions wait for their XA COMMIT --------------------------------------
    def _xa_prepare(self, event) -> str:
        """XA PREPARE ends the prepared part of an XA transaction: its rows are held (one
        phase: committed here)."""
        one_phase, xid = ev.parse_xa_prepare(event.body)
        held = self._xa or Held(self._txn_start, self._gtid)
        if one_phase:
            self._xa_commit(held, xid, event)
        else:
            self.held[xid] = held
            log.info("binlog: XA transaction %s prepared at %s: held back until it commits",
                     xid, held.start)
        return self._commit(event)

    def _xa_commit(self, held: Held | None, xid: str, event) -> None:
        """A prepared XA transaction's rows, landed at its XA COMMIT: all at the commit event's
        last byte (inside the committing transaction, so before the boundary after it), one
        row index per change in the order written. The commit is the transaction's place in
        commit order; a row it changed was locked from its change to the commit, so no other
        transaction changed it in between."""
        if held is None:
            self._bypass(sorted(self.tables), f"XA COMMIT of {xid}, prepared before capture "
                                              f"began: its rows were never read")
            return
        seq, pos = self._seq(), event.log_pos - 1
        if not self._gtids or self._gtids[-1] != self._gtid:
            self._gtids.append(self._gtid)
        maps, builders = {}, {}
        for order, (type_, body, _) in enumerate(held.events):
            view = memoryview(body)
            if type_ == ev.TABLE_MAP:
                maps[ev.table_id(view)] = self._decoder_of(view, Offset(seq, pos, 0))
                continue
            header = ev.parse_rows_header(view, type_)
            decoder = maps.get(header.table_id)
            skip = self.skip.get((decoder.db, decoder.table)) if decoder else None
            if decoder is None or skip is not None and (seq, pos) <= (skip.file_seq, skip.pos):
                continue
            if header.op != "c" and header.flags & ev.NO_FOREIGN_KEY_CHECKS:
                self._no_fk_checks(decoder, event, seq, pos)
            builder = builders.get(decoder) or builders.setdefault(
                decoder, self._new_builder(decoder))
            try:
                builder.add(view, header.start, header.op, 0, order, event.timestamp,
                            len(self._gtids) - 1)
            except DecodeError as exc:
                raise self._undecodable(decoder, self._file, pos, exc) from None
        finished = {(d.db, d.table): b.finish(self._gtids) for d, b in builders.items()
                    if b.rows}
        for key, batch in at_commit(finished, seq, pos, xid).items():
            self._xa_batches.setdefault(key, []).append(batch)
            self._xa_rows += batch.num_rows

    def _replaying(self, event) -> bool:
        """On a resume with prepared XA transactions held: events before the recorded
        position are read again only for those transactions' table maps and rows. False
        from the first event past it (read as usual from there)."""
        t = event.type
        if t == ev.ROTATE:
            self._file = ev.parse_rotate(event.body)[0]
            return True
        if not event.log_pos:
            return True
        end = Position(self._file, event.log_pos, self.base)
        if end.offset > self._replay_until.offset:
            return False
        start, self._event_start = self._event_start, end
        if t in ev.MARIADB_COMPRESSED_ROWS:
            event = self._uncompressed(event)
            t = event.type
        if t in (ev.MARIADB_GTID, ev.MYSQL_GTID, ev.MYSQL_ANONYMOUS_GTID):
            self._xa = next((h for h in self.held.values() if h.start == start), None)
        elif self._xa is not None and t == ev.TABLE_MAP:
            self._maps[ev.table_id(event.body)] = self._decoder_of(event.body, end.offset)
            self._xa.events.append((t, bytes(event.body), event.timestamp))
        elif self._xa is not None and t in ev.ROWS_EVENTS:
            if self._maps.get(ev.table_id(event.body)) is not None:
                self._xa.events.append((t, bytes(event.body), event.timestamp))
        elif t == ev.XA_PREPARE:
            self._xa = None
        return True

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
        return rowdecode_c.builder(decoder, self.compiled,
                                   self._converter() if needs_source else None)

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
        for key, batches in self._xa_batches.items():
            batch.tables.setdefault(key, []).extend(batches)
        self._xa_batches, self._xa_rows = {}, 0
        for key, batches in list(batch.tables.items()):
            table = self.tables[key]
            if table.row_end:  # system-versioned: current rows only
                batch.tables[key] = [b for b in (versioning.current_changes(b, table)
                                                 for b in batches) if b.num_rows]
                if not batch.tables[key]:
                    del batch.tables[key]
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

    def _ddl(self, query: ev.Query, event, touched: set[tuple[str, str]], op: str = "",
             where: list | None = None) -> dict:
        """A statement's row in bronze/_binlog: `truncate`, `delete` (a partition's rows, the
        statement with the conditions that say which: lake/silver/execute.py) or `ddl`; the statement
        `redacted` (a DEFAULT or COMMENT may hold what the source's owner would not copy into a
        lake; silver needs only its structure: renames, truncates)."""
        truncated = len(touched) == 1 and ddl.is_truncate(query.statement)
        db, table = next(iter(touched)) if len(touched) == 1 else (query.schema, "")
        text = ddl.redacted(query.statement)  # its literals and comments are the source's
        statement = text if where is None else json.dumps({"statement": text, "where": where})
        return {"offset": Offset(self._seq(), event.log_pos, 0).text, "db": db,
                "tbl": table, "op": op or ("truncate" if truncated else "ddl"),
                "statement": statement,
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


XA_MAX_CHANGES = 10**6 - 1  # row changes of one XA transaction: an offset's row index


def at_commit(batches: dict, seq: int, pos: int, xid: str) -> dict:
    """A committed XA transaction's change rows (decoded with offsets in the order written:
    event number, row) moved to its commit: (seq, pos, n), n counting its row changes across
    its tables in that order (the two halves of a key-changing update share theirs)."""
    written = sorted({o for b in batches.values() for o in b.column("_cdc_offset").to_pylist()})
    if len(written) > XA_MAX_CHANGES:
        raise SourceError(f"XA transaction {xid} committed at binlog file {seq}, position {pos} "
                          f"holds {len(written)} row changes; cdc-sql places at most "
                          f"{XA_MAX_CHANGES:,} at one commit (the row index of an offset): "
                          f"re-snapshot its tables")
    number = {offset: Offset(seq, pos, n).text for n, offset in enumerate(written)}
    out = {}
    for key, batch in batches.items():
        at = batch.schema.get_field_index("_cdc_offset")
        offsets = pa.array([number[o] for o in batch.column(at).to_pylist()], pa.string())
        out[key] = batch.set_column(at, "_cdc_offset", offsets)
    return out


def ddl_between(cursor, table: tuple[str, str], after: Position, upto: Position) -> bool:
    """Whether the source's binlog holds, after `after` and before `upto`, a DDL statement that
    may concern `table` (one that names it, or one that cannot be read, in its database), by
    the server's own list of its events (SHOW BINLOG EVENTS; no row is decoded). Any error
    counts as yes: the caller then reads the table again."""
    db, name = table[0].lower(), table[1].lower()
    try:
        with cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            files = [r[0] for r in cur.fetchall()
                     if file_sequence(after.file) <= file_sequence(r[0]) <=
                     file_sequence(upto.file)]
            for file in files:
                pos = after.pos if file == after.file else 4
                while True:
                    cur.execute("SHOW BINLOG EVENTS IN %s FROM %s LIMIT 1000", (file, pos))
                    rows = cur.fetchall()
                    for _, at, kind, _, _, info in rows:
                        if file == upto.file and at >= upto.pos:
                            return False
                        if kind in ("Query", "Query_compressed") and \
                                _may_concern(str(info or ""), db, name):
                            return True
                    if len(rows) < 1000:
                        break
                    pos = rows[-1][4]
    except (SourceError, pymysql.err.MySQLError):
        return True
    return False


def _may_concern(info: str, db: str, name: str) -> bool:
    """A SHOW BINLOG EVENTS query (`use `db`; statement`) is DDL that may change the table."""
    schema, statement = "", info
    if info.startswith("use `"):
        close = info.find("`; ")
        schema, statement = info[5:close].replace("``", "`"), info[close + 3:]
    statement = ddl.without_comments(statement)
    if ddl.statement_kind(statement) != "ddl":
        return False
    change = ddl.partition_change(statement, schema)
    named = {change.table, change.other} if change else ddl.touched_tables(statement, schema)
    return (schema.lower() == db) if named is None else (db, name) in named


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
