"""`cdc-sql validate` against a live source: tables, keys, columns, binlog settings."""
import pytest

from cdc_sql.cli import main
from cdc_sql.errors import ConfigError, SourceError
from cdc_sql.pipeline import inspect_source

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
    assert view.mariadb and view.plans[0].key == ("id",)
    import os
    os.environ["TEST_MYSQL_PASSWORD"] = "cdc-secret"
    assert main(["validate", pipeline.file]) == 0
    assert "valid" in capsys.readouterr().out


def test_missing_column_names_table_and_column(orders, make_pipeline):
    pipeline = make_pipeline(f"- name: o\n  source: {orders}.orders\n"
                             f"  projection: SELECT id, amout FROM orders")
    with pytest.raises(ConfigError) as info:
        inspect_source(pipeline)
    message = str(info.value)
    assert "tables[0].projection" in message and "`amout` does not exist" in message
    assert f"{orders}.orders" in message and pipeline.file in message


def test_dropping_the_key(orders, make_pipeline):
    pipeline = make_pipeline(f"- name: o\n  source: {orders}.orders\n"
                             f"  projection: SELECT amount FROM orders")
    with pytest.raises(ConfigError, match="drops the primary-key column `id`"):
        inspect_source(pipeline)


def test_missing_table(orders, make_pipeline):
    pipeline = make_pipeline(f"- name: o\n  source: {orders}.nope")
    with pytest.raises(SourceError, match=r"tables\[0\].*no source table matches"):
        inspect_source(pipeline)


def test_table_without_key(orders, make_pipeline):
    pipeline = make_pipeline(f"- name: o\n  source: {orders}.nokey")
    with pytest.raises(SourceError, match=rf"{orders}.nokey has no primary key.*primary_key:"):
        inspect_source(pipeline)
    declared = make_pipeline(f"- name: o\n  source: {orders}.nokey\n  primary_key: [a]")
    assert inspect_source(declared).plans[0].key == ("a",)


def test_binlog_row_image_must_be_full(orders, make_pipeline, mariadb):
    pipeline = make_pipeline(f"- name: o\n  source: {orders}.orders")
    mariadb.execute("SET GLOBAL binlog_row_image = 'MINIMAL'")
    try:
        with pytest.raises(SourceError, match="binlog_row_image=MINIMAL \\(needs FULL\\)"):
            inspect_source(pipeline)
    finally:
        mariadb.execute("SET GLOBAL binlog_row_image = 'FULL'")


def test_bad_password_is_not_shown(orders, make_pipeline):
    from cdc_sql.config.model import load_pipeline

    pipeline = make_pipeline(f"- name: o\n  source: {orders}.orders")
    wrong = load_pipeline(pipeline.file, environ={"TEST_MYSQL_PASSWORD": "wrong-pw-123"})
    with pytest.raises(SourceError) as info:
        inspect_source(wrong)
    assert "access denied" in str(info.value) and "wrong-pw-123" not in str(info.value)


def test_unreachable_host(make_pipeline):
    pipeline = make_pipeline("- name: o\n  source: a.b", port=1)
    with pytest.raises(SourceError, match="cannot connect to .*:1"):
        inspect_source(pipeline)


def test_server_id_in_use_is_refused(orders, make_pipeline, mariadb):
    import threading
    import time

    from pymysqlreplication import BinLogStreamReader

    from cdc_sql.devdb import PASSWORD, USER

    other = BinLogStreamReader(
        connection_settings={"host": "127.0.0.1", "port": mariadb.port, "user": USER,
                             "passwd": PASSWORD},
        server_id=4242, blocking=True, report_slave="someone-else", resume_stream=True,
        log_file=mariadb.query("SHOW MASTER STATUS")[0][0], log_pos=4)
    threading.Thread(target=lambda: next(iter(other), None), daemon=True).start()
    deadline = time.monotonic() + 10
    while not any(row[0] == 4242 for row in mariadb.query("SHOW SLAVE HOSTS")):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    pipeline = make_pipeline(f"- name: o\n  source: {orders}.orders", server_id=4242)
    try:
        with pytest.raises(SourceError, match="server_id 4242 is already used by a replica "
                                              "of the source \\(host someone-else\\)"):
            inspect_source(pipeline)
    finally:
        other.close()


def test_missing_replication_grants_are_named(orders, make_pipeline, mariadb):
    from cdc_sql.config.model import load_pipeline

    mariadb.execute("CREATE USER IF NOT EXISTS reader@'%' IDENTIFIED BY 'pw-reader'",
                    "GRANT SELECT ON *.* TO reader@'%'")
    pipeline = make_pipeline(f"- name: o\n  source: {orders}.orders", user="reader",
                             password="pw-reader")
    with pytest.raises(SourceError) as info:
        inspect_source(load_pipeline(pipeline.file, environ={}))
    message = str(info.value)
    assert "needs BINLOG MONITOR" in message and "GRANT SELECT, REPLICATION SLAVE" in message
    assert "pw-reader" not in message
    mariadb.execute("GRANT BINLOG MONITOR ON *.* TO reader@'%'")
    with pytest.raises(SourceError, match="lacks REPLICATION SLAVE"):
        inspect_source(load_pipeline(pipeline.file, environ={}))
    mariadb.execute("GRANT REPLICATION SLAVE ON *.* TO reader@'%'")
    assert inspect_source(load_pipeline(pipeline.file, environ={})).plans
