"""The binlog reader: row events of the captured tables, grouped into whole transactions.

Each change carries its offset (binlog file sequence, end position of its row event, row index),
its operation (c insert, u update, d delete) and full before/after images, normalized per column
(values.normalize) and written as text (values.encode). An UPDATE that changes the key becomes a
delete of the old key and an insert of the new one at the same offset.

The events themselves come from binlog_stream.py: python-mysql-replication driven by plain
file/position (`is_mariadb=False` works on MariaDB; with True it ignores log_file/log_pos), its
reconnect loop bounded, parsing in a child process so it runs beside the work done here.
"""
from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field
from typing import Iterator

from pymysqlreplication.constants import NONE_SOURCE

from cdc_sql.errors import SourceError, is_transient
from cdc_sql.source import ddl, mysql
from cdc_sql.source.binlog_stream import StreamError, raw_events, raw_events_in_child
from cdc_sql.source.gtid import GtidWatermarks
from cdc_sql.source.offsets import Offset, Position, file_sequence
from cdc_sql.source.schema import SourceTable
from cdc_sql.source.values import encode, text_encoder

log = logging.getLogger(__name__)
_UTC = dt.timezone.utc


@dataclass
class Transaction:
    changes: list[dict] = field(default_factory=list)
    end: Position | None = None     # where the next transaction starts: a safe resume point
    gtid: str = ""
    size: int = 0                   # bytes of row images, for batch bounds


def stream_settings(source) -> dict:
    """pymysql settings for a replication stream (no session setup statements)."""
    return {k: v for k, v in mysql.connection_settings(source).items() if k != "init_command"}


class BinlogReader:
    def __init__(self, source, tables: list[SourceTable], start: Position,
                 stop_at: Position | None, blocking: bool = False, connect_attempts: int = 5,
                 gtid_marks: GtidWatermarks | None = None, parse_in_child: bool = True,
                 matches=lambda db, table: False):
        self.source = source
        self._matches = matches  # does a pipeline table want db.table (a new shard, say)?
        self.schema_changed: list[str] = []  # tables a DDL changed: the pass ended after it
        self.tables = {(t.db, t.name): t for t in tables}
        self.encoders = {(t.db, t.name): tuple((c.name, text_encoder(c)) for c in t.columns)
                         for t in tables}
        self.schemas = {t.db for t in tables}
        self.start, self.stop_at = start, stop_at
        read = raw_events_in_child if parse_in_child else raw_events
        self.events = read(stream_settings(source), source.server_id, start.file, start.pos,
                           sorted(self.schemas), blocking, connect_attempts)
        self.position = start  # the last transaction boundary read
        self.source_time: str | None = None  # commit time of the transaction ending there
        self.gtid_marks = gtid_marks or GtidWatermarks({})

    def close(self) -> None:
        self.events.close()

    def transactions(self) -> Iterator[Transaction]:
        """Whole transactions of captured tables; empty ones too, so the position moves."""
        current = Transaction()
        previous_end = self.start
        try:
            for kind, file, end_pos, ts, payload in self.events:
                end = Position(file, end_pos)
                if kind == "rotate":
                    previous_end = end
                    continue
                if kind == "end":
                    if not current.changes:  # the end of a non-blocking read is a boundary
                        self.position = max(self.position, end, key=lambda p: p.offset)
                    break
                if kind == "gtid":
                    gtid, mysql_gtid = payload
                    current = Transaction(gtid=gtid)
                    if mysql_gtid and self.gtid_marks.pending:
                        self.gtid_marks.observe(gtid, previous_end)
                elif kind == "rows":
                    self._add_rows(current, *payload, file, end_pos, ts)
                elif kind == "xid" or (kind == "query" and payload[1].strip().upper() == "COMMIT"):
                    yield self._finish(current, end, ts)
                    current = Transaction()
                elif kind == "query" and payload[1].strip().upper() != "BEGIN":
                    touched = self._captured_in(*payload)
                    if payload[0] in self.schemas or touched:  # DDL commits by itself
                        current.changes.append(self._ddl(payload, file, end_pos, ts, touched))
                    yield self._finish(current, end, ts)
                    current = Transaction()
                    if touched:  # the next pass reads with the tables' new definitions
                        self.schema_changed = sorted(f"{db}.{t}" for db, t in touched)
                        return
                previous_end = end
                if self.stop_at and self.position.offset >= self.stop_at.offset and \
                        not current.changes and not self.gtid_marks.pending:
                    return
            self.gtid_marks.finish(self.position)
        except StreamError as exc:
            raise _explain_stream_error(exc.code, exc.message, self.start) from None

    def _finish(self, txn: Transaction, end: Position, timestamp: int) -> Transaction:
        txn.end = end
        self.position = end
        self.source_time = dt.datetime.fromtimestamp(timestamp, _UTC).isoformat()
        return txn

    def _add_rows(self, txn: Transaction, op: str, schema: str, table_name: str, rows,
                  file: str, pos: int, timestamp: int) -> None:
        table = self.tables.get((schema, table_name))
        if table is None:
            return
        encoders = self.encoders[(schema, table_name)]
        first = rows[0] if rows else {}
        names = list((first["values"] if "values" in first else first.get("before_values", {})))
        if names != [name for name, _ in encoders]:
            # Written under another definition (a DDL this pass has not reached, or one made
            # while cdc-sql was stopped): images keep the event's own column names.
            encoders = _encoders_by_name(dict(encoders), names)
        commit_ts = dt.datetime.fromtimestamp(timestamp, _UTC)
        seq = file_sequence(file)
        def add(offset: str, op_: str, before, after) -> None:
            txn.changes.append(_change(table, encoders, offset, op_, before, after, commit_ts,
                                       txn))

        for index, row in enumerate(rows):
            offset = Offset(seq, pos, index).text
            if op == "c":
                add(offset, "c", None, _values(row, ""))
            elif op == "d":
                add(offset, "d", _values(row, ""), None)
            else:
                before, after = _values(row, "before_"), _values(row, "after_")
                if any(before[k] != after[k] for k in table.key):  # key change: delete + insert
                    add(offset, "d", before, None)
                    add(offset, "c", None, after)
                else:
                    add(offset, "u", before, after)

    def _captured_in(self, schema: str, statement: str) -> set[tuple[str, str]]:
        """The captured tables (db, table) a DDL statement may change."""
        named = ddl.touched_tables(statement, schema or "")
        if named is None:
            return {key for key in self.tables if key[0] == schema}
        captured = {(db.lower(), t.lower()): (db, t) for db, t in self.tables}
        new_matches = {key for key in named if self._matches(*key) and key not in captured}
        return {captured[key] for key in named if key in captured} | new_matches

    def _ddl(self, payload, file: str, pos: int, timestamp: int,
             touched: set[tuple[str, str]]) -> dict:
        schema, statement = payload
        truncated = len(touched) == 1 and ddl.is_truncate(statement)
        db, table = next(iter(touched)) if len(touched) == 1 else (schema, "")
        return {"offset": Offset(file_sequence(file), pos, 0).text, "db": db, "tbl": table,
                "op": "truncate" if truncated else "ddl", "before": None, "after": None,
                "commit_ts": dt.datetime.fromtimestamp(timestamp, _UTC), "gtid": "",
                "statement": statement}


def _encoders_by_name(known: dict, names: list[str]) -> tuple:
    """Encoders for an event's columns: the table's own where the name is known, else one that
    goes by the value's Python type."""
    return tuple((name, known.get(name) or _untyped_text) for name in names)


def _untyped_text(value) -> str | None:
    if isinstance(value, (set, frozenset)):
        return ",".join(sorted(value))
    return encode(None, value)


def _values(row: dict, image: str) -> dict:
    """A row image's values; an empty SET, which the library gives as None (telling it apart only
    in `none_sources`), becomes '' as in a SELECT."""
    values, nulls = row[f"{image}values"], row.get(f"{image}none_sources")
    if not nulls:  # the usual case: no NULL at all
        return values
    empty = [name for name, why in nulls.items() if why == NONE_SOURCE.EMPTY_SET]
    return {**values, **dict.fromkeys(empty, "")} if empty else values


def _change(table: SourceTable, encoders: tuple, offset: str, op: str, before, after,
            commit_ts, txn) -> dict:
    return {"offset": offset, "db": table.db, "tbl": table.name, "op": op,
            "before": _image(encoders, before, txn), "after": _image(encoders, after, txn),
            "commit_ts": commit_ts, "gtid": txn.gtid, "statement": None}


def _image(encoders: tuple, values: dict | None, txn: Transaction):
    if values is None:
        return None
    image = [(name, encode(values.get(name))) for name, encode in encoders]
    txn.size += sum(len(v) for _, v in image if v is not None)
    return image


def _explain_stream_error(code, message: str, start: Position) -> SourceError:
    if code == 1236:  # ER_MASTER_FATAL_ERROR_READING_BINLOG: purged, or bad position
        return SourceError(f"the source cannot send its binlog from {start}: {message}. If that "
                           f"binlog was purged, the changes since are lost to this pipeline: raise "
                           f"the binlog retention, then re-snapshot by removing the pipeline's "
                           f"target.path and running again")
    if code in (1227, 1045):
        return SourceError(f"the source user lacks REPLICATION SLAVE / REPLICATION CLIENT grants: "
                           f"{message}")
    transient = is_transient(code, message)
    if code is None:
        return SourceError(message, transient)
    return SourceError(f"binlog read failed at {start}: {message}", transient)
