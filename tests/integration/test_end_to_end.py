"""One table end to end against a real MariaDB: snapshot, binlog, silver by MERGE."""
import os
import subprocess
import sys

import pytest

from cdc_sql.lake import lake as lake_module
from cdc_sql.ops.verify import compare_table
from tests.integration.helpers import assert_silver_equals, checkpoint, run

pytestmark = pytest.mark.integration

ORDERS = """
CREATE TABLE {db}.orders (
  id INT PRIMARY KEY, customer VARCHAR(40) NOT NULL, amount DECIMAL(10,2),
  placed DATETIME(3), paid TIMESTAMP(6) NULL, note TEXT)
"""


def seed(mariadb, db, n=2500):
    mariadb.execute(ORDERS.format(db=db))
    with mariadb.connect(db) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO orders VALUES (%s, %s, %s, '2024-03-01 10:00:00.5', "
                        "'2024-03-02 00:00:01.000001', %s)",
                        [(i, f"c{i % 17}", i * 1.25, None if i % 3 else f"n{i}")
                         for i in range(1, n + 1)])


@pytest.fixture(params=["delta-rs", "spark", "reads-here"])
def writer_engine(request, engine, monkeypatch):
    """The engine with each implementation of the table operations (remote engines use
    Spark SQL for their changes, and delta-rs for reads once it finds their lake: "reads-here",
    a Delta Spark engine's only; lake/tables.py)."""
    if request.param == "reads-here" and not engine.describes_history:
        pytest.skip("Sail's tables are read through Spark SQL when it is remote")
    monkeypatch.setattr("cdc_sql.lake.tables.choose", lambda mode, path: request.param)
    found = []
    monkeypatch.setattr("cdc_sql.lake.lake.same_lake",
                        lambda *ids, same=lake_module.same_lake: found.append(same(*ids)) or
                        found[-1])
    yield engine
    assert (True in found) is (request.param == "reads-here")  # delta-rs read the engine's lake


def test_snapshot_then_changes_match_the_source(mariadb, database, writer_engine, make_pipeline):
    engine = writer_engine
    seed(mariadb, database)
    pipeline = make_pipeline(f"- name: orders\n  source: {database}.orders")
    run(pipeline, engine)
    select = f"SELECT * FROM {database}.orders"
    assert_silver_equals(engine, pipeline, "orders", mariadb, select)

    mariadb.execute(
        "INSERT INTO orders VALUES (5001, 'new', 9.99, NULL, NULL, 'x'), (5002, 'n2', 1, NULL, NULL, NULL)",
        "UPDATE orders SET amount = amount * 2, note = 'doubled' WHERE id % 50 = 0",
        "UPDATE orders SET id = 9000 WHERE id = 7",            # key change: delete 7, insert 9000
        "DELETE FROM orders WHERE id % 77 = 0",
        "START TRANSACTION", "INSERT INTO orders VALUES (6000, 'rolled', 0, NULL, NULL, NULL)",
        "ROLLBACK",
        "UPDATE orders SET customer = 'again' WHERE id = 5001",
        "DELETE FROM orders WHERE id = 5002",
        db=database)
    summary = run(pipeline, engine)
    assert_silver_equals(engine, pipeline, "orders", mariadb, select)
    assert compare_table(engine, pipeline, pipeline.tables[0]) == ""
    changed = 2500 // 50
    deleted = len([i for i in range(1, 2501) if i % 77 == 0])
    # inserts 2 + updates + key change (2 events) + deletes + 1 update + 1 delete
    assert summary["captured_changes"] == 2 + changed + 2 + deleted + 2


def test_second_run_reads_only_new_changes(mariadb, database, engine, make_pipeline):
    seed(mariadb, database, n=3000)
    pipeline = make_pipeline(f"- name: orders\n  source: {database}.orders")
    run(pipeline, engine)
    splits_before = checkpoint(engine, pipeline).all_splits()
    assert len(splits_before) == 3  # chunk_size 1000
    with mariadb.connect(database) as conn, conn.cursor() as cur:
        cur.executemany("UPDATE orders SET amount = %s WHERE id = %s",
                        [(i, i) for i in range(1, 1001)])
    summary = run(pipeline, engine)
    assert summary["captured_changes"] == 1000
    assert checkpoint(engine, pipeline).all_splits() == splits_before
    assert run(pipeline, engine)["captured_changes"] == 0
    assert_silver_equals(engine, pipeline, "orders", mariadb, f"SELECT * FROM {database}.orders")


def test_projection_where_moves_rows_in_and_out(mariadb, database, engine, make_pipeline):
    seed(mariadb, database, n=300)
    pipeline = make_pipeline(f"""
        - name: big
          source: {database}.orders
          projection: SELECT id, UPPER(customer) AS who, amount FROM orders WHERE amount >= 100
    """)
    run(pipeline, engine)
    mariadb.execute("UPDATE orders SET amount = 1 WHERE id BETWEEN 100 AND 110",     # leave
                    "UPDATE orders SET amount = 500 WHERE id BETWEEN 1 AND 5",       # enter
                    "UPDATE orders SET customer = 'zed' WHERE id = 200", db=database)
    run(pipeline, engine)
    assert_silver_equals(engine, pipeline, "big", mariadb,
                         f"SELECT id, UPPER(customer), amount FROM {database}.orders "
                         f"WHERE amount >= 100")
    assert compare_table(engine, pipeline, pipeline.tables[0]) == ""


def test_binlog_rotation_between_runs(mariadb, database, engine, make_pipeline):
    seed(mariadb, database, n=50)
    pipeline = make_pipeline(f"- name: orders\n  source: {database}.orders")
    run(pipeline, engine)
    mariadb.execute("UPDATE orders SET amount = 1 WHERE id < 10", db=database)
    mariadb.execute("FLUSH BINARY LOGS")
    mariadb.execute("DELETE FROM orders WHERE id < 5", db=database)
    mariadb.execute("FLUSH BINARY LOGS")
    run(pipeline, engine)
    assert_silver_equals(engine, pipeline, "orders", mariadb, f"SELECT * FROM {database}.orders")


def test_startup_latest_captures_only_new_changes(mariadb, database, engine, make_pipeline):
    seed(mariadb, database, n=20)
    pipeline = make_pipeline(f"- name: orders\n  source: {database}.orders", startup="latest")
    run(pipeline, engine)
    mariadb.execute("INSERT INTO orders VALUES (100, 'late', 1, NULL, NULL, NULL)",
                    "UPDATE orders SET note = 'seen' WHERE id = 3", db=database)
    run(pipeline, engine)
    assert_silver_equals(engine, pipeline, "orders", mariadb,
                         f"SELECT * FROM {database}.orders WHERE id IN (3, 100)")


def test_snapshot_only_reads_the_table_once(mariadb, database, engine, make_pipeline):
    seed(mariadb, database, n=40)
    pipeline = make_pipeline(f"- name: orders\n  source: {database}.orders",
                             startup="snapshot-only")
    run(pipeline, engine)
    assert_silver_equals(engine, pipeline, "orders", mariadb, f"SELECT * FROM {database}.orders")
    assert checkpoint(engine, pipeline).capture is None


def test_table_without_primary_key_uses_unique_not_null_key(mariadb, database, engine,
                                                            make_pipeline):
    mariadb.execute("CREATE TABLE tags (code VARCHAR(10) NOT NULL, label TEXT, UNIQUE KEY (code))",
                    "INSERT INTO tags VALUES ('a', 'A'), ('b', 'B')", db=database)
    pipeline = make_pipeline(f"- name: tags\n  source: {database}.tags")
    for command in ("validate", "plan"):
        said = subprocess.run([sys.executable, "-m", "cdc_sql.cli", command, pipeline.file],
                              env={**os.environ, "TEST_MYSQL_PASSWORD": "cdc-secret"},
                              capture_output=True, text=True, timeout=120)
        assert "code (the unique index `code` on NOT NULL columns: the table has no primary " \
               "key)" in said.stdout, said.stdout + said.stderr
    run(pipeline, engine)
    mariadb.execute("UPDATE tags SET label = 'bee' WHERE code = 'b'",
                    "INSERT INTO tags VALUES ('c', NULL)", db=database)
    run(pipeline, engine)
    assert_silver_equals(engine, pipeline, "tags", mariadb, f"SELECT * FROM {database}.tags",
                         key="code")


def test_declared_key_with_nulls_matches_null_to_null(mariadb, database, engine, make_pipeline):
    """A declared `primary_key:` column may hold NULL (at most one row per NULL key, as the user
    promises); its row must still be updated and deleted, not duplicated."""
    mariadb.execute("CREATE TABLE notes (k INT NULL, body TEXT)",
                    "INSERT INTO notes VALUES (1, 'one'), (NULL, 'none')", db=database)
    pipeline = make_pipeline(f"- name: notes\n  source: {database}.notes\n  primary_key: [k]")
    run(pipeline, engine)
    mariadb.execute("UPDATE notes SET body = 'still none' WHERE k IS NULL", db=database)
    run(pipeline, engine)
    assert_silver_equals(engine, pipeline, "notes", mariadb, f"SELECT * FROM {database}.notes",
                         key="k")
    mariadb.execute("DELETE FROM notes WHERE k IS NULL", db=database)
    run(pipeline, engine)
    assert_silver_equals(engine, pipeline, "notes", mariadb, f"SELECT * FROM {database}.notes",
                         key="k")
