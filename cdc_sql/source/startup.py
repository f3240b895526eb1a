"""Where binlog capture starts for the startup modes that skip the snapshot.

- latest: the binlog end when the pipeline first runs;
- earliest: the start of the oldest binlog file the server still has;
- offset: a `file:position` the user gives (checked against SHOW BINARY LOGS);
- timestamp: the first transaction committed at or after a UTC time, found by a binary search
  over the binlog files by the time of their first event (as Flink CDC and SeaTunnel do), then a
  scan forward from there;
- gtid: the first transaction after a GTID position (MariaDB) or set (MySQL): the server itself
  finds it when asked for its binlog from there (as after a failover), and says where it is.
"""
from __future__ import annotations

import datetime as dt
import re

from contextlib import contextmanager

from cdc_sql.errors import SourceError
from cdc_sql.source import binlog_events as ev
from cdc_sql.source import mysql
from cdc_sql.source.binlog import explain_stream_error, stream_settings
from cdc_sql.source.binlog_protocol import HEADER, BinlogStream, GtidStart, StreamError
from cdc_sql.source.gtid import GtidSet, MariaGtidState
from cdc_sql.source.offsets import Position


def binary_logs(source) -> list[tuple[str, int]]:
    with mysql.cursor(source) as cur:
        cur.execute("SHOW BINARY LOGS")
        return [(row[0], int(row[1])) for row in cur.fetchall()]


def offset_position(source, text: str) -> Position:
    try:
        position = Position.parse(text)
    except ValueError:
        raise SourceError(f"source.startup_offset `{text}` is not file:position "
                          f"(e.g. binlog.000003:1234)") from None
    sizes = dict(binary_logs(source))
    if position.file not in sizes:
        raise SourceError(f"source.startup_offset: binlog file {position.file} is not on the "
                          f"server (it has {', '.join(sizes) or 'none'}); it may have been purged")
    if not 4 <= position.pos <= sizes[position.file]:
        raise SourceError(f"source.startup_offset: position {position.pos} is outside "
                          f"{position.file} (4..{sizes[position.file]})")
    return position


def timestamp_position(source, when: dt.datetime) -> Position:
    files = binary_logs(source)
    if not files:
        raise SourceError("the source has no binary logs")
    target = when.timestamp()
    # The last file that starts strictly before `when`: binlog times have whole seconds, so a
    # file starting in the same second may follow transactions of that second in the one before.
    low, high = 0, len(files) - 1
    while low < high:
        middle = (low + high + 1) // 2
        if _first_event_time(source, files[middle][0]) < target:
            low = middle
        else:
            high = middle - 1
    for file, _ in files[low:]:
        found = _first_transaction_at(source, file, target)
        if found is not None:
            return found
    last_file, last_size = files[-1]
    return Position(last_file, last_size)  # nothing that late yet: start at the end


@contextmanager
def _events(source, file: str):
    """The events of one binlog file (and what follows it), as the server sends them."""
    start = Position(file, 4)
    try:
        stream = BinlogStream(stream_settings(source), source.server_id, start)
    except StreamError as exc:
        raise explain_stream_error(exc.code, exc.message, start) from None
    try:
        yield stream
    except StreamError as exc:
        raise explain_stream_error(exc.code, exc.message, start) from None
    finally:
        stream.close()


def _first_event_time(source, file: str) -> float:
    with _events(source, file) as stream:
        for event in stream:
            if event.timestamp and event.type not in (ev.ROTATE, ev.FORMAT_DESCRIPTION):
                return event.timestamp
    return float("inf")


def _first_transaction_at(source, file: str, target: float) -> Position | None:
    """The start of the first transaction in `file` committed at or after `target`."""
    previous_end = Position(file, 4)
    current = file
    with _events(source, file) as stream:
        for event in stream:
            if event.type == ev.ROTATE:
                current = ev.parse_rotate(event.body)[0]
                if current != file:
                    return None
                continue
            if event.type in (ev.MARIADB_GTID, ev.MYSQL_GTID, ev.MYSQL_ANONYMOUS_GTID) and \
                    event.timestamp >= target:
                return previous_end
            if event.type == ev.XID or (event.type == ev.QUERY and
                                        ev.parse_query(event.body).statement.strip().upper()
                                        not in ("BEGIN", "")):
                previous_end = Position(file, event.log_pos)  # a transaction ends here
    return None


def gtid_position(source, gtids: str, mariadb: bool) -> tuple[Position | None, str]:
    """Where the first transaction after `gtids` begins on the source (None: none yet, start
    at the binlog's end), and the GTID position there as capture keeps it."""
    text = ",".join(part.strip() for part in gtids.split(","))
    if mariadb != bool(re.fullmatch(r"\d+-\d+-\d+(,\d+-\d+-\d+)*", text)):
        raise SourceError(f"source.startup_gtid `{gtids}` is a "
                          f"{'MySQL GTID set' if mariadb else 'MariaDB GTID position'}, but the "
                          f"source is {'MariaDB' if mariadb else 'MySQL'}")
    state = str(MariaGtidState.parse(text) if mariadb else GtidSet.parse(text))
    try:
        stream = BinlogStream(stream_settings(source), source.server_id, GtidStart(state, mariadb),
                              mariadb=mariadb)
    except StreamError as exc:
        raise _gtid_error(exc, gtids) from None
    try:
        return first_transaction(stream, stream.checksum), state
    except StreamError as exc:
        raise _gtid_error(exc, gtids) from None
    finally:
        stream.close()


def _gtid_error(exc: StreamError, gtids: str) -> SourceError:
    if exc.code == 1236:
        return SourceError(f"source.startup_gtid `{gtids}`: the source cannot send its binlog "
                           f"from there ({exc.message}): its binlog may no longer hold those "
                           f"transactions, or they are not all in it")
    return explain_stream_error(exc.code, exc.message, gtids)


def first_transaction(events, checksum: bool) -> Position | None:
    """The start of the first transaction the server sends in a stream begun at a GTID
    position (it skips what the position holds): its GTID event's end less its size."""
    file = ""
    for event in events:
        if event.type == ev.ROTATE:
            file = ev.parse_rotate(event.body)[0]
        elif event.type in (ev.MARIADB_GTID, ev.MYSQL_GTID, ev.MYSQL_ANONYMOUS_GTID) and \
                event.log_pos:
            size = HEADER.size + len(event.body) + (4 if checksum else 0)
            return Position(file, event.log_pos - size)
    return None
