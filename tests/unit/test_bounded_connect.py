"""python-mysql-replication reconnects forever on some errors; our connect gives up."""
import pymysql
import pytest

from cdc_sql.source import binlog_stream as binlog
from cdc_sql.source.binlog_stream import StreamError


def failing(times: int):
    calls = []

    def connect(**settings):
        calls.append(settings)
        if len(calls) <= times:
            raise pymysql.err.OperationalError(2003, "Can't connect to MySQL server")
        return "connection"

    return connect, calls


def test_retries_with_backoff_then_connects(monkeypatch):
    connect, calls = failing(2)
    sleeps = []
    monkeypatch.setattr(binlog.pymysql, "connect", connect)
    monkeypatch.setattr(binlog.time, "sleep", sleeps.append)
    assert binlog.bounded_connect(5, 0.5)(host="h") == "connection"
    assert len(calls) == 3 and sleeps == [0.5, 1.0]


def test_gives_up_after_the_last_attempt(monkeypatch):
    connect, calls = failing(100)
    monkeypatch.setattr(binlog.pymysql, "connect", connect)
    monkeypatch.setattr(binlog.time, "sleep", lambda _: None)
    with pytest.raises(StreamError, match="could not reconnect after 4 attempts"):
        binlog.bounded_connect(4, 0.5)(host="h", password="secret-pw")
    assert len(calls) == 4
