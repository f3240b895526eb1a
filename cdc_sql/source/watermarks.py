"""Binlog positions the source reports: the current end, and safe snapshot watermarks (DESIGN 3).

On MariaDB (and Percona) `START TRANSACTION WITH CONSISTENT SNAPSHOT` pins a read view and
`binlog_snapshot_file/position` say exactly where in the binlog that view stands: every
transaction before it is visible, none after. That is an exact watermark.
On MySQL the status variables do not exist; the position read just before the snapshot starts is
used, which group commit can make unsafe, so `validate` warns about it (GTID watermarks: issue 3).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from cdc_sql.errors import SourceError
from cdc_sql.source.offsets import Position

log = logging.getLogger(__name__)
_PARSE_ERROR = 1064


@dataclass(frozen=True)
class Watermark:
    position: Position
    exact: bool          # False when group commit could hide a transaction before it
    gtid_set: str = ""   # MySQL's gtid_executed at the same moment, when GTIDs are on


def binary_log_status(cur) -> tuple[Position, str]:
    """The binlog end: `SHOW BINARY LOG STATUS` (MySQL 8.4+), else `SHOW MASTER STATUS`."""
    import pymysql

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
    # MySQL: the end position read before the snapshot starts. Every transaction before it was
    # written to the binlog; group commit may not have made the last ones visible yet.
    position, gtid = binary_log_status(cur)
    cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
    return Watermark(position, exact=False, gtid_set=gtid)
