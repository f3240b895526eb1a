"""Each startup mode starts capture where it says."""
import time

import pytest

from cdc_sql.errors import ConfigError, SourceError
from tests.integration.helpers import checkpoint, run

pytestmark = pytest.mark.integration


def silver_ids(engine, pipeline, name="o"):
    return sorted(r.id for r in engine.read(f"{pipeline.root}/silver/{name}").collect())


@pytest.fixture
def table(mariadb, database):
    mariadb.execute("CREATE TABLE o (id INT PRIMARY KEY, v INT)", db=database)
    return database


def test_earliest_replays_every_binlog_file(mariadb, table, engine, make_pipeline):
    # the shared server's older binlogs (other tests' traffic) would only make this slow
    mariadb.execute("FLUSH BINARY LOGS")
    mariadb.execute(f"PURGE BINARY LOGS TO '{mariadb.query('SHOW MASTER STATUS')[0][0]}'")
    mariadb.execute("INSERT INTO o VALUES (1, 1), (2, 2)", db=table)
    mariadb.execute("FLUSH BINARY LOGS")
    mariadb.execute("INSERT INTO o VALUES (3, 3)", "DELETE FROM o WHERE id = 2", db=table)
    pipeline = make_pipeline(f"- name: o\n  source: {table}.o", startup="earliest")
    run(pipeline, engine)
    assert silver_ids(engine, pipeline) == [1, 3]


def test_offset_starts_at_the_given_position(mariadb, table, engine, make_pipeline):
    mariadb.execute("INSERT INTO o VALUES (1, 1)", db=table)
    file, pos = mariadb.query("SHOW MASTER STATUS")[0][:2]
    mariadb.execute("INSERT INTO o VALUES (2, 2)", db=table)
    pipeline = make_pipeline(f"- name: o\n  source: {table}.o", startup="offset",
                             startup_offset=f"{file}:{pos}")
    run(pipeline, engine)
    assert silver_ids(engine, pipeline) == [2]


def test_offset_outside_the_binlog_is_a_clear_error(table, engine, make_pipeline):
    pipeline = make_pipeline(f"- name: o\n  source: {table}.o", startup="offset",
                             startup_offset="binlog.999999:4")
    with pytest.raises(SourceError, match="binlog file binlog.999999 is not on the server"):
        run(pipeline, engine)
    assert checkpoint(engine, pipeline).capture is None


def test_timestamp_starts_at_the_first_transaction_committed_then(mariadb, table, engine,
                                                                  make_pipeline):
    mariadb.execute("INSERT INTO o VALUES (1, 1)", db=table)
    mariadb.execute("FLUSH BINARY LOGS")
    mariadb.execute("INSERT INTO o VALUES (2, 2)", db=table)
    time.sleep(1.1)
    when = mariadb.query("SELECT UNIX_TIMESTAMP()")[0][0]
    mariadb.execute("INSERT INTO o VALUES (3, 3)", "UPDATE o SET v = 9 WHERE id = 1", db=table)
    mariadb.execute("FLUSH BINARY LOGS")
    mariadb.execute("INSERT INTO o VALUES (4, 4)", db=table)
    pipeline = make_pipeline(f"- name: o\n  source: {table}.o", startup="timestamp",
                             startup_timestamp=when)
    run(pipeline, engine)
    assert silver_ids(engine, pipeline) == [1, 3, 4]  # 1 by its update; 2 came before


def test_startup_keys_are_checked_offline(table, make_pipeline):
    with pytest.raises(ConfigError, match="startup: timestamp needs `startup_timestamp`"):
        make_pipeline(f"- name: o\n  source: {table}.o", startup="timestamp")
    with pytest.raises(ConfigError, match="is only for startup: offset"):
        make_pipeline(f"- name: o\n  source: {table}.o", startup_offset="binlog.000001:4")
    with pytest.raises(ConfigError, match="is not a time"):
        make_pipeline(f"- name: o\n  source: {table}.o", startup="timestamp",
                      startup_timestamp="yesterday")


def test_latest_creates_silver_for_a_table_without_changes(mariadb, table, engine,
                                                           make_pipeline):
    mariadb.execute("CREATE TABLE busy (id INT PRIMARY KEY)", db=table)
    pipeline = make_pipeline(f"- name: o\n  source: {table}.o\n- name: busy\n  source: {table}.busy",
                             startup="latest")
    run(pipeline, engine)
    mariadb.execute("INSERT INTO busy VALUES (1)", db=table)
    run(pipeline, engine)
    assert silver_ids(engine, pipeline, "busy") == [1]
    assert silver_ids(engine, pipeline, "o") == []  # exists, and empty like the source


def test_gtid_starts_after_the_given_transactions(mariadb, table, engine, make_pipeline):
    mariadb.execute("INSERT INTO o VALUES (1, 1)", "INSERT INTO o VALUES (2, 2)", db=table)
    (position,), = mariadb.query("SELECT @@global.gtid_binlog_pos")
    mariadb.execute("INSERT INTO o VALUES (3, 3)", "DELETE FROM o WHERE id = 3",
                    "INSERT INTO o VALUES (4, 4)", "UPDATE o SET v = 7 WHERE id = 1", db=table)
    pipeline = make_pipeline(f"- name: o\n  source: {table}.o", startup="gtid",
                             startup_gtid=position)
    run(pipeline, engine)
    assert silver_ids(engine, pipeline) == [1, 4]  # the changes after it, none before
    assert checkpoint(engine, pipeline).capture.gtid


def test_gtid_of_the_other_flavour_or_not_in_the_binlog_is_a_clear_error(table, engine,
                                                                         make_pipeline):
    uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
    pipeline = make_pipeline(f"- name: o\n  source: {table}.o", startup="gtid",
                             startup_gtid=f"{uuid}:1-5")
    with pytest.raises(SourceError, match="is a MySQL GTID set, but the source is MariaDB"):
        run(pipeline, engine)
    pipeline = make_pipeline(f"- name: o\n  source: {table}.o", startup="gtid",
                             startup_gtid="0-1-999999999")
    with pytest.raises(SourceError, match="startup_gtid `0-1-999999999`: the source cannot send"):
        run(pipeline, engine)
    assert checkpoint(engine, pipeline).capture is None
