"""The replication protocol: a connection that asks the source for its binlog and hands out the
raw events, one `RawEvent` per event, checksum checked and stripped.

A stream starts at a binlog position (`COM_BINLOG_DUMP`), or, after a failover, at a GTID
position: MariaDB's `@slave_connect_state` with `COM_BINLOG_DUMP` and an empty file name, MySQL's
`COM_BINLOG_DUMP_GTID` with the executed GTID set. Non-blocking streams end where the binlog
ends (the server sends EOF); blocking ones wait for more, with heartbeats.

Only framing happens here (a 19-byte header per event); event bodies are parsed by
binlog_events.py and row images by rows.py. pymysql opens the connection (authentication, TLS)
and its socket is then read directly: one event per packet (events over 16 MB span several).
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Iterator

import pymysql

from cdc_sql.source.failover import server_identity
from cdc_sql.source.gtid import GtidSet
from cdc_sql.source.mysql import Connection
from cdc_sql.source.offsets import Position

COM_BINLOG_DUMP, COM_REGISTER_SLAVE, COM_BINLOG_DUMP_GTID = 0x12, 0x15, 0x1E
BINLOG_DUMP_NON_BLOCK, BINLOG_THROUGH_GTID = 0x01, 0x04
MARIA_SLAVE_CAPABILITY_GTID = 4
HEADER = struct.Struct("<IBIIIH")  # timestamp, type, server_id, event_size, log_pos, flags
_MAX_PACKET = 0xFFFFFF


class StreamError(Exception):
    """An error from the stream, with the server's error code when there is one."""

    def __init__(self, code, message: str):
        super().__init__(code, message)
        self.code, self.message = code, message


@dataclass(frozen=True)
class RawEvent:
    type: int
    timestamp: int
    server_id: int
    log_pos: int          # where the next event starts in the current file (0: artificial)
    flags: int
    body: memoryview      # after the 19-byte header, without the checksum


@dataclass(frozen=True)
class GtidStart:
    """Where to start by GTID: MariaDB `domain-server-seq,...` or a MySQL GTID set."""

    gtids: str
    mariadb: bool


class BinlogStream:
    """One replication connection; iterate it for `RawEvent`s. `close()` ends it."""

    def __init__(self, settings: dict, server_id: int, start: Position | GtidStart,
                 blocking: bool = False, heartbeat: float = 5.0, report_host: str = "cdc-sql",
                 expect_server: str = "", mariadb: bool = True):
        """`expect_server`: the identity (source/failover.py) the server must have, so a name
        that moved to another server since the run checked it is not read by position."""
        self.server_id, self.start, self.blocking = server_id, start, blocking
        self.expect_server, self.mariadb = expect_server, mariadb
        timeout = max(heartbeat * 3, 30.0) if blocking else None
        try:
            self.conn = Connection(**settings, read_timeout=timeout)
        except pymysql.err.MySQLError as exc:
            raise StreamError(exc.args[0] if exc.args else None,
                              str(exc.args[-1]) if exc.args else str(exc)) from None
        try:
            self.checksum = self._prepare(heartbeat)
            self._register(report_host)
            self._dump()
        except StreamError:
            self.close()
            raise
        except pymysql.err.MySQLError as exc:
            self.close()
            raise StreamError(exc.args[0] if exc.args else None,
                              str(exc.args[-1]) if exc.args else str(exc)) from None

    def close(self) -> None:
        try:
            self.conn.close()
        except Exception:  # noqa: BLE001 - closing a broken socket
            pass

    # -- setup ---------------------------------------------------------------------------------
    def _prepare(self, heartbeat: float) -> bool:
        with self.conn.cursor() as cur:
            if self.expect_server:
                found = server_identity(cur, self.mariadb)
                if found != self.expect_server:
                    raise StreamError(None, f"the source is now {found}, not {self.expect_server} "
                                            f"as when this run began (a failover?): lost "
                                            f"connection to the server capture was reading; "
                                            f"the next run resumes by GTID")
            cur.execute("SELECT @@global.binlog_checksum")
            checksum = str(cur.fetchone()[0]).upper() != "NONE"
            if checksum:  # the server sends what it has: tell it we check CRC32 ourselves
                cur.execute("SET @master_binlog_checksum = @@global.binlog_checksum")
            cur.execute("SET @mariadb_slave_capability = %s", (MARIA_SLAVE_CAPABILITY_GTID,))
            if self.blocking:
                cur.execute("SET @master_heartbeat_period = %s", (int(heartbeat * 1e9),))
            if isinstance(self.start, GtidStart) and self.start.mariadb:
                cur.execute("SET @slave_connect_state = %s", (self.start.gtids,))
                cur.execute("SET @slave_gtid_strict_mode = 1")
                cur.execute("SET @slave_gtid_ignore_duplicates = 0")
        return checksum

    def _register(self, host: str) -> None:
        """COM_REGISTER_SLAVE: lists us in SHOW SLAVE HOSTS, so server_id clashes show."""
        name = host.encode()
        payload = (bytes([COM_REGISTER_SLAVE]) + struct.pack("<I", self.server_id) +
                   bytes([len(name)]) + name + b"\0\0" + struct.pack("<H", 0) +
                   struct.pack("<II", 0, 0))
        self._command(payload)
        self._read_packet()

    def _dump(self) -> None:
        flags = 0 if self.blocking else BINLOG_DUMP_NON_BLOCK
        self._command(dump_command(self.start, flags, self.server_id))

    def _command(self, payload: bytes) -> None:
        self.conn._next_seq_id = 0
        self.conn._write_bytes(struct.pack("<I", len(payload))[:3] + b"\0" + payload)
        self.conn._next_seq_id = 1

    def _read_packet(self) -> bytes:
        """One protocol packet's payload (joined when it spans several)."""
        read = self.conn._read_bytes
        parts = []
        while True:
            header = read(4)
            size = header[0] | header[1] << 8 | header[2] << 16
            parts.append(read(size))
            if size < _MAX_PACKET:
                break
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        if data[:1] == b"\xff":
            code = struct.unpack_from("<H", data, 1)[0]
            message = data[9:].decode("utf-8", "replace") if data[3:4] == b"#" else \
                data[3:].decode("utf-8", "replace")
            raise StreamError(code, message)
        return data

    # -- events --------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[RawEvent]:
        try:
            while True:
                data = self._read_packet()
                if data[:1] == b"\xfe" and len(data) < 9:  # EOF: a non-blocking read ended
                    return
                yield self._event(memoryview(data)[1:])
        except pymysql.err.MySQLError as exc:
            raise StreamError(exc.args[0] if exc.args else None,
                              str(exc.args[-1]) if exc.args else str(exc)) from None
        except (OSError, EOFError) as exc:
            raise StreamError(2013, f"lost the binlog connection: {exc}") from None

    def _event(self, data: memoryview) -> RawEvent:
        timestamp, type_, server_id, size, log_pos, flags = HEADER.unpack_from(data)
        end = size
        if self.checksum and type_ != 0:
            end -= 4
            expected = struct.unpack_from("<I", data, end)[0]
            if zlib.crc32(data[:end]) != expected and log_pos:
                raise StreamError(None, f"binlog event checksum mismatch at position {log_pos} "
                                        f"(type {type_}): the stream is corrupt")
        return RawEvent(type_, timestamp, server_id, log_pos, flags, data[HEADER.size:end])


def dump_command(start: Position | GtidStart, flags: int, server_id: int) -> bytes:
    """The command that starts the stream: COM_BINLOG_DUMP at a position (MariaDB by GTID: at
    the @slave_connect_state set before, an empty file name), or MySQL's
    COM_BINLOG_DUMP_GTID (flags, server_id, an empty file name, position 4, the GTID set)."""
    if isinstance(start, Position):
        return (bytes([COM_BINLOG_DUMP]) + struct.pack("<IHI", start.pos, flags, server_id) +
                start.file.encode())
    if start.mariadb:
        return bytes([COM_BINLOG_DUMP]) + struct.pack("<IHI", 4, flags, server_id)
    data = encode_gtid_set(start.gtids)
    return (bytes([COM_BINLOG_DUMP_GTID]) +
            struct.pack("<HIIQI", flags | BINLOG_THROUGH_GTID, server_id, 0, 4, len(data)) + data)


def encode_gtid_set(text: str) -> bytes:
    """A MySQL GTID set (`uuid:1-5:7,uuid2:1-3`) in COM_BINLOG_DUMP_GTID's binary form."""
    intervals = GtidSet.parse(text).intervals
    out = [struct.pack("<Q", len(intervals))]
    for uuid in sorted(intervals):
        out.append(bytes.fromhex(uuid.replace("-", "")))
        out.append(struct.pack("<Q", len(intervals[uuid])))
        for low, high in intervals[uuid]:
            out.append(struct.pack("<QQ", low, high + 1))  # intervals are half-open here
    return b"".join(out)
