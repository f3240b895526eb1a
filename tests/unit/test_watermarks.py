"""The MySQL code paths, against a scripted cursor (integration tests cover MariaDB)."""
import pymysql
import pytest

from cdc_sql.errors import SourceError
from cdc_sql.source.offsets import Position
from cdc_sql.source.watermarks import begin_snapshot, binary_log_status


class ScriptedCursor:
    def __init__(self, answers: dict):
        self.answers, self.executed, self._rows = answers, [], []

    def execute(self, sql, args=None):
        self.executed.append(sql)
        answer = self.answers.get(sql, [])
        if isinstance(answer, Exception):
            raise answer
        self._rows = list(answer)

    def fetchone(self):
        return self._rows[0] if self._rows else None

    def fetchall(self):
        return self._rows


def test_mysql_84_uses_show_binary_log_status():
    cur = ScriptedCursor({"SHOW BINARY LOG STATUS": [("binlog.000007", 157, "", "", "uuid:1-5")]})
    assert binary_log_status(cur) == (Position("binlog.000007", 157), "uuid:1-5")
    assert cur.executed == ["SHOW BINARY LOG STATUS"]


def test_older_servers_fall_back_to_show_master_status():
    parse_error = pymysql.err.ProgrammingError(1064, "You have an error in your SQL syntax")
    cur = ScriptedCursor({"SHOW BINARY LOG STATUS": parse_error,
                          "SHOW MASTER STATUS": [("mysql-bin.000002", 4, "", "", "")]})
    assert binary_log_status(cur) == (Position("mysql-bin.000002", 4), "")
    assert cur.executed == ["SHOW BINARY LOG STATUS", "SHOW MASTER STATUS"]


def test_binlog_off_is_a_clear_error():
    with pytest.raises(SourceError, match="binary log is off"):
        binary_log_status(ScriptedCursor({"SHOW BINARY LOG STATUS": []}))


def test_mysql_without_gtids_uses_the_position_before_the_snapshot_marked_inexact():
    cur = ScriptedCursor({"SELECT @@global.gtid_mode": [("OFF",)],
                          "SHOW BINARY LOG STATUS": [("binlog.000003", 900, "", "", "")]})
    mark = begin_snapshot(cur, mariadb=False)
    assert cur.executed == ["SELECT @@global.gtid_mode", "SHOW BINARY LOG STATUS",
                            "START TRANSACTION WITH CONSISTENT SNAPSHOT"]
    assert mark.position == Position("binlog.000003", 900) and not mark.exact
    assert mark.resolved


def test_mysql_with_gtids_uses_gtid_executed_read_before_the_snapshot():
    cur = ScriptedCursor({"SELECT @@global.gtid_mode": [("ON",)],
                          "SHOW BINARY LOG STATUS": [("binlog.000003", 900, "", "", "u:1-9")],
                          "SELECT @@global.gtid_executed": [("u:1-10",)]})
    mark = begin_snapshot(cur, mariadb=False)
    assert cur.executed[-2:] == ["SELECT @@global.gtid_executed",
                                 "START TRANSACTION WITH CONSISTENT SNAPSHOT"]
    assert mark.gtid_set == "u:1-10" and mark.exact and not mark.resolved
    assert mark.position == Position("binlog.000003", 4)  # resolution starts at the file start


def test_mariadb_watermark_is_the_snapshot_position():
    cur = ScriptedCursor({"SHOW STATUS LIKE 'binlog_snapshot_%'": [
        ("Binlog_snapshot_file", "binlog.000001"), ("Binlog_snapshot_position", "1322")]})
    mark = begin_snapshot(cur, mariadb=True)
    assert cur.executed[0] == "START TRANSACTION WITH CONSISTENT SNAPSHOT"
    assert mark.position == Position("binlog.000001", 1322) and mark.exact
