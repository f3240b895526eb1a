"""The pure pieces behind rows changed without row events (source/ddl.py, partitions.py),
XA transactions (binlog_xa.at_commit), MariaDB's compressed events and system-versioned rows."""
import datetime as dt
import logging
import struct
import zlib

import pyarrow as pa
import pytest

from cdc_sql.errors import SourceError
from cdc_sql.source import binlog_events as ev
from cdc_sql.source import binlog_statements, ddl
from cdc_sql.source.binlog_xa import at_commit
from cdc_sql.source.partitions import Partitioning
from cdc_sql.source.schema import SourceTable
from cdc_sql.source.versioning import current_changes


@pytest.mark.parametrize("statement, kind", [
    ("BEGIN", "begin"), ("START TRANSACTION", "begin"), ("COMMIT", "commit"),
    ("ROLLBACK", "rollback"), ("ROLLBACK TO SAVEPOINT a", "savepoint"), ("SAVEPOINT a", "savepoint"),
    ("XA START 'x'", "xa_start"), ("XA BEGIN 'x'", "xa_start"), ("XA END X'78'", "xa_end"),
    ("XA COMMIT X'78',X'',1", "xa_commit"), ("XA ROLLBACK 'x'", "xa_rollback"),
    ("UPDATE t SET a = 1", "dml"), ("  delete from t", "dml"), ("REPLACE INTO t VALUES (1)", "dml"),
    ("INSERT INTO t SELECT * FROM u", "dml"), ("LOAD DATA INFILE 'f' INTO TABLE t", "dml"),
    ("WITH x AS (SELECT 1) UPDATE t SET a = 1", "dml"),
    ("ALTER TABLE t ADD COLUMN c INT", "ddl"), ("CREATE TABLE t (a INT)", "ddl"),
    ("TRUNCATE TABLE t", "ddl"), ("RENAME TABLE a TO b", "ddl"),
])
def test_statement_kind(statement, kind):
    assert ddl.statement_kind(statement) == kind


@pytest.mark.parametrize("statement, xid", [
    ("XA COMMIT X'6131',X'',1", "X'6131',X'',1"),       # as servers write them
    ("XA COMMIT 'a1'", "X'6131',X'',1"),
    ("XA ROLLBACK 'a', 'b', 7", "X'61',X'62',7"),
    ("xa commit 'it''s' ONE PHASE", "X'69742773',X'',1"),
])
def test_xa_id_matches_the_prepare_event(statement, xid):
    assert ddl.xa_id(statement) == xid


def test_xa_prepare_event():
    body = bytes([0]) + struct.pack("<iii", 7, 1, 1) + b"ab"
    assert ev.parse_xa_prepare(memoryview(body)) == (False, "X'61',X'62',7")


@pytest.mark.parametrize("statement, tables", [
    ("UPDATE t SET a = 1 WHERE id IN (SELECT id FROM u)", {("shop", "t")}),
    ("UPDATE t JOIN u ON t.id = u.id SET t.a = 1", {("shop", "t"), ("shop", "u")}),
    ("DELETE t FROM t JOIN u ON t.id = u.id", {("shop", "t")}),
    ("DELETE FROM other.t WHERE id = 1", {("other", "t")}),
    ("REPLACE INTO `Other`.`T` VALUES (1)", {("other", "t")}),
    ("INSERT IGNORE INTO t2 SELECT * FROM t", {("shop", "t2")}),
    ("LOAD DATA LOCAL INFILE '/tmp/x' INTO TABLE `t` FIELDS TERMINATED BY ','", {("shop", "t")}),
    ("UPDATE (((", None),
])
def test_dml_targets(statement, tables):
    assert ddl.dml_targets(statement, "shop") == tables


@pytest.mark.parametrize("statement, action, partitions, other, changes_rows", [
    ("ALTER TABLE t TRUNCATE PARTITION p0, p1", "TRUNCATE", ("p0", "p1"), None, True),
    ("ALTER TABLE t TRUNCATE PARTITION ALL", "TRUNCATE", ("ALL",), None, True),
    ("alter table d.t drop partition `p 0`", "DROP", ("p 0",), None, True),
    ("ALTER TABLE t EXCHANGE PARTITION p1 WITH TABLE x", "EXCHANGE", ("p1",), ("shop", "x"), True),
    ("ALTER TABLE t CONVERT PARTITION p0 TO TABLE z", "CONVERT", ("p0",), None, True),
    ("ALTER TABLE t CONVERT TABLE z TO PARTITION p9 VALUES LESS THAN (9)", "EXCHANGE", (),
     ("shop", "z"), True),
    ("ALTER TABLE t REORGANIZE PARTITION p0 INTO (PARTITION a VALUES LESS THAN (5), "
     "PARTITION b VALUES LESS THAN (10))", "REORGANIZE", ("p0",), None, False),
    ("ALTER TABLE t COALESCE PARTITION 2", "COALESCE", ("2",), None, False),
    ("ALTER TABLE t REBUILD PARTITION p2", "REBUILD", ("p2",), None, False),
    ("ALTER TABLE t REMOVE PARTITIONING", "REMOVE", (), None, False),
])
def test_partition_change(statement, action, partitions, other, changes_rows):
    change = ddl.partition_change(statement, "shop")
    assert (change.action, change.partitions, change.other, change.changes_rows) == \
        (action, partitions, other, changes_rows)


def test_other_statements_are_no_partition_change():
    assert ddl.partition_change("ALTER TABLE t ADD COLUMN p INT", "shop") is None
    assert ddl.partition_change("ALTER TABLE t ADD PARTITION (PARTITION p9 VALUES LESS THAN "
                                "(900))", "shop").action == "ADD"


def test_no_sqlglot_warning_for_statements_it_cannot_read(caplog):
    with caplog.at_level(logging.WARNING):
        assert ddl.touched_tables("ALTER TABLE t TRUNCATE PARTITION p7", "shop") is None
        ddl.renamed_columns("RENAME TABLE a TO b, c TO a")
    assert not [r for r in caplog.records if "unsupported syntax" in r.getMessage()]


RANGES = Partitioning("RANGE", "id", (("p0", "100"), ("p1", "200"), ("p2", "MAXVALUE")))


def test_range_partitions_rows():
    assert RANGES.rows_of(("p0",)) == [[("id", "<", 100)], [("id", "IS", None)]]
    assert RANGES.rows_of(("p1", "p2")) == [[("id", ">=", 100), ("id", "<", 200)],
                                           [("id", ">=", 200)]]
    assert RANGES.rows_of(("p9",)) is None  # unknown here: read the table again
    dates = Partitioning("RANGE COLUMNS", "d", (("old", "'2024-01-01'"), ("new", "'2025-01-01'")))
    assert dates.rows_of(("new",)) == [[("d", ">=", "2024-01-01"), ("d", "<", "2025-01-01")]]


def test_list_partitions_rows():
    lists = Partitioning("LIST", "k", (("a", "1,2,NULL"), ("b", "3"), ("rest", "DEFAULT")))
    assert lists.rows_of(("a",)) == [[("k", "IN", [1, 2])], [("k", "IS", None)]]
    assert lists.rows_of(("b",)) == [[("k", "IN", [3])]]
    assert lists.rows_of(("rest",)) is None


def test_partitionings_no_column_condition_can_say():
    assert Partitioning("HASH", "id", (("p0", ""),)).rows_of(("p0",)) is None
    assert Partitioning("RANGE", None, (("p0", "2020"),)).rows_of(("p0",)) is None  # YEAR(d)
    tuples = Partitioning("RANGE COLUMNS", "a", (("p0", "(1,'x')"),))
    assert tuples.rows_of(("p0",)) is None


def test_uncompressed_rows_event():
    plain = bytes(range(40))
    header, count_and_bitmaps = b"\x12\0\0\0\0\0\x01\0", b"\x02\x03\x03"
    packed = bytes([0x81, len(plain)]) + zlib.compress(plain)
    type_, body = ev.uncompressed_rows(167, memoryview(header + count_and_bitmaps + packed))
    assert (type_, body) == (ev.UPDATE_V1, header + count_and_bitmaps + plain)
    with pytest.raises(ev.EventError, match="announced"):
        ev.uncompressed_rows(166, memoryview(header + b"\x02\x03" + bytes([0x81, 99]) +
                                             zlib.compress(plain)))


def test_compressed_query_event():
    statement = b"ALTER TABLE t ADD COLUMN c INT"
    body = struct.pack("<IIBHH", 1, 0, 1, 0, 0) + b"d\0" + bytes([0x81, len(statement)]) + \
        zlib.compress(statement)
    query = ev.parse_query(memoryview(body), ev.MARIADB_COMPRESSED_QUERY)
    assert (query.schema, query.statement) == ("d", statement.decode())
    assert query.sql_mode is None and not query.strict  # no status variables: not known


@pytest.mark.parametrize("mode, strict", [(0, False), (1 << 21, True), (1 << 22, True),
                                          ((1 << 21) - 1, False)])
def test_a_query_event_gives_its_sql_mode(mode, strict):
    """The flags (code 0) then the sql_mode (code 1) lead the status variables."""
    status = bytes([0]) + struct.pack("<I", 0) + bytes([1]) + struct.pack("<Q", mode) + \
        bytes([4]) + struct.pack("<HHH", 33, 33, 8)
    body = struct.pack("<IIBHH", 1, 0, 1, 0, len(status)) + status + b"d\0ALTER TABLE t"
    query = ev.parse_query(memoryview(body))
    assert (query.schema, query.statement, query.sql_mode, query.strict) == \
        ("d", "ALTER TABLE t", mode, strict)


def _changes(offsets, ops=None, ends=None):
    n = len(offsets)
    columns = {"id": list(range(n)), "_cdc_offset": offsets, "_cdc_op": ops or ["u"] * n}
    if ends is not None:
        columns["row_end"] = ends
    return pa.RecordBatch.from_pydict(columns)


def test_xa_rows_move_to_their_commit_in_the_order_written():
    first = _changes(["000000:000000000001:000000", "000000:000000000001:000001",
                      "000000:000000000003:000000"])
    second = _changes(["000000:000000000002:000000", "000000:000000000002:000000"], ["d", "c"])
    moved = at_commit({("d", "a"): first, ("d", "b"): second}, 7, 900, "X'61',X'',1")
    assert moved[("d", "a")].column("_cdc_offset").to_pylist() == [
        "000007:000000000900:000000", "000007:000000000900:000001", "000007:000000000900:000003"]
    assert moved[("d", "b")].column("_cdc_offset").to_pylist() == [  # a key change: one offset
        "000007:000000000900:000002", "000007:000000000900:000002"]


def test_xa_transaction_too_large_for_row_indexes(monkeypatch):
    monkeypatch.setattr("cdc_sql.source.binlog_xa.XA_MAX_CHANGES", 999)
    many = _changes([f"000000:{i:012d}:000000" for i in range(1000)])
    with pytest.raises(SourceError, match="at most 999 "):
        at_commit({("d", "a"): many}, 1, 2, "X'61',X'',1")


def test_system_versioned_changes_keep_current_rows():
    forever = dt.datetime(2038, 1, 19, 3, 14, 7, 999999, tzinfo=dt.timezone.utc)
    ended = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    ends = pa.array([forever, ended, forever, ended, ended, forever],
                    pa.timestamp("us", tz="UTC"))
    batch = _changes([f"000001:000000000100:{i:06d}" for i in range(6)],
                     ["c", "c", "u", "u", "d", "d"], ends)
    table = SourceTable("d", "t", (), ("id",), row_end="row_end", row_end_hidden=True)
    out = current_changes(batch, table)
    # an insert of a history row and a delete of one go; an update that ends a row deletes it
    assert out.column("id").to_pylist() == [0, 2, 3, 5]
    assert out.column("_cdc_op").to_pylist() == ["c", "u", "d", "d"]
    assert "row_end" not in out.schema.names


@pytest.mark.parametrize("statement, moves", [
    ("RENAME TABLE t TO _t_del, _t_gho TO t", [(("shop", "t"), ("shop", "_t_del")),
                                              (("shop", "_t_gho"), ("shop", "t"))]),
    ("RENAME /* gh-ost */ TABLE `d`.`t` TO `d`.`_t_old`, `d`.`_t_new` TO `d`.`t`",
     [(("d", "t"), ("d", "_t_old")), (("d", "_t_new"), ("d", "t"))]),
    ("ALTER TABLE t RENAME TO u", [(("shop", "t"), ("shop", "u"))]),
    ("ALTER TABLE t RENAME COLUMN a TO b", None),
    ("CREATE TABLE t (a INT)", None),
])
def test_renames(statement, moves):
    assert ddl.renames(ddl.without_comments(statement), "shop") == moves


def test_without_comments_keeps_strings_names_and_executable_comments():
    assert ddl.without_comments("DROP /* gh-ost */ TABLE `a/*b*/` /*!50001 CASCADE */ -- x") == \
        "DROP   TABLE `a/*b*/`   CASCADE   -- x"
    assert ddl.without_comments("INSERT INTO t VALUES ('/* kept */')") == \
        "INSERT INTO t VALUES ('/* kept */')"


def test_shadow_tables_never_match_a_pattern():
    from cdc_sql.config.model import Table

    everything = Table(name="all", source=r"shop\..*")
    for shadow in ("_orders_gho", "_orders_ghc", "_orders_del", "_orders_new", "__orders_old"):
        assert not everything.matches("shop", shadow)
    assert everything.matches("shop", "orders") and everything.matches("shop", "_private")
    assert Table(name="one", source="shop._orders_new").matches("shop", "_orders_new")


def test_create_like_touches_only_the_new_table():
    assert ddl.touched_tables("CREATE TABLE _t_gho LIKE t", "shop") == {("shop", "_t_gho")}


def _event(type_, log_pos, body=b"\0" * 20):
    from cdc_sql.source.binlog_protocol import RawEvent

    return RawEvent(type_, 0, 1, log_pos, 0, memoryview(body))


def test_first_transaction_after_a_mysql_gtid_set():
    """MySQL skips the transactions of the set, and starts in the file holding the first one
    it lacks: the place is that transaction's GTID event's start (its end less its size)."""
    from cdc_sql.source.startup import first_transaction

    rotate = struct.pack("<Q", 4) + b"binlog.000007"
    gtid_body = bytes(42)
    events = [_event(ev.ROTATE, 0, rotate), _event(ev.FORMAT_DESCRIPTION, 126),
              _event(ev.MYSQL_PREVIOUS_GTIDS, 197), _event(ev.MYSQL_GTID, 5000, gtid_body)]
    assert str(first_transaction(events, checksum=True)) == \
        f"binlog.000007:{5000 - 19 - 42 - 4}"
    assert first_transaction(events[:3], checksum=True) is None  # none yet: the binlog's end


def test_startup_gtid_is_checked_offline(tmp_path):
    from cdc_sql.config.model import load_pipeline
    from cdc_sql.errors import ConfigError

    base = ("name: p\nsource:\n  host: h\n  user: u\n  startup: gtid\n{extra}target:\n  path: "
            f"{tmp_path}/lake\ntables:\n  - name: t\n    source: d.t\n")
    path = tmp_path / "p.yaml"
    for extra, error in (("", "startup: gtid needs `startup_gtid`"),
                         ("  startup_gtid: yesterday\n", "neither a MariaDB GTID position")):
        path.write_text(base.format(extra=extra))
        with pytest.raises(ConfigError, match=error):
            load_pipeline(path, environ={})
    for good in ("0-1-100,1-2-7", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7"):
        path.write_text(base.format(extra=f"  startup_gtid: '{good}'\n"))
        assert load_pipeline(path, environ={}).source.startup_gtid == good


@pytest.mark.parametrize("info, concerns", [
    ("use `db`; ALTER TABLE t RENAME COLUMN a TO b", True),
    ("use `db`; ALTER TABLE other ADD COLUMN c INT", False),
    ("use `other`; ALTER TABLE db.u ADD COLUMN c INT", True),  # named with its database
    ("use `other`; ALTER TABLE u ADD COLUMN c INT", False),  # other.u
    ("use `db`; RENAME TABLE x TO u", True),
    ("use `db`; ALTER TABLE t TRUNCATE PARTITION p0", True),
    ("use `db`; UPDATE t SET a = 1", False),  # not DDL
    ("BEGIN", False),
])
def test_a_listed_event_concerns_any_of_the_tables_it_may_change(info, concerns):
    assert binlog_statements._may_concern(info, {("db", "t"), ("db", "u")}) is concerns
