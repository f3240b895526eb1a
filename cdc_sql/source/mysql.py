"""Connections to the source, with errors that say what to do and never show the password."""
from __future__ import annotations

import ssl
import threading
from contextlib import contextmanager
from typing import Iterator

import pymysql
import pymysql.cursors

from cdc_sql.errors import SourceError, is_transient

# MySQL/MariaDB error numbers we explain to the user.
_ACCESS_DENIED, _UNKNOWN_HOST, _CANT_CONNECT = 1045, 2005, 2003


def connection_settings(source) -> dict:
    """pymysql keyword arguments. Sessions read TIMESTAMP in UTC and text in utf8mb4."""
    return {
        "host": source.host, "port": source.port, "user": source.user,
        "password": source.password, "charset": "utf8mb4", "connect_timeout": 10,
        "init_command": "SET time_zone = '+00:00'", "ssl": source.ssl.pymysql(),
    }


def where(source) -> str:
    return f"{source.user}@{source.host}:{source.port}"


class Connection(pymysql.connections.Connection):
    """pymysql's connection with one TLS context shared by every connection whose TLS options
    name no CA and no client certificate (no `source.ssl`: pymysql then offers TLS if the
    server has it; or `ssl.required`). Such a context checks no certificate, yet pymysql
    builds it with the system's CA certificates loaded (30 ms a connection): most of the cost
    of a small table's read (docs/performance.md), and of a process's first connection."""

    _unverified: ssl.SSLContext | None = None
    _lock = threading.Lock()

    def _create_ssl_ctx(self, sslp):
        if not unverified(sslp):
            return super()._create_ssl_ctx(sslp)
        with Connection._lock:
            if Connection._unverified is None:
                Connection._unverified = unverified_context()
            return Connection._unverified


def unverified(sslp: dict) -> bool:
    """Whether pymysql's TLS options `sslp` check no certificate and present none: they set
    nothing but `check_hostname`, which pymysql turns off without a CA."""
    return not any(value for key, value in sslp.items() if key != "check_hostname")


def unverified_context() -> ssl.SSLContext:
    """The context pymysql makes of such options, without the CA certificates it never uses."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def connect(source, **overrides) -> pymysql.connections.Connection:
    settings = {**connection_settings(source), "autocommit": True, **overrides}
    try:
        return Connection(**settings)
    except pymysql.err.OperationalError as exc:
        raise explain(exc, source) from None


def explain(exc: Exception, source) -> SourceError:
    code = exc.args[0] if exc.args else None
    if code == _ACCESS_DENIED:
        tls = ("" if source.ssl.enabled else "; a user created REQUIRE SSL or X509 also needs "
               "source.ssl (ca, and cert/key for X509)")
        return SourceError(f"access denied for {where(source)}: check source.user and "
                           f"source.password or source.password_file (the password is not "
                           f"shown){tls}")
    if "SSL" in str(exc) or "TLS" in str(exc):
        return SourceError(f"TLS to {where(source)} failed: {first_line(exc)}. Check "
                           f"source.ssl.ca (the CA that signed the server's certificate), "
                           f"source.ssl.cert/key, and verify_identity against source.host")
    if code in (_UNKNOWN_HOST, _CANT_CONNECT):
        return SourceError(f"cannot connect to {where(source)}: is the server running and "
                           f"source.host/source.port right? ({first_line(exc)})",
                           transient=code == _CANT_CONNECT)
    return SourceError(f"source {where(source)}: {first_line(exc)}",
                       transient=is_transient(code, str(exc)))


def first_line(exc: Exception) -> str:
    text = str(exc.args[1]) if len(exc.args) > 1 else str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


class StreamingCursor(pymysql.cursors.SSCursor):
    """An unbuffered cursor that closes quietly once its connection is lost (pymysql's would
    raise again from `__del__`, printing a traceback)."""

    def close(self):
        if self.connection is not None and not self.connection.open:  # nothing more arrives
            if self._result is not None:
                self._result.unbuffered_active = False
            self.connection = None
        super().close()

    __del__ = close


@contextmanager
def cursor(source) -> Iterator[pymysql.cursors.Cursor]:
    conn = connect(source)
    try:
        with conn.cursor() as cur:
            yield cur
    except pymysql.err.MySQLError as exc:
        raise explain(exc, source) from None
    finally:
        conn.close()


_STATEMENT_TIMEOUT = (1969, 3024)  # MariaDB max_statement_time, MySQL MAX_EXECUTION_TIME


@contextmanager
def read_only_cursor(source, statement_seconds: float) -> Iterator[pymysql.cursors.Cursor]:
    """A cursor in a read-only transaction whose statements stop after `statement_seconds`
    (`verify`: a heavy projection must not load a production primary for long)."""
    conn = connect(source, cursorclass=pymysql.cursors.Cursor, autocommit=False)
    try:
        with conn.cursor() as cur:
            if is_mariadb(cur):
                cur.execute("SET SESSION max_statement_time = %s", (float(statement_seconds),))
            else:
                cur.execute("SET SESSION MAX_EXECUTION_TIME = %s",
                            (int(statement_seconds * 1000),))
            cur.execute("START TRANSACTION READ ONLY")
            yield cur
    except pymysql.err.MySQLError as exc:
        if exc.args and exc.args[0] in _STATEMENT_TIMEOUT:
            raise SourceError(f"a query of verify on {where(source)} ran longer than "
                              f"source.verify_timeout_seconds ({statement_seconds:g} s) and was "
                              f"stopped: verify fewer tables at once (--tables), or raise the "
                              f"limit") from None
        raise explain(exc, source) from None
    finally:
        try:
            conn.rollback()
        finally:
            conn.close()


def variables(cur, *names: str) -> dict[str, str]:
    """Global variables by name (lower-case keys); missing ones are absent."""
    cur.execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN (" +
                ", ".join(["%s"] * len(names)) + ")", names)
    return {name.lower(): value for name, value in cur.fetchall()}


def is_mariadb(cur) -> bool:
    cur.execute("SELECT VERSION()")
    return "mariadb" in cur.fetchone()[0].lower()
