"""Changes that bypass row events, and binlog events of other kinds, on captured tables, each
with a writer running: silver ends equal to MariaDB, row by row (docs/types.md, "Schema
changes").

- DML written as a statement (binlog_format STATEMENT or MIXED, LOAD DATA): the table is read
  again by itself (a re-snapshot, one line saying why); other tables are left alone.
- Partition maintenance: TRUNCATE PARTITION of a RANGE table removes the partition's rows from
  silver exactly (no re-snapshot); EXCHANGE and DROP PARTITION (whose range the run cannot know
  any more) read the table again; REORGANIZE, REBUILD and COALESCE change no row.
- XA: a prepared transaction reaches silver at its XA COMMIT only, never after XA ROLLBACK,
  across runs and a killed run; `status` lists what is held back.
- MariaDB's compressed binlog events (log_bin_compress=ON) are decoded.
- System-versioned tables are captured: silver holds their current rows.
"""
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager

import pytest

from cdc_sql.errors import SourceError
from tests.integration.helpers import (assert_silver_equals, checkpoint, history_path,
                                       resnapshot_and_run, run)
from tests.integration.writer import RandomWriter

pytestmark = pytest.mark.integration
ENV = {**os.environ, "TEST_MYSQL_PASSWORD": "cdc-secret"}
RANGES = (" PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (100), PARTITION p1 VALUES "
          "LESS THAN (200), PARTITION p2 VALUES LESS THAN (300), PARTITION p3 VALUES LESS THAN "
          "MAXVALUE)")


def items(mariadb, database: str, layout: str = "", name: str = "items", rows: int = 400,
          options: str = "") -> None:
    mariadb.execute(f"CREATE TABLE {name} (id INT PRIMARY KEY, v VARCHAR(40), n INT){options}"
                    f"{layout}",
                    f"INSERT INTO {name} (id, v, n) SELECT seq, CONCAT('v', seq), seq "
                    f"FROM seq_1_to_{rows}", db=database)


@contextmanager
def writing(mariadb, database: str, table: str = "items", keys: int = 250, seed: int = 7):
    """A writer on keys 1..`keys` for the duration (about 100 transactions a second), writing
    before the body begins (a short body on a loaded machine had ended before its first
    commit)."""
    writer = RandomWriter(mariadb, database, table, keys, seed=seed, rate=100)
    writer.start()
    deadline = time.monotonic() + 60
    while writer.committed == 0 and writer.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield writer
    finally:
        writer.stop()
    assert writer.committed > 0


def requested(engine, pipeline) -> dict[str, str]:
    return {e.source_table: e.reason for e in checkpoint(engine, pipeline).resnapshots()}


def test_statement_dml_reads_its_table_again(mariadb, database, engine, make_pipeline, caplog):
    items(mariadb, database)
    items(mariadb, database, name="other", rows=20)
    pipeline = make_pipeline(f"""
        - name: items
          source: {database}.items
        - name: other
          source: {database}.other""")
    run(pipeline, engine)
    path = f"/tmp/cdc-sql-load-{database}.csv"
    with open(path, "w") as out:
        out.write("".join(f"{i},loaded,{i}\n" for i in range(1001, 1011)))
    try:
        with writing(mariadb, database):
            with mariadb.connect(database) as conn, conn.cursor() as cur:
                cur.execute("SET SESSION binlog_format = 'STATEMENT'")
                cur.execute("UPDATE items SET v = 'statement' WHERE id BETWEEN 300 AND 349")
                cur.execute("DELETE FROM items WHERE id BETWEEN 350 AND 359")
                cur.execute(f"LOAD DATA INFILE '{path}' INTO TABLE items FIELDS TERMINATED BY "
                            f"',' (id, v, n)")
                cur.execute("SET SESSION binlog_format = 'MIXED'")
                cur.execute("UPDATE items SET n = n + 1000 WHERE id BETWEEN 360 AND 369")
            run(pipeline, engine)
    finally:
        os.unlink(path)
    run(pipeline, engine)
    for name in ("items", "other"):
        assert_silver_equals(engine, pipeline, name, mariadb,
                             f"SELECT * FROM {database}.{name}")
    asked = requested(engine, pipeline)
    assert set(asked) == {f"{database}.items"}
    assert "written as a statement" in asked[f"{database}.items"]
    assert any("written as a statement" in r.getMessage() and "read again" in r.getMessage()
               for r in caplog.records)


def test_statement_dml_stops_a_table_whose_policy_says_stop(mariadb, database, engine,
                                                            make_pipeline):
    items(mariadb, database, rows=20)
    pipeline = make_pipeline(f"""
        - name: items
          source: {database}.items
          on_schema_change: stop""")
    run(pipeline, engine)
    with mariadb.connect(database) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION binlog_format = 'STATEMENT'")
        cur.execute("DELETE FROM items WHERE id = 3")
    with pytest.raises(SourceError, match=rf"{database}\.items at binlog .*: DELETE written as "
                                          r"a statement.*on_schema_change: stop"):
        run(pipeline, engine)


def test_truncate_partition_is_applied_exactly(mariadb, database, engine, make_pipeline):
    items(mariadb, database, RANGES)
    pipeline = make_pipeline(f"- name: items\n  source: {database}.items\n  history: true")
    run(pipeline, engine)
    with writing(mariadb, database):
        mariadb.execute("ALTER TABLE items TRUNCATE PARTITION p0, p2", db=database)
        run(pipeline, engine)
    run(pipeline, engine)
    assert_silver_equals(engine, pipeline, "items", mariadb, f"SELECT * FROM {database}.items")
    assert not requested(engine, pipeline)  # applied from the binlog, no re-snapshot


def test_partition_changes_that_swap_rows_read_the_table_again(mariadb, database, engine,
                                                               make_pipeline):
    items(mariadb, database, RANGES)
    items(mariadb, database, name="hashed", rows=50, layout=" PARTITION BY HASH (id) "
                                                            "PARTITIONS 4")
    mariadb.execute("CREATE TABLE swap (id INT PRIMARY KEY, v VARCHAR(40), n INT)",
                    "INSERT INTO swap SELECT seq, 'swapped', -seq FROM seq_100_to_149",
                    db=database)
    pipeline = make_pipeline(f"""
        - name: items
          source: {database}.items
        - name: hashed
          source: {database}.hashed""")
    run(pipeline, engine)
    with writing(mariadb, database):
        mariadb.execute("ALTER TABLE hashed COALESCE PARTITION 2",
                        "ALTER TABLE items REORGANIZE PARTITION p0 INTO (PARTITION p0a VALUES "
                        "LESS THAN (50), PARTITION p0b VALUES LESS THAN (100))",
                        "ALTER TABLE items REBUILD PARTITION p2", db=database)
        run(pipeline, engine)
        assert not requested(engine, pipeline)  # no row changed
        mariadb.execute("ALTER TABLE items EXCHANGE PARTITION p1 WITH TABLE swap",
                        "ALTER TABLE items DROP PARTITION p3", db=database)
        run(pipeline, engine)
    run(pipeline, engine)
    for name in ("items", "hashed"):
        assert_silver_equals(engine, pipeline, name, mariadb, f"SELECT * FROM {database}.{name}")
    asked = requested(engine, pipeline)
    assert set(asked) == {f"{database}.items"} and "PARTITION changes rows without row " \
        "events" in asked[f"{database}.items"]


def cli(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cdc_sql.cli", *args], env=env or ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)


@pytest.fixture
def xa(mariadb, database):
    """Connections for XA transactions; whatever a failed test left prepared is rolled back
    (it would hold its rows' locks, and the database could not be dropped)."""
    opened = []

    def connect():
        opened.append(mariadb.connect(database))
        return opened[-1]

    yield connect
    for conn in opened:
        conn.close()
    for fmt, gtrid, _, data in mariadb.query("XA RECOVER"):
        data = data if isinstance(data, bytes) else str(data).encode()
        mariadb.execute(f"XA ROLLBACK X'{data[:gtrid].hex()}', X'{data[gtrid:].hex()}', {fmt}")


def prepare(conn, xid: str, *statements: str) -> None:
    with conn.cursor() as cur:
        for sql in (f"XA START {xid}", *statements, f"XA END {xid}", f"XA PREPARE {xid}"):
            cur.execute(sql)


def test_xa_transactions_reach_silver_at_their_commit_only(mariadb, database, engine,
                                                           make_pipeline, xa):
    items(mariadb, database, rows=600)
    pipeline = make_pipeline(f"- name: items\n  source: {database}.items\n  history: true")
    run(pipeline, engine)
    rolled, committed = xa(), xa()
    with writing(mariadb, database) as writer:  # keys 1..250: none the XA transactions lock
        # ranges apart: each locks the row after its range too
        prepare(rolled, "'gone'", "UPDATE items SET v = 'rolled back' WHERE id BETWEEN 501 AND "
                                  "520", "DELETE FROM items WHERE id BETWEEN 560 AND 564")
        prepare(committed, "'kept', 'b', 7", "UPDATE items SET v = 'xa', n = -n WHERE id "
                                             "BETWEEN 531 AND 540",
                "DELETE FROM items WHERE id IN (571, 572)")
        run(pipeline, engine)  # prepared: nothing of them in silver
        assert_silver_equals(engine, pipeline, "items", mariadb,
                             f"SELECT * FROM {database}.items WHERE id > 500",
                             where="id > 500")
        held = checkpoint(engine, pipeline).capture.held
        assert set(held) == {"X'676f6e65',X'',1", "X'6b657074',X'62',7"}
        status = subprocess.run([sys.executable, "-m", "cdc_sql.cli", "status", pipeline.file],
                                env=ENV, capture_output=True, text=True, timeout=120)
        assert "XA transaction X'6b657074',X'62',7: prepared at" in status.stdout, status.stderr
        # a run killed with the prepared transactions held, between bronze and state
        mariadb.execute("UPDATE items SET v = 'later' WHERE id = 600", db=database)
        killed = cli("run", pipeline.file, "--until-caught-up",
                     env={**ENV, "CDC_SQL_KILL_AT": "bronze.appended"})
        assert killed.wait(timeout=300) == -signal.SIGKILL, killed.stderr.read().decode()[-2000:]
        with rolled.cursor() as cur:
            cur.execute("XA ROLLBACK 'gone'")
        run(pipeline, engine)
        assert set(checkpoint(engine, pipeline).capture.held) == {"X'6b657074',X'62',7"}
        with committed.cursor() as cur:
            cur.execute("XA COMMIT 'kept', 'b', 7")
        run(pipeline, engine)
    run(pipeline, engine)
    assert writer.committed > 0
    assert_silver_equals(engine, pipeline, "items", mariadb, f"SELECT * FROM {database}.items")
    assert not checkpoint(engine, pipeline).capture.held
    history = engine.read(history_path(pipeline, "items"))
    assert history.where("v = 'rolled back'").count() == 0
    assert history.where("v = 'xa' AND _cdc_current").count() == 10


def test_compressed_binlog_events_are_decoded(mariadb, database, engine, make_pipeline):
    items(mariadb, database, rows=100)
    pipeline = make_pipeline(f"- name: items\n  source: {database}.items")
    run(pipeline, engine)
    (length,), = mariadb.query("SELECT @@global.log_bin_compress_min_len")
    (file, pos, *_), = mariadb.query("SHOW MASTER STATUS")
    mariadb.execute("SET GLOBAL log_bin_compress_min_len = 10", "SET GLOBAL log_bin_compress = ON")
    try:
        with writing(mariadb, database, keys=150):
            mariadb.execute("ALTER TABLE items ADD COLUMN note VARCHAR(200) NULL",
                            "UPDATE items SET note = REPEAT('compressed ', 10) WHERE id < 50",
                            db=database)
            run(pipeline, engine)
    finally:
        mariadb.execute("SET GLOBAL log_bin_compress = OFF",
                        f"SET GLOBAL log_bin_compress_min_len = {length}")
    run(pipeline, engine)
    assert_silver_equals(engine, pipeline, "items", mariadb, f"SELECT * FROM {database}.items")
    kinds = {row[2] for row in mariadb.query(f"SHOW BINLOG EVENTS IN '{file}' FROM {pos}")}
    assert {"Query_compressed", "Update_rows_compressed_v1"} <= kinds, kinds


def test_system_versioned_tables_give_their_current_rows(mariadb, database, engine,
                                                         make_pipeline):
    items(mariadb, database, options=" WITH SYSTEM VERSIONING", rows=200)
    mariadb.execute("CREATE TABLE declared (id INT PRIMARY KEY, v VARCHAR(40), n INT, "
                    "since TIMESTAMP(6) GENERATED ALWAYS AS ROW START INVISIBLE, "
                    "until TIMESTAMP(6) GENERATED ALWAYS AS ROW END INVISIBLE, "
                    "PERIOD FOR SYSTEM_TIME(since, until)) WITH SYSTEM VERSIONING",
                    "INSERT INTO declared (id, v, n) SELECT seq, 'd', seq FROM seq_1_to_100",
                    db=database)
    pipeline = make_pipeline(f"""
        - name: items
          source: {database}.items
          history: true
        - name: declared
          source: {database}.declared""")
    run(pipeline, engine)
    with writing(mariadb, database, keys=250), writing(mariadb, database, "declared", 120, 3):
        run(pipeline, engine)
    run(pipeline, engine)
    assert_silver_equals(engine, pipeline, "items", mariadb, f"SELECT * FROM {database}.items")
    assert_silver_equals(engine, pipeline, "declared", mariadb,
                         f"SELECT id, v, n, since, until FROM {database}.declared")
    from cdc_sql.source import mysql
    from cdc_sql.source.schema import read_table, read_tables

    with mysql.cursor(pipeline.source) as cur:  # the table type listed, or looked up
        listed = [t for ts in read_tables(cur, pipeline.tables) for t in ts]
        assert listed == [read_table(cur, t.db, t.name, t.key) for t in listed]
        assert [(t.row_end, t.row_end_hidden) for t in listed] == \
            [("row_end", True), ("until", False)]


def test_on_schema_change_policies(mariadb, database, engine, make_pipeline):
    """resnapshot: an incompatible MODIFY reads the table again by itself (a widening one
    evolves); ignore_new_columns: an added column stays out of silver; stop: any DDL stops the
    run, and a re-snapshot goes on past it. History stays one current version per row."""
    for name in ("again", "narrow", "halted"):
        items(mariadb, database, name=name, rows=150)
    pipeline = make_pipeline(f"""
        - name: again
          source: {database}.again
          history: true
          on_schema_change: resnapshot
        - name: narrow
          source: {database}.narrow
          history: true
          on_schema_change: ignore_new_columns
        - name: halted
          source: {database}.halted
          on_schema_change: stop""")
    run(pipeline, engine)
    with writing(mariadb, database, "again", 150), writing(mariadb, database, "narrow", 150, 5):
        mariadb.execute("ALTER TABLE again MODIFY n BIGINT",  # a widening: evolved
                        "UPDATE again SET n = 5000000000 WHERE id = 149",
                        "ALTER TABLE narrow ADD COLUMN extra INT DEFAULT 7",
                        "UPDATE narrow SET extra = 8 WHERE id = 149", db=database)
        run(pipeline, engine)
        assert not requested(engine, pipeline)
        mariadb.execute("ALTER TABLE again MODIFY n VARCHAR(30)",  # LONG to STRING: read again
                        "UPDATE again SET n = 'text' WHERE id = 150", db=database)
        run(pipeline, engine)
    run(pipeline, engine)
    assert set(requested(engine, pipeline)) == {f"{database}.again"}
    assert "column `n` changed type from int64 to string" in requested(engine, pipeline)[f"{database}.again"]
    assert_silver_equals(engine, pipeline, "again", mariadb, f"SELECT * FROM {database}.again")
    assert_silver_equals(engine, pipeline, "narrow", mariadb,
                         f"SELECT id, v, n FROM {database}.narrow")
    for name in ("again", "narrow"):
        history = engine.read(history_path(pipeline, name))
        assert "extra" not in history.columns
        current = history.where("_cdc_current")
        assert current.count() == current.select("id").distinct().count() == \
            mariadb.query(f"SELECT COUNT(*) FROM {database}.{name}")[0][0]
    mariadb.execute("ALTER TABLE halted ADD COLUMN later INT", db=database)
    with pytest.raises(SourceError, match=rf"{database}\.halted at binlog .*: a DDL statement "
                                          r"that may change it \(ALTER TABLE \.\.\.\)\. Its "
                                          r"pipeline table has on_schema_change: stop"):
        run(pipeline, engine)
    resnapshot_and_run(engine, pipeline, "halted", mariadb, f"SELECT * FROM {database}.halted")


def test_an_alter_that_fills_or_converts_values_reads_the_table_again(mariadb, database, engine,
                                                                      make_pipeline):
    """MariaDB fills a column added with a DEFAULT (or NOT NULL's implicit one) into every row
    there, and converts values a MODIFY under a sql_mode without STRICT cuts, all without row
    events: those tables are read again by themselves. A column added without a value and a
    MODIFY under the strict default evolve silver, as before."""
    for name in ("filled", "plain", "loose"):
        items(mariadb, database, name=name, rows=300)
    pipeline = make_pipeline("".join(f"""
        - name: {name}
          source: {database}.{name}
          history: true""" for name in ("filled", "plain", "loose")))
    run(pipeline, engine)
    with writing(mariadb, database, "filled"):
        mariadb.execute("ALTER TABLE filled ADD COLUMN flag INT NOT NULL DEFAULT 7, "
                        "ADD COLUMN code CHAR(2) NOT NULL",
                        "UPDATE filled SET flag = 8 WHERE id = 3",
                        "ALTER TABLE plain ADD COLUMN note VARCHAR(10) NULL",
                        "ALTER TABLE plain MODIFY v VARCHAR(60)",
                        "UPDATE plain SET note = 'x' WHERE id = 4", db=database)
        with mariadb.connect(database) as conn, conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = ''")
            cur.execute("ALTER TABLE loose MODIFY v VARCHAR(3)")  # values cut to 3 characters
        run(pipeline, engine)
    run(pipeline, engine)
    asked = requested(engine, pipeline)
    assert set(asked) == {f"{database}.filled", f"{database}.loose"}
    assert "column `flag` added with a DEFAULT" in asked[f"{database}.filled"]
    assert "column `code` added with NOT NULL's implicit default" in asked[f"{database}.filled"]
    assert "without STRICT_TRANS_TABLES" in asked[f"{database}.loose"]
    for name in ("filled", "plain", "loose"):
        assert_silver_equals(engine, pipeline, name, mariadb, f"SELECT * FROM {database}.{name}")
