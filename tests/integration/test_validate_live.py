"""`cdc-sql validate` against a live source: tables, keys, columns, binlog settings."""
import re

import pytest

from cdc_sql.cli import main
from cdc_sql.errors import SourceError
from cdc_sql.source.preflight import inspect_source

pytestmark = pytest.mark.integration


@pytest.fixture
def orders(mariadb, database):
    mariadb.execute("CREATE TABLE orders (id INT PRIMARY KEY, amount INT, note TEXT)",
                    "CREATE TABLE nokey (a INT, b INT)", db=database)
    return database


def test_valid_pipeline(orders, make_pipeline, capsys):
    pipeline = make_pipeline(f"- name: o\n  source: {orders}.orders\n"
                             f"  projection: SELECT id, amount FROM orders")
    view = inspect_source(pipeline)
    assert view.mariadb and view.tables[0][0].key == ("id",)
    import os
    os.environ["TEST_MYSQL_PASSWORD"] = "cdc-secret"
    assert main(["validate", pipeline.file]) == 0
    assert "valid" in capsys.readouterr().out


def test_a_declared_key_for_a_table_without_one(orders, make_pipeline):
    declared = make_pipeline(f"- name: o\n  source: {orders}.nokey\n  primary_key: [a]")
    assert inspect_source(declared).tables[0][0].key == ("a",)


def test_binlog_row_image_must_be_full(orders, make_pipeline, mariadb):
    pipeline = make_pipeline(f"- name: o\n  source: {orders}.orders")
    mariadb.execute("SET GLOBAL binlog_row_image = 'MINIMAL'")
    try:
        with pytest.raises(SourceError, match="binlog_row_image=MINIMAL \\(needs FULL\\)"):
            inspect_source(pipeline)
    finally:
        mariadb.execute("SET GLOBAL binlog_row_image = 'FULL'")


def test_retention_shorter_than_the_snapshot_warns_and_grants_are_listed(
        orders, make_pipeline, mariadb, capsys, monkeypatch):
    from cdc_sql.source import preflight

    mariadb.execute("INSERT INTO orders SELECT seq, seq, 'n' FROM seq_1_to_30000", db=orders)
    mariadb.execute("ANALYZE TABLE orders", db=orders)
    pipeline = make_pipeline(f"- name: o\n  source: {orders}.orders")
    monkeypatch.setenv("TEST_MYSQL_PASSWORD", "cdc-secret")
    monkeypatch.setattr(preflight, "sample_rate", lambda cur, table: 100.0)  # a slow source
    mariadb.execute("SET GLOBAL binlog_expire_logs_seconds = 1")
    try:
        assert main(["validate", pipeline.file]) == 0
    finally:
        mariadb.execute("SET GLOBAL binlog_expire_logs_seconds = 0")
    captured = capsys.readouterr()
    assert "warning: binlog retention is 1s (binlog_expire_logs_seconds=1)" in captured.err
    assert re.search(r"about (2\d|3\d),\d{3} rows is estimated at 2m\d\ds \(2 readers at 100 "
                     r"rows/s each", captured.err), captured.err
    assert "Keep binlogs at least 1h0" in captured.err
    assert f"GRANT SELECT ON `{orders}`.* TO 'cdc'@'%';" in captured.out
    assert "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'cdc'@'%';" in captured.out
    assert main(["validate", pipeline.file]) == 0
    assert "retention" not in capsys.readouterr().err  # never purged by age: nothing to say


def test_cascading_foreign_keys_silver_cannot_apply_are_named(mariadb, database, make_pipeline):
    from cdc_sql.lake.silver.plan import cascade_warnings, silver_plans

    mariadb.execute("CREATE TABLE parent (id INT PRIMARY KEY)",
                    "CREATE TABLE child (id INT PRIMARY KEY, parent_id INT, CONSTRAINT fk_gone "
                    "FOREIGN KEY (parent_id) REFERENCES parent (id) ON DELETE CASCADE)",
                    "CREATE TABLE plain (id INT PRIMARY KEY, parent_id INT, CONSTRAINT fk_plain "
                    "FOREIGN KEY (parent_id) REFERENCES parent (id))", db=database)

    def warnings(tables: str) -> list[str]:
        pipeline = make_pipeline(tables)
        view = inspect_source(pipeline)
        plans = silver_plans(pipeline, view)
        return cascade_warnings(plans, view)

    (warning,) = warnings(f"- name: c\n  source: {database}.child\n"
                          f"- name: p\n  source: {database}.plain")
    assert f"`fk_gone` of {database}.child (ON DELETE CASCADE from {database}.parent)" in \
        warning and f"does not capture {database}.parent" in warning and "verify" in warning
    assert not warnings(f"- name: p\n  source: {database}.plain")
    assert not warnings(f"- name: c\n  source: {database}.child\n"
                        f"- name: parent\n  source: {database}.parent")  # applied
    (projected,) = warnings(f"- name: c\n  source: {database}.child\n"
                            f"  projection: SELECT id FROM child\n"
                            f"- name: parent\n  source: {database}.parent")
    assert "is a projection or a union of shards" in projected


def test_cascading_foreign_keys_are_read_with_their_columns_rules_and_collations(
        mariadb, database, make_pipeline):
    """Columns in the key's order, ON rules from SHOW CREATE TABLE, and whether each child
    column compares case-insensitively (its collation); a RESTRICT key is no cascade."""
    mariadb.execute(
        "CREATE TABLE p (region VARCHAR(8) COLLATE utf8mb4_bin, code VARCHAR(8) "
        "COLLATE utf8mb4_general_ci, PRIMARY KEY (region, code))",
        "CREATE TABLE c (id INT PRIMARY KEY, code VARCHAR(8) COLLATE utf8mb4_general_ci, "
        "region VARCHAR(8) COLLATE utf8mb4_bin, CONSTRAINT fk_c FOREIGN KEY (region, Code) "
        "REFERENCES p (region, code) ON DELETE CASCADE)",
        "CREATE TABLE r (id INT PRIMARY KEY, region VARCHAR(8) COLLATE utf8mb4_bin, code "
        "VARCHAR(8) COLLATE utf8mb4_general_ci, CONSTRAINT fk_r FOREIGN KEY (region, code) "
        "REFERENCES p (region, code))", db=database)
    pipeline = make_pipeline(f"- name: c\n  source: {database}.c\n"
                             f"- name: r\n  source: {database}.r\n"
                             f"- name: p\n  source: {database}.p\n")
    (fk,) = inspect_source(pipeline).foreign_keys
    assert (fk.name, fk.child, fk.columns, fk.parent, fk.referenced) == \
        ("fk_c", f"{database}.c", ("region", "code"), f"{database}.p", ("region", "code"))
    assert (fk.on_update, fk.on_delete, fk.folded) == ("RESTRICT", "CASCADE", (False, True))
