"""The binary (compiled), native (connectorx) and pymysql split readers give the same rows, typed
the same."""
from decimal import Decimal

import pyarrow as pa
import pytest

from cdc_sql.errors import SourceError
from cdc_sql.source import mysql
from cdc_sql.source.schema import read_table
from cdc_sql.source.snapshot import native_supported, read_split
from cdc_sql.source.splits import Split

pytestmark = pytest.mark.integration

TYPES = """CREATE TABLE t (
  id BIGINT UNSIGNED PRIMARY KEY, ti TINYINT, tu TINYINT UNSIGNED, si SMALLINT, mi MEDIUMINT,
  i INT UNSIGNED, de DECIMAL(30,10), dw DECIMAL(65,30), f FLOAT, d DOUBLE,
  dt DATE, dtt DATETIME(6), ts TIMESTAMP(3) NULL, tm TIME(2), y YEAR,
  c CHAR(5), v VARCHAR(20), tx TEXT, e ENUM('x','y'), st SET('a','b','c'),
  b BINARY(4), vb VARBINARY(8), bl BLOB, j JSON,
  dn DECIMAL(12,2), dz DECIMAL(18,18), du DECIMAL(18,0) UNSIGNED)"""

ROWS = [
    "(18446744073709551615, -128, 255, -32768, -8388608, 4294967295, "
    "12345678901234567890.0123456789, -12345678901234567890123456789012345.123456789012345678901234567890,"
    " 1.1, 2.2250738585072014e-308, '1000-01-01', '9999-12-31 23:59:59.999999', "
    "'2038-01-19 03:14:07.499', '-838:59:59.99', 1901, 'ab  ', 'x😀y', '', 'y', 'c,a', "
    "'a', '', x'00ff00', '{\"k\": [1, null]}', -9999999999.99, -0.999999999999999999, "
    "999999999999999999)",
    "(0, 127, 0, 32767, 8388607, 0, 0, 0, -0.5, 0, '0000-00-00', '0000-00-00 00:00:00', "
    "'0000-00-00 00:00:00', '00:00:00', 2155, '', '', 'long text', 'x', '', "
    "x'00000000', x'00', '', 'null', 0.01, 0.000000000000000001, 0)",
    "(7, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,"
    " NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
] + [  # partly zero and invalid dates (ALLOW_INVALID_DATES)
    f"({i}, {', '.join(['NULL'] * 9)}, '{date}', '{datetime}', {', '.join(['NULL'] * 15)})"
    for i, date, datetime in [(3, "2020-05-00", "2020-02-31 10:00:00"),
                              (4, "2020-02-30", "2020-00-01 00:00:00")]]


def source_table(make_pipeline, database: str, name: str, **settings):
    """A pipeline of the one table `name` (its pipeline name: the part before any `%`), and
    the table as the source describes it."""
    pipeline = make_pipeline(f"- name: {name.split('%')[0]}\n  source: {database}.{name}",
                             **settings)
    with mysql.cursor(pipeline.source) as cur:
        return pipeline, read_table(cur, database, name)


def read_all(pipeline, table, split, reader):
    read = read_split(pipeline.source, table, split, mariadb=True, reader=reader)
    assert read.reader == reader
    return pa.Table.from_batches(list(read.batches))


def test_readers_agree_on_every_covered_type(mariadb, database, make_pipeline):
    mariadb.execute("SET SESSION sql_mode = 'ALLOW_INVALID_DATES'", TYPES,
                    f"INSERT INTO t VALUES {', '.join(ROWS)}", db=database)
    pipeline, table = source_table(make_pipeline, database, "t")
    assert native_supported(table)
    split = Split(f"{database}.t", 0, None, None)
    slow = read_all(pipeline, table, split, "pymysql").sort_by("id")
    for reader in ("binary", "native"):
        fast = read_all(pipeline, table, split, reader).sort_by("id")
        assert fast.schema == slow.schema, reader
        for name in fast.column_names:
            assert fast[name].to_pylist() == slow[name].to_pylist(), (reader, name)
    binary = read_all(pipeline, table, split, "binary").sort_by("id")
    by_id = {row["id"]: row for row in binary.to_pylist()}
    row = by_id[18446744073709551615]
    assert row["c"] == "ab" and row["v"] == "x😀y"
    assert row["tm"] == "-838:59:59.99" and row["b"] == b"a\x00\x00\x00"
    # DECIMALs of up to 18 digits come to the binary and native readers as unscaled integers
    assert (row["dn"], row["dz"], row["du"]) == (
        Decimal("-9999999999.99"), Decimal("-0.999999999999999999"), Decimal(10**18 - 1))
    zero = by_id[0]
    assert zero["dt"] is None and zero["dtt"] is None and zero["ts"] is None
    assert [(by_id[i]["dt"], by_id[i]["dtt"]) for i in (3, 4)] == [(None, None)] * 2


def test_split_bounds_select_the_right_rows(mariadb, database, make_pipeline):
    mariadb.execute("CREATE TABLE s (k VARCHAR(10) PRIMARY KEY, n INT)",
                    "INSERT INTO s VALUES ('a', 1), ('it''s', 2), ('m', 3), ('z', 4)", db=database)
    pipeline, table = source_table(make_pipeline, database, "s")
    split = Split(f"{database}.s", 1, ("b",), ("m",))
    for reader in ("binary", "native", "pymysql"):
        rows = read_all(pipeline, table, split, reader).to_pylist()
        assert rows == [{"k": "it's", "n": 2, "_cdc_split_id": 1}], reader


def test_one_read_of_consecutive_splits_tags_each_row_with_its_split(mariadb, database,
                                                                     make_pipeline):
    """A group of splits is one query; MySQL itself assigns each row to its split, in the
    key's collation ('B' sorts after 'a' here, unlike in Python)."""
    from cdc_sql.source.snapshot import read_splits

    mariadb.execute("CREATE TABLE s (k VARCHAR(10) PRIMARY KEY, n INT)",
                    "INSERT INTO s VALUES ('a', 1), ('B', 2), ('it''s', 3), ('M', 4), ('z', 5)",
                    db=database)
    pipeline, table = source_table(make_pipeline, database, "s")
    splits = [Split(f"{database}.s", 4, None, ("b",)), Split(f"{database}.s", 5, ("b",), ("m",)),
              Split(f"{database}.s", 6, ("m",), None)]
    for reader in ("binary", "native", "pymysql"):
        read = read_splits(pipeline.source, table, splits, True, reader=reader)
        rows = pa.Table.from_batches(list(read.batches)).to_pylist()
        assert {r["k"]: r["_cdc_split_id"] for r in rows} == \
            {"a": 4, "B": 5, "it's": 5, "M": 6, "z": 6}, reader


@pytest.mark.parametrize("reader", ["binary", "native"])
def test_read_errors_hide_the_password(mariadb, database, make_pipeline, reader):
    pipeline = make_pipeline(f"- name: s\n  source: {database}.nope")
    from cdc_sql.source.schema import Column, SourceTable

    table = SourceTable(database, "nope", (Column("id", "int", "int", 10, 0, None, None),), ("id",))
    with pytest.raises(SourceError) as info:
        read = read_split(pipeline.source, table, Split(f"{database}.nope", 0, None, None), True,
                          reader=reader)
        list(read.batches)  # the binary reader prepares its statement at the first batch
    assert "cdc-secret" not in str(info.value) and "nope" in str(info.value)


@pytest.mark.parametrize("reader, kill", [("binary", "CONNECTION"), ("native", "CONNECTION"),
                                          ("pymysql", "CONNECTION"), ("binary", "QUERY"),
                                          ("pymysql", "QUERY")])
def test_a_read_broken_off_is_a_transient_source_error(mariadb, database, make_pipeline, reader,
                                                       kill):
    """The server restarted, the connection or its query was killed while rows streamed
    (a KILL QUERY ends the result set with an error packet): follow mode waits that out, so
    it must arrive as a transient SourceError, never a driver traceback."""
    mariadb.execute("CREATE TABLE big (id INT PRIMARY KEY, v VARCHAR(200))",
                    "INSERT INTO big SELECT seq, REPEAT('x', 200) FROM seq_1_to_300000",
                    db=database)
    pipeline, table = source_table(make_pipeline, database, "big")
    read = read_split(pipeline.source, table, Split(f"{database}.big", 0, None, None), True,
                      batch_rows=1000, reader=reader)
    with pytest.raises(SourceError) as info:
        next(read.batches)
        for (connection,) in mariadb.query(
                "SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE "
                "'%\\_cdc\\_split\\_id%' AND ID <> CONNECTION_ID()"):
            mariadb.execute(f"KILL {kill} {int(connection)}")
        for _ in read.batches:
            pass
    assert info.value.transient and f"{database}.big" in str(info.value), str(info.value)


def test_a_snapshot_s_batches_hold_as_many_rows_as_the_catalog_s_row_bytes_allow(
        mariadb, database, engine, make_pipeline, monkeypatch):
    """connectorx counts its batches in rows only: a run's reads ask for as many rows a batch
    as BATCH_BYTES holds at the catalog's bytes a row (`rows_a_batch`); silver exact."""
    import dataclasses

    from cdc_sql import snapshot_tasks
    from cdc_sql.source import snapshot
    from cdc_sql.source.splits import table_size
    from tests.integration.helpers import assert_silver_equals, run

    mariadb.execute("CREATE TABLE w (id INT PRIMARY KEY, doc LONGTEXT)",
                    "INSERT INTO w SELECT seq, REPEAT('ab', 2000 * seq) FROM seq_1_to_12",
                    "ANALYZE TABLE w", db=database)
    pipeline, table = source_table(make_pipeline, database, "w", snapshot_reader="native")
    with mysql.cursor(pipeline.source) as cur:
        row_bytes = table_size(cur, table)[1]
    monkeypatch.setattr(snapshot, "BATCH_BYTES", 3 * row_bytes)  # three rows a batch
    asked, sizes, read_splits = [], [], snapshot_tasks.read_splits

    def recorded(source, table, splits, mariadb, batch_rows, **kwargs):
        asked.append(batch_rows)
        read = read_splits(source, table, splits, mariadb, batch_rows, **kwargs)
        return dataclasses.replace(read, batches=(sizes.append(b.num_rows) or b
                                                  for b in read.batches))

    monkeypatch.setattr(snapshot_tasks, "read_splits", recorded)
    run(pipeline, engine)
    assert asked == [3] and [n for n in sizes if n] == [3, 3, 3, 3], (row_bytes, asked, sizes)
    assert_silver_equals(engine, pipeline, "w", mariadb, f"SELECT * FROM {database}.w")


def test_auto_reads_a_small_table_in_the_watermark_s_own_snapshot(mariadb, database, engine,
                                                                  make_pipeline):
    """`snapshot_reader: auto` reads a table of SMALL_READ_ROWS or fewer with pymysql, inside
    the transaction that took the watermark (its rows stand exactly at the watermark), and
    larger reads (of a group of splits) with the binary reader, in theirs too; silver equals
    the source either way."""
    from cdc_sql.source.snapshot import SMALL_READ_ROWS
    from tests.integration.helpers import assert_silver_equals, checkpoint, run

    mariadb.execute("CREATE TABLE small (id INT PRIMARY KEY, v VARCHAR(20))",
                    "INSERT INTO small SELECT seq, CONCAT('v', seq) FROM seq_1_to_10",
                    "CREATE TABLE large (id INT PRIMARY KEY, v VARCHAR(20))",
                    f"INSERT INTO large SELECT seq, CONCAT('v', seq) FROM "
                    f"seq_1_to_{4 * SMALL_READ_ROWS}", db=database)  # groups past it
    pipeline = make_pipeline(f"- name: small\n  source: {database}.small\n"
                             f"- name: large\n  source: {database}.large")
    run(pipeline, engine)
    state = checkpoint(engine, pipeline)
    small, = state.splits(f"{database}.small")
    assert small.reader == "pymysql" and small.read_end == small.watermark
    large = state.splits(f"{database}.large")
    assert {s.reader for s in large} == {"binary"}
    assert all(s.read_end == s.watermark for s in large)
    for name in ("small", "large"):
        assert_silver_equals(engine, pipeline, name, mariadb, f"SELECT * FROM {database}.{name}")


def test_pymysql_batches_of_long_values_end_near_batch_bytes(mariadb, database, make_pipeline,
                                                             monkeypatch):
    """pymysql's read of long values ends a batch once its values pass BATCH_BYTES, however
    few rows it holds (forty rows of 14 MB are not one batch); every row read once, in order."""
    from cdc_sql.source import snapshot

    mariadb.execute("CREATE TABLE w (id INT PRIMARY KEY, doc LONGTEXT, n INT)",
                    "INSERT INTO w SELECT seq, REPEAT('ab', 500 * seq), seq FROM seq_1_to_12",
                    db=database)
    pipeline, table = source_table(make_pipeline, database, "w")
    monkeypatch.setattr(snapshot, "BATCH_BYTES", 5_000)
    read = read_split(pipeline.source, table, Split(table.qualified, 0, None, None),
                      mariadb=True, reader="pymysql")
    batches = [batch.to_pylist() for batch in read.batches]
    assert [[row["id"] for row in batch] for batch in batches] == \
        [[1, 2, 3], [4, 5]] + [[n] for n in range(6, 13)]  # 1,000 characters a row more
    assert all(row["doc"] == "ab" * 500 * row["id"] for batch in batches for row in batch)


@pytest.mark.parametrize("reader", ["binary", "native", "pymysql"])
def test_a_write_that_fails_leaves_no_read_open(mariadb, database, make_pipeline, reader):
    """A split group whose bronze write fails ends its read at once: a read left open holds a
    consistent snapshot and a metadata lock on the table (DROP and ALTER wait behind it) until
    its connection is collected."""
    from cdc_sql.snapshot_tasks import land_splits
    from cdc_sql.source.splits import SplitGroup

    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))",
                    "INSERT INTO t SELECT seq, CONCAT('v', seq) FROM seq_1_to_10", db=database)
    pipeline, table = source_table(make_pipeline, database, "t", snapshot_reader=reader)

    def write(table, batches, *_):
        raise OSError("the lake is gone")

    with pytest.raises(OSError) as failed:
        land_splits(pipeline.source, SplitGroup(table, [Split(table.qualified, 0, None, None)]),
                    True, write)
    assert failed.value  # the traceback (and the read's frames) still held here
    left = mariadb.query("SELECT ID FROM information_schema.PROCESSLIST WHERE USER = %s AND "
                         "ID <> CONNECTION_ID() AND COMMAND <> 'Binlog Dump'",
                         (pipeline.source.user,))
    for (connection,) in left:  # else the database's DROP would wait for them
        mariadb.execute(f"KILL {int(connection)}")
    assert left == []


def test_names_holding_percent_signs_are_read_by_both_readers(mariadb, database, make_pipeline):
    """pymysql binds values into `%s`: a `%` in a table or column name is doubled, with bound
    bounds (splits), without (a whole table) and in a range re-read's predicate, and where
    splits are planned by walking the key's index."""
    from cdc_sql.source.snapshot import read_splits
    from cdc_sql.source.splits import plan_splits

    mariadb.execute("CREATE TABLE `p%s%cent` (`k%s` INT PRIMARY KEY, `n%d` INT)",
                    "INSERT INTO `p%s%cent` VALUES (1, 10), (5, 50), (9, 90)", db=database)
    pipeline, table = source_table(make_pipeline, database, "p%s%cent")
    name = f"{database}.p%s%cent"
    for splits in ([Split(name, 0, None, None)],
                   [Split(name, 1, None, (5,)), Split(name, 2, (5,), None)]):
        for reader in ("binary", "native", "pymysql"):
            read = read_splits(pipeline.source, table, splits, True, reader=reader)
            rows = pa.Table.from_batches(list(read.batches)).to_pylist()
            assert sorted((r["k%s"], r["n%d"]) for r in rows) == [(1, 10), (5, 50), (9, 90)]
    ranged = [Split(name, 3, None, None, "`k%s` BETWEEN 1 AND 5")]  # a range re-read's
    for reader in ("binary", "native", "pymysql"):
        read = read_splits(pipeline.source, table, ranged, True, reader=reader)
        assert sorted(pa.Table.from_batches(list(read.batches))["k%s"].to_pylist()) == [1, 5]
    with mysql.cursor(pipeline.source) as cur:  # sparse keys: split by walking the index
        assert [s.upper for s in plan_splits(cur, table, chunk_size=1)] == [(5,), (9,), None]
