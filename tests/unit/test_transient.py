"""Which source errors follow mode waits out, and which stop it."""
import pymysql
import pytest

from cdc_sql.config.model import Source, Tls
from cdc_sql.errors import is_transient
from cdc_sql.source.mysql import explain

SOURCE = Source(host="db", user="cdc", password="pw-9")


@pytest.mark.parametrize("code, text", [
    (2003, "Can't connect to MySQL server on 'db' ([Errno 111] Connection refused)"),
    (2013, "Lost connection to MySQL server during query"),
    (2006, "MySQL server has gone away"),
    (1927, "Connection was killed"),
    (1053, "Server shutdown in progress"),
    (None, "lost the binlog connection and could not get it back"),
    (None, "Unexpected EOF while reading"),
])
def test_lost_connections_are_transient(code, text):
    assert is_transient(code, text)


@pytest.mark.parametrize("code, text", [
    (1045, "Access denied for user 'cdc'"),
    (1236, "Could not find first log file name in binary log index file"),
    (1146, "Table 'shop.orders' doesn't exist"),
    (None, "binlog_format=STATEMENT (needs ROW)"),
])
def test_what_needs_a_person_is_not(code, text):
    assert not is_transient(code, text)


def test_explained_errors_carry_it():
    refused = explain(pymysql.err.OperationalError(2003, "Can't connect ... refused"), SOURCE)
    assert refused.transient and "cannot connect to cdc@db:3306" in str(refused)
    denied = explain(pymysql.err.OperationalError(1045, "Access denied"), SOURCE)
    assert not denied.transient and "source.ssl" in str(denied)
    tls = Source(host="db", user="cdc", ssl=Tls(required=True))
    bad_tls = explain(pymysql.err.OperationalError(2003, "[SSL: CERTIFICATE_VERIFY_FAILED]"), tls)
    assert not bad_tls.transient and "TLS to cdc@db:3306 failed" in str(bad_tls)


def _caused(exc: Exception, cause: Exception) -> Exception:
    exc.__cause__ = cause
    return exc


@pytest.mark.parametrize("exc, full", [
    (OSError(28, "Error writing bytes to file. Detail: [errno 28] No space left on device"), True),
    (OSError(122, "Disk quota exceeded"), True),
    (Exception("Failed to parse parquet: External: Generic LocalFileSystem error: Unable to "
               "copy data to file: No space left on device (os error 28)"), True),  # delta-rs
    (_caused(RuntimeError("task failed"), OSError(28, "No space left on device")), True),
    (OSError(13, "Permission denied"), False),
    (RuntimeError("Connection refused"), False),
])
def test_a_full_target_is_recognised_by_errno_or_text(exc, full):
    from cdc_sql.errors import out_of_space

    assert out_of_space(exc) is full
