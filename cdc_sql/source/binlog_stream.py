"""Raw binlog events, parsed by python-mysql-replication in this process or in a child process.

Parsing row events is the slowest step of capture (about 25k row changes/s on one core). In a
child process it runs beside the decoding and writing that the parent does, so capture keeps
pace with a bare parse. The child sends plain tuples, in chunks, through a pipe; a thread of the
parent drains the pipe into a bounded queue, so the child keeps parsing while the parent writes
a bronze batch (the queue bounds how far it runs ahead):
    ("rotate", file, pos, ts, None)         a new binlog file begins
    ("gtid", file, end, ts, (gtid, mysql))  a transaction begins (mysql: a MySQL GTID)
    ("rows", file, end, ts, (op, schema, table, rows))   op: c, u or d; rows as the library gives
    ("xid", file, end, ts, None)            a transaction commits
    ("query", file, end, ts, (schema, sql))
    ("end", file, pos, 0, None)             the reader stopped (end of a non-blocking read)
    ("error", code, message, 0, None)       raised again in the parent
This module imports only what the child needs, so the child starts fast.
"""
from __future__ import annotations

import datetime as dt
import pickle
import signal
import queue
import struct
import subprocess
import sys
import tempfile
import threading
import time
from typing import Iterator

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (GtidEvent, MariadbGtidEvent, QueryEvent, RotateEvent,
                                      XidEvent)
from pymysqlreplication.row_event import (DeleteRowsEvent, RowsEvent, UpdateRowsEvent,
                                          WriteRowsEvent)

_OPS = {WriteRowsEvent: "c", UpdateRowsEvent: "u", DeleteRowsEvent: "d"}
CHUNK_ROWS = 2_000  # a message from the child holds about this many row changes ...
CHUNK_EVENTS = 256  # ... or this many events
AHEAD = 32          # messages the parent buffers: about 64k row changes


class StreamError(Exception):
    """An error from the stream, with the server's error code when there is one."""

    def __init__(self, code, message: str):
        super().__init__(code, message)
        self.code, self.message = code, message


def _read_time2(event, column) -> dt.timedelta:
    """TIME(fsp) from a row event, as MySQL's my_time_packed_from_binary reads it.

    python-mysql-replication 1.0 reads the fraction as a signed byte and misses the borrow that
    negative values with a fraction carry, so '-838:59:59.99' came out as '-838:59:59.01'.
    """
    fsp = column.fsp or 0
    data = int.from_bytes(event.packet.read(3 + (fsp + 1) // 2), "big")
    if fsp >= 5:
        packed = data - 0x800000000000
    else:
        frac_bits = 8 * ((fsp + 1) // 2)
        intpart, frac = (data >> frac_bits) - 0x800000, data & ((1 << frac_bits) - 1)
        if intpart < 0 and frac:
            intpart, frac = intpart + 1, frac - (1 << frac_bits)
        packed = (intpart << 24) + frac * (10_000 if fsp <= 2 else 100)
    hms, micros = divmod(abs(packed), 1 << 24)
    value = dt.timedelta(hours=(hms >> 12) % 1024, minutes=(hms >> 6) % 64, seconds=hms % 64,
                         microseconds=micros)
    return -value if packed < 0 else value


RowsEvent._RowsEvent__read_time2 = _read_time2  # the library's own method name (mangled)


def bounded_connect(attempts: int, backoff: float):
    """A pymysql.connect that gives up after `attempts` tries (the library retries forever)."""
    failures = [0]

    def connect(**settings):
        while True:
            try:
                conn = pymysql.connect(**settings)
                failures[0] = 0
                return conn
            except pymysql.err.OperationalError as exc:
                failures[0] += 1
                if failures[0] >= attempts:
                    raise StreamError(None, f"lost the binlog connection and could not "
                                            f"reconnect after {attempts} attempts: "
                                            f"{exc.args[-1]}") from None
                time.sleep(backoff * 2 ** (failures[0] - 1))

    return connect


def raw_events(settings: dict, server_id: int, file: str, pos: int, schemas: list[str],
               blocking: bool, attempts: int = 5) -> Iterator[tuple]:
    stream = BinLogStreamReader(
        connection_settings=settings, server_id=server_id, log_file=file, log_pos=pos,
        resume_stream=True, blocking=blocking,
        only_events=[*_OPS, QueryEvent, XidEvent, RotateEvent, GtidEvent, MariadbGtidEvent],
        only_schemas=schemas or None, pymysql_wrapper=bounded_connect(attempts, 0.5),
        slave_heartbeat=5 if blocking else None,
        report_slave="cdc-sql",  # lists us in SHOW SLAVE HOSTS, so server_id clashes show
    )
    try:
        for event in stream:
            ts = event.timestamp
            if isinstance(event, RotateEvent):
                yield ("rotate", stream.log_file, stream.log_pos, ts, None)
            elif isinstance(event, (GtidEvent, MariadbGtidEvent)):
                gtid = str(getattr(event, "gtid", ""))
                yield ("gtid", stream.log_file, event.packet.log_pos, ts,
                       (gtid, isinstance(event, GtidEvent)))
            elif type(event) in _OPS:
                yield ("rows", stream.log_file, event.packet.log_pos, ts,
                       (_OPS[type(event)], event.schema, event.table, event.rows))
            elif isinstance(event, XidEvent):
                yield ("xid", stream.log_file, event.packet.log_pos, ts, None)
            elif isinstance(event, QueryEvent):
                yield ("query", stream.log_file, event.packet.log_pos, ts,
                       (_text(event.schema), _text(event.query)))
        yield ("end", stream.log_file, stream.log_pos, 0, None)
    except pymysql.err.MySQLError as exc:
        raise StreamError(exc.args[0] if exc.args else None,
                          str(exc.args[-1]) if exc.args else str(exc)) from None
    finally:
        stream.close()


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else (value or "")


# -- the child process -----------------------------------------------------------------------
# A plain `python -m cdc_sql.source.binlog_stream` child, not multiprocessing: spawn re-imports
# the caller's main module, which breaks scripts without a main guard. Arguments (the password
# among them) arrive on stdin, never in argv; chunks leave on stdout, length-prefixed pickles.
_LENGTH = struct.Struct(">Q")


def _child_main() -> None:
    _die_with_parent()
    args = pickle.load(sys.stdin.buffer)
    out = sys.stdout.buffer
    chunk: list[tuple] = []

    def send(events: list[tuple]) -> None:
        data = pickle.dumps(events, protocol=pickle.HIGHEST_PROTOCOL)
        out.write(_LENGTH.pack(len(data)) + data)
        out.flush()

    blocking = args[5]
    rows = 0
    try:
        for event in raw_events(*args):
            chunk.append(event)
            if event[0] == "rows":
                rows += len(event[4][3])
            # A following reader waits on the stream: send each transaction as it ends.
            if rows >= CHUNK_ROWS or len(chunk) >= CHUNK_EVENTS or \
                    blocking and event[0] in ("xid", "query", "rotate"):
                send(chunk)
                chunk, rows = [], 0
        send(chunk)
    except StreamError as exc:
        send([*chunk, ("error", exc.code, exc.message, 0, None)])
    except Exception as exc:  # noqa: BLE001 - everything reaches the parent
        send([*chunk, ("error", None, f"{type(exc).__name__}: {exc}", 0, None)])


def _die_with_parent() -> None:
    """Linux: SIGKILL this child when the parent dies, even by SIGKILL."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def raw_events_in_child(*args) -> Iterator[tuple]:
    """`raw_events(*args)`, parsed in a child process."""
    errors = tempfile.TemporaryFile()  # not a pipe: a chatty child must never block on it
    child = subprocess.Popen([sys.executable, "-m", "cdc_sql.source.binlog_stream"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors)
    messages: queue.Queue = queue.Queue(AHEAD)
    closing = threading.Event()
    drain = threading.Thread(target=_drain, args=(child.stdout, messages, closing),
                             name="binlog-pipe", daemon=True)
    try:
        pickle.dump(args, child.stdin)
        child.stdin.close()
        drain.start()
        while True:
            data = messages.get()
            if data is None:
                child.wait()
                errors.seek(0)
                detail = errors.read().decode(errors="replace").strip().splitlines()
                raise StreamError(None, f"the binlog parser exited ({child.returncode}): "
                                        f"{detail[-1] if detail else 'no message'}")
            for event in pickle.loads(data):
                if event[0] == "error":
                    raise StreamError(event[1], event[2])
                yield event
                if event[0] == "end":
                    return
    finally:
        closing.set()
        if child.poll() is None:
            child.kill()
        child.wait()
        if drain.ident:
            drain.join(timeout=5)
        child.stdout.close()
        errors.close()


def _drain(pipe, messages: queue.Queue, closing: threading.Event) -> None:
    """Move whole messages from the child's pipe to the queue (reads release the GIL);
    None marks the end of the pipe."""
    while not closing.is_set():
        data = None
        header = pipe.read(_LENGTH.size)
        if len(header) == _LENGTH.size:
            size = _LENGTH.unpack(header)[0]
            data = pipe.read(size)
            data = data if len(data) == size else None  # the child died mid-message
        while not closing.is_set():
            try:
                messages.put(data, timeout=0.2)
                break
            except queue.Full:
                continue
        if data is None:
            return


if __name__ == "__main__":
    _child_main()
