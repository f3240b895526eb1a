"""Binlog positions the source reports: the current end, and safe snapshot watermarks
(docs/architecture.md, "Watermarks").

On MariaDB (and Percona) `START TRANSACTION WITH CONSISTENT SNAPSHOT` pins a read view and
`binlog_snapshot_file/position` say exactly where in the binlog that view stands: every
transaction before it is visible, none after. That is an exact watermark.
On MySQL with gtid_mode=ON, `@@global.gtid_executed` read just before the snapshot starts holds
committed transactions only: a safe low watermark, which the binlog reader resolves to an offset
(source/gtid.py). Without GTIDs, the position read just before the snapshot starts is used,
which group commit can make unsafe, so `validate` warns about it.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import pymysql

from cdc_sql.errors import SourceError
from cdc_sql.source.offsets import Position

log = logging.getLogger(__name__)
_PARSE_ERROR = 1064


@dataclass(frozen=True)
class Watermark:
    position: Position   # the watermark; for a GTID watermark, where resolving it starts
    exact: bool          # False when group commit could hide a transaction before it
    gtid_set: str = ""   # MySQL's gtid_executed, when the watermark is a GTID set

    @property
    def resolved(self) -> bool:
        """False for a GTID watermark, whose binlog offset the reader finds later."""
        return not self.gtid_set


def binary_log_status(cur) -> tuple[Position, str]:
    """The binlog end: `SHOW BINARY LOG STATUS` (MySQL 8.4+), else `SHOW MASTER STATUS`."""
    try:
        cur.execute("SHOW BINARY LOG STATUS")
    except pymysql.err.ProgrammingError as exc:
        if exc.args[0] != _PARSE_ERROR:
            raise
        cur.execute("SHOW MASTER STATUS")
    row = cur.fetchone()
    if not row:
        raise SourceError("the source's binary log is off: start it with --log-bin "
                          "--binlog-format=ROW --binlog-row-image=FULL")
    gtid = row[4] if len(row) > 4 and row[4] else ""
    return Position(row[0], int(row[1])), gtid


def begin_snapshot(cur, mariadb: bool) -> Watermark:
    """Start a consistent-snapshot transaction on `cur` and return its watermark.

    Reads made on `cur` until COMMIT see exactly the transactions at or before the watermark
    (MariaDB), or at least those (MySQL fallback).
    """
    if mariadb:
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
        status = {name.lower(): value for name, value in cur.fetchall()}
        file, pos = status.get("binlog_snapshot_file"), status.get("binlog_snapshot_position")
        if file and pos:
            return Watermark(Position(file, int(pos)), exact=True)
        raise SourceError("the source did not report binlog_snapshot_file/position: "
                          "is the binary log on?")
    cur.execute("SELECT @@global.gtid_mode")
    gtid_mode = str(cur.fetchone()[0]).upper()
    position, _ = binary_log_status(cur)
    if gtid_mode == "ON":
        # Transactions flushed before `position` may commit after gtid_executed is read, so the
        # first transaction outside the set can lie before `position`: resolve from its file start.
        cur.execute("SELECT @@global.gtid_executed")
        executed = cur.fetchone()[0]
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        return Watermark(Position(position.file, 4), exact=True, gtid_set=executed)
    # No GTIDs: the end position read before the snapshot starts. Every transaction before it
    # was written to the binlog; group commit may not have made the last ones visible yet.
    cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
    return Watermark(position, exact=False)


def gtid_position(cur, position: Position) -> str:
    """MariaDB's GTID position at a binlog position (`domain-server-seq,...`), or ''."""
    cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (position.file, position.pos))
    row = cur.fetchone()
    return str(row[0] or "") if row else ""
