"""The binlog reader: row events of the captured tables, grouped into whole transactions.

Each change carries its offset (binlog file sequence, end position of its row event, row index),
its operation (c insert, u update, d delete) and full before/after images, normalized per column
(values.normalize) and written as text (values.encode). An UPDATE that changes the key becomes a
delete of the old key and an insert of the new one at the same offset.

python-mysql-replication is driven with plain file/position (`is_mariadb=False` works on MariaDB;
with True it ignores log_file/log_pos), and its reconnect loop is bounded by our connect wrapper.
"""
from __future__ import annotations

import datetime as dt
import logging
import time
from dataclasses import dataclass, field
from typing import Iterator

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (GtidEvent, MariadbGtidEvent, QueryEvent, RotateEvent,
                                      XidEvent)
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from cdc_sql.errors import SourceError
from cdc_sql.source import mysql
from cdc_sql.source.gtid import GtidSet, GtidWatermarks
from cdc_sql.source.offsets import Offset, Position, file_sequence
from cdc_sql.source.schema import SourceTable
from cdc_sql.source.values import text_encoder

log = logging.getLogger(__name__)
_ROW_EVENTS = (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)
_UTC = dt.timezone.utc


@dataclass
class Transaction:
    changes: list[dict] = field(default_factory=list)
    end: Position | None = None     # where the next transaction starts: a safe resume point
    gtid: str = ""
    size: int = 0                   # bytes of row images, for batch bounds


def _bounded_connect(attempts: int, backoff: float):
    """A pymysql.connect that gives up after `attempts` tries (the library retries forever)."""
    state = {"failures": 0}

    def connect(**settings):
        while True:
            try:
                conn = pymysql.connect(**settings)
                state["failures"] = 0
                return conn
            except pymysql.err.OperationalError as exc:
                state["failures"] += 1
                if state["failures"] >= attempts:
                    raise SourceError(f"lost the binlog connection and could not reconnect after "
                                      f"{attempts} attempts: {exc.args[-1]}") from None
                time.sleep(backoff * 2 ** (state["failures"] - 1))

    return connect


def stream_settings(source) -> dict:
    """pymysql settings for a replication stream (no session setup statements)."""
    return {k: v for k, v in mysql.connection_settings(source).items() if k != "init_command"}


class BinlogReader:
    def __init__(self, source, tables: list[SourceTable], start: Position,
                 stop_at: Position | None, blocking: bool = False, connect_attempts: int = 5,
                 gtid_marks: GtidWatermarks | None = None):
        self.source = source
        self.tables = {(t.db, t.name): t for t in tables}
        self.encoders = {(t.db, t.name): tuple((c.name, text_encoder(c)) for c in t.columns)
                         for t in tables}
        self.schemas = {t.db for t in tables}
        self.start, self.stop_at, self.blocking = start, stop_at, blocking
        self.stream = BinLogStreamReader(
            connection_settings=stream_settings(source),
            server_id=source.server_id,
            log_file=start.file, log_pos=start.pos, resume_stream=True,
            blocking=blocking,
            only_events=[*_ROW_EVENTS, QueryEvent, XidEvent, RotateEvent, GtidEvent,
                         MariadbGtidEvent],
            only_schemas=sorted({t.db for t in tables}) or None,
            pymysql_wrapper=_bounded_connect(connect_attempts, 0.5),
            slave_heartbeat=5 if blocking else None,
            report_slave="cdc-sql",  # lists us in SHOW SLAVE HOSTS, so server_id clashes show
        )
        self.position = start  # the last transaction boundary read
        self.gtid_marks = gtid_marks or GtidWatermarks({})

    def close(self) -> None:
        self.stream.close()

    def transactions(self) -> Iterator[Transaction]:
        """Whole transactions of captured tables; empty ones too, so the position moves."""
        current = Transaction()
        try:
            previous_end = self.start
            for event in self.stream:
                if isinstance(event, RotateEvent):
                    previous_end = Position(self.stream.log_file, self.stream.log_pos)
                    continue
                file = self.stream.log_file
                end = Position(file, event.packet.log_pos)
                if isinstance(event, (GtidEvent, MariadbGtidEvent)):
                    current = Transaction(gtid=str(getattr(event, "gtid", "")))
                    if isinstance(event, GtidEvent) and self.gtid_marks.pending:
                        self.gtid_marks.observe(current.gtid, previous_end)
                elif isinstance(event, _ROW_EVENTS):
                    self._add_rows(current, event, file)
                elif isinstance(event, XidEvent) or (
                        isinstance(event, QueryEvent) and _query(event) == "COMMIT"):
                    current.end = end
                    yield self._finish(current, end)
                    current = Transaction()
                elif isinstance(event, QueryEvent) and _query(event) != "BEGIN":
                    if _text(event.schema) in self.schemas:  # DDL commits by itself
                        current.changes.append(self._ddl(event, file))
                    yield self._finish(current, end)
                    current = Transaction()
                previous_end = end
                if self.stop_at and self.position.offset >= self.stop_at.offset and \
                        not current.changes and not self.gtid_marks.pending:
                    return
            if not current.changes and self.stream.log_file:
                # The end of the binlog (non-blocking read) is a transaction boundary.
                self.position = max(self.position, Position(self.stream.log_file,
                                                            self.stream.log_pos),
                                    key=lambda p: p.offset)
            self.gtid_marks.finish(self.position)
        except pymysql.err.MySQLError as exc:
            raise _explain_stream_error(exc, self.start) from None

    def _finish(self, txn: Transaction, end: Position) -> Transaction:
        txn.end = end
        self.position = end
        return txn

    def _add_rows(self, txn: Transaction, event, file: str) -> None:
        table = self.tables.get((event.schema, event.table))
        if table is None:
            return
        encoders = self.encoders[(event.schema, event.table)]
        commit_ts = dt.datetime.fromtimestamp(event.timestamp, _UTC)
        seq, pos = file_sequence(file), event.packet.log_pos
        for index, row in enumerate(event.rows):
            offset = Offset(seq, pos, index).text

            def add(op: str, before, after) -> None:
                txn.changes.append(_change(table, encoders, offset, op, before, after,
                                           commit_ts, txn))

            if isinstance(event, WriteRowsEvent):
                add("c", None, row["values"])
            elif isinstance(event, DeleteRowsEvent):
                add("d", row["values"], None)
            else:
                before, after = row["before_values"], row["after_values"]
                if any(before[k] != after[k] for k in table.key):  # key change: delete + insert
                    add("d", before, None)
                    add("c", None, after)
                else:
                    add("u", before, after)

    def _ddl(self, event: QueryEvent, file: str) -> dict:
        return {"offset": Offset(file_sequence(file), event.packet.log_pos, 0).text,
                "db": _text(event.schema), "tbl": "", "op": "ddl", "before": None, "after": None,
                "commit_ts": dt.datetime.fromtimestamp(event.timestamp, _UTC), "gtid": "",
                "statement": _text(event.query)}


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


def _query(event: QueryEvent) -> str:
    return _text(event.query).strip().upper()


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else (value or "")


def _explain_stream_error(exc: Exception, start: Position) -> SourceError:
    code = exc.args[0] if exc.args else None
    message = str(exc.args[-1]) if exc.args else str(exc)
    if code == 1236:  # ER_MASTER_FATAL_ERROR_READING_BINLOG: purged, or bad position
        return SourceError(f"the source cannot send its binlog from {start}: {message}. If that "
                           f"binlog was purged, the changes since are lost to this pipeline: raise "
                           f"the binlog retention, then re-snapshot by removing the pipeline's "
                           f"target.path and running again")
    if code in (1227, 1045):
        return SourceError(f"the source user lacks REPLICATION SLAVE / REPLICATION CLIENT grants: "
                           f"{message}")
    return SourceError(f"binlog read failed at {start}: {message}")
