"""Where binlog capture starts for the startup modes that skip the snapshot.

- latest: the binlog end when the pipeline first runs;
- earliest: the start of the oldest binlog file the server still has;
- offset: a `file:position` the user gives (checked against SHOW BINARY LOGS);
- timestamp: the first transaction committed at or after a UTC time, found by a binary search
  over the binlog files by the time of their first event (as Flink CDC and SeaTunnel do), then a
  scan forward from there.
"""
from __future__ import annotations

import datetime as dt

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (GtidEvent, MariadbGtidEvent, QueryEvent, RotateEvent,
                                      XidEvent)

from cdc_sql.errors import SourceError
from cdc_sql.source import mysql
from cdc_sql.source.offsets import Position


def binary_logs(source) -> list[tuple[str, int]]:
    with mysql.cursor(source) as cur:
        cur.execute("SHOW BINARY LOGS")
        return [(row[0], int(row[1])) for row in cur.fetchall()]


def parse_timestamp(text: str) -> dt.datetime:
    """`2024-05-01 12:00:00` (UTC unless an offset is given) or epoch seconds."""
    text = str(text).strip()
    if text.replace(".", "", 1).isdigit():
        return dt.datetime.fromtimestamp(float(text), dt.timezone.utc)
    value = dt.datetime.fromisoformat(text)
    return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)


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


def _stream(source, file: str):
    from cdc_sql.source.binlog import stream_settings
    from cdc_sql.source.binlog_stream import bounded_connect

    return BinLogStreamReader(
        connection_settings=stream_settings(source), server_id=source.server_id,
        log_file=file, log_pos=4, resume_stream=True, blocking=False,
        only_events=[QueryEvent, XidEvent, GtidEvent, MariadbGtidEvent, RotateEvent],
        pymysql_wrapper=bounded_connect(3, 0.5))


def _first_event_time(source, file: str) -> float:
    stream = _stream(source, file)
    try:
        for event in stream:
            if event.timestamp and not isinstance(event, RotateEvent):
                return event.timestamp
        return float("inf")
    finally:
        stream.close()


def _first_transaction_at(source, file: str, target: float) -> Position | None:
    """The start of the first transaction in `file` committed at or after `target`."""
    stream = _stream(source, file)
    previous_end = Position(file, 4)
    try:
        for event in stream:
            if stream.log_file != file:
                return None
            if isinstance(event, RotateEvent):
                continue
            if isinstance(event, (GtidEvent, MariadbGtidEvent)) and event.timestamp >= target:
                return previous_end
            if isinstance(event, XidEvent) or (isinstance(event, QueryEvent) and
                                               event.query.strip().upper() != "BEGIN"):
                previous_end = Position(file, event.packet.log_pos)  # a transaction ends here
        return None
    finally:
        stream.close()
