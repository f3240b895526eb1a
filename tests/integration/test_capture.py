"""Binlog capture into bronze: whole transactions, exactly once across kills, clear failures."""
import os
import random
import signal
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from cdc_sql.devdb import PASSWORD, USER, MariaDB
from cdc_sql.lake.bronze import binlog_path
from cdc_sql.source.offsets import Offset, file_sequence
from tests.integration.helpers import assert_silver_equals, run
from tests.integration.test_crash import cli

pytestmark = pytest.mark.integration


def binlog_end(mariadb) -> str:
    file, pos = mariadb.query("SHOW MASTER STATUS")[0][:2]
    return Offset(file_sequence(file), pos, 0).text


def source_offsets(mariadb, db: str, table: str, after: str) -> list[str]:
    """Offsets of every row change of `db.table` after `after` in the server's binlog, read by
    a bare reader (a key change counts twice: cdc-sql records a delete and an insert)."""
    stream = BinLogStreamReader(
        connection_settings={"host": "127.0.0.1", "port": mariadb.port, "user": USER,
                             "passwd": PASSWORD},
        server_id=9999, log_file=mariadb.query("SHOW BINARY LOGS")[0][0], log_pos=4,
        resume_stream=True, blocking=False, only_schemas=[db], only_tables=[table],
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent])
    offsets = []
    for event in stream:
        for i, row in enumerate(event.rows):
            offset = Offset(file_sequence(stream.log_file), event.packet.log_pos, i).text
            key_changed = "before_values" in row and row["before_values"]["id"] != row["after_values"]["id"]
            if offset > after:
                offsets += [offset, offset] if key_changed else [offset]
    stream.close()
    return sorted(offsets)


def bronze_offsets(root, db: str, table: str) -> list[str]:
    rows = DeltaTable(binlog_path(str(root))).to_pyarrow_table(
        columns=["offset", "db", "tbl"]).to_pylist()
    return sorted(r["offset"] for r in rows if r["db"] == db and r["tbl"] == table)


def test_long_transaction_spanning_batches_lands_whole(mariadb, database, engine, make_pipeline):
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)",
                    "INSERT INTO t SELECT seq, 0 FROM seq_1_to_3000", db=database)
    pipeline = make_pipeline(f"- name: t\n  source: {database}.t", binlog_batch_rows=100)
    start = binlog_end(mariadb)  # nothing is written until the snapshot's watermark
    run(pipeline, engine)
    mariadb.execute("START TRANSACTION", "UPDATE t SET v = 1", "DELETE FROM t WHERE id <= 50",
                    "COMMIT", db=database)
    with mariadb.connect(database) as conn, conn.cursor() as cur:
        cur.executemany("UPDATE t SET v = v + 1 WHERE id = %s", [(i,) for i in range(51, 351)])
    run(pipeline, engine)
    table = DeltaTable(binlog_path(str(pipeline.root)))
    seen: dict[str, int] = {}
    previous: set[str] = set()
    for version in range(table.version() + 1):
        rows = DeltaTable(binlog_path(str(pipeline.root)), version=version).to_pyarrow_table(
            columns=["offset", "gtid"]).to_pylist()
        new = {(r["offset"], r["gtid"]) for r in rows} - previous
        previous |= new
        for gtid in {g for _, g in new}:
            assert gtid not in seen, f"transaction {gtid} split across commits"
            seen[gtid] = version
    long_txn = [g for g in seen if sum(1 for _, x in previous if x == g) == 3050]
    assert len(long_txn) == 1  # 3000 updates and 50 deletes, one commit, more than 100 rows
    assert bronze_offsets(pipeline.root, database, "t") == \
        source_offsets(mariadb, database, "t", start)
    assert_silver_equals(engine, pipeline, "t", mariadb, f"SELECT * FROM {database}.t")


def test_sigkill_during_capture_keeps_every_event_exactly_once(mariadb, database, engine,
                                                                make_pipeline):
    rng = random.Random(int(os.environ.get("CDC_SQL_SEED", "5")))
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(30))",
                    "INSERT INTO t SELECT seq, 'x' FROM seq_1_to_2000", db=database)
    pipeline = make_pipeline(f"- name: t\n  source: {database}.t", binlog_batch_rows=500,
                             binlog_batch_seconds=0.2)
    start = binlog_end(mariadb)
    run(pipeline, engine)
    with mariadb.connect(database) as conn, conn.cursor() as cur:
        for round_ in range(60):
            cur.execute("UPDATE t SET v = %s WHERE id %% 60 = %s", (f"r{round_}", round_))
            cur.execute("UPDATE t SET id = id + 100000 WHERE id = %s", (round_ + 1,))
            cur.execute("DELETE FROM t WHERE id = %s", (1000 + round_,))
            cur.execute("INSERT INTO t VALUES (%s, 'new')", (5000 + round_,))
    env = {**os.environ, "TEST_MYSQL_PASSWORD": PASSWORD}
    kills = 0
    for _ in range(5):
        process = cli(pipeline, env)
        time.sleep(rng.uniform(1.0, 4.0))
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            kills += 1
        process.wait()
    run(pipeline, engine)
    assert bronze_offsets(pipeline.root, database, "t") == \
        source_offsets(mariadb, database, "t", start)
    assert_silver_equals(engine, pipeline, "t", mariadb, f"SELECT * FROM {database}.t")


def private_source(server: MariaDB, tmp_path: Path) -> Path:
    """A pipeline over table d.t of a server of the test's own (for tests that break it)."""
    server.execute("CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY)",
                   "INSERT INTO d.t VALUES (1)")
    path = tmp_path / "p.yaml"
    path.write_text(f"name: p\nsource:\n  host: 127.0.0.1\n  port: {server.port}\n"
                    f"  user: {USER}\n  password: ${{CDC_TEST_PASSWORD:-{PASSWORD}}}\n"
                    f"target:\n  path: {tmp_path / 'lake'}\n"
                    f"tables:\n  - name: t\n    source: d.t\n")
    return path


def test_idle_table_moves_its_applied_offset_without_a_merge(mariadb, database, engine,
                                                             make_pipeline):
    from cdc_sql.lake.state import State

    mariadb.execute("CREATE TABLE quiet (id INT PRIMARY KEY)", "INSERT INTO quiet VALUES (1)",
                    "CREATE TABLE busy (id INT PRIMARY KEY, n INT)",
                    "INSERT INTO busy VALUES (1, 0)", db=database)
    pipeline = make_pipeline(f"- name: quiet\n  source: {database}.quiet\n"
                             f"- name: busy\n  source: {database}.busy")
    run(pipeline, engine)
    versions = DeltaTable(f"{pipeline.root}/silver/quiet").version()
    mariadb.execute("UPDATE busy SET n = n + 1", db=database)
    run(pipeline, engine)
    checkpoint = State(engine, str(pipeline.root)).load()
    position = checkpoint.get("capture", "binlog")["position"]
    from cdc_sql.source.offsets import Position
    assert checkpoint.get("table", "quiet")["applied"] == Position.parse(position).offset.text
    assert checkpoint.get("table", "busy")["applied"] == checkpoint.get("table", "quiet")["applied"]
    assert DeltaTable(f"{pipeline.root}/silver/quiet").version() == versions  # no MERGE
    assert_silver_equals(engine, pipeline, "busy", mariadb, f"SELECT * FROM {database}.busy")


def test_ddl_statements_are_captured(mariadb, database, engine, make_pipeline):
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY)", db=database)
    pipeline = make_pipeline(f"- name: t\n  source: {database}.t")
    run(pipeline, engine)
    mariadb.execute("ALTER TABLE t ADD COLUMN note VARCHAR(10)", db=database)
    run(pipeline, engine)
    rows = DeltaTable(binlog_path(str(pipeline.root))).to_pyarrow_table().to_pylist()
    ddl = [r for r in rows if r["op"] == "ddl" and r["db"] == database]
    assert [r["statement"] for r in ddl] == ["ALTER TABLE t ADD COLUMN note VARCHAR(10)"]


def test_source_gone_mid_follow_is_retried_then_fails_clearly(engine, tmp_path):
    import subprocess
    import sys

    from tests.integration.test_crash import applied_offset

    with MariaDB() as server:
        process = subprocess.Popen([sys.executable, "-m", "cdc_sql.cli", "run",
                                    str(private_source(server, tmp_path)), "--give-up-after",
                                    "6"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while not applied_offset(tmp_path / "lake"):
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
    try:
        code = process.wait(timeout=90)  # the server is gone: retries for 6 s, then exit 1
    finally:
        if process.poll() is None:
            process.kill()
    message = process.stderr.read().decode()
    assert code == 1, message[-2000:]
    assert "running again in 1 s" in message and "running again in 2 s" in message
    assert "cdc-sql: cannot connect to" in message or "lost the binlog connection" in message
    assert PASSWORD not in message


def test_follow_mode_outlives_a_source_restart(engine, tmp_path):
    import signal
    import subprocess
    import sys

    from cdc_sql.config.model import load_pipeline
    from tests.integration.test_crash import applied_offset

    with MariaDB() as server:
        file = private_source(server, tmp_path)
        process = subprocess.Popen([sys.executable, "-m", "cdc_sql.cli", "run", str(file)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 60
            while not applied_offset(tmp_path / "lake"):
                assert process.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
            server.restart(crash=True, down_seconds=2)
            server.execute("INSERT INTO d.t VALUES (2), (3)", "DELETE FROM d.t WHERE id = 1")
            end = server.query("SHOW MASTER STATUS")[0]
            wanted = Offset(file_sequence(end[0]), end[1], 0).text
            deadline = time.monotonic() + 90
            while applied_offset(tmp_path / "lake") < wanted:
                assert process.poll() is None, process.stderr.read().decode()[-2000:]
                assert time.monotonic() < deadline, "silver did not catch up after the restart"
                time.sleep(0.2)
        finally:
            process.send_signal(signal.SIGTERM)
            code = process.wait(timeout=60)
        message = process.stderr.read().decode()
        assert code == 0, message[-2000:]
        assert "running again in" in message
        pipeline = load_pipeline(file)
        assert_silver_equals(engine, pipeline, "t", server, "SELECT * FROM d.t")
def test_binlog_parser_child_dies_with_its_parent(mariadb, tmp_path):
    """An orphaned parser would keep our server_id and cut off the next run's stream."""
    import subprocess
    import sys

    script = tmp_path / "parent.py"
    script.write_text(
        "import sys, time\n"
        "from cdc_sql.source.binlog_stream import raw_events_in_child\n"
        f"events = raw_events_in_child({{'host': '127.0.0.1', 'port': {mariadb.port}, "
        f"'user': '{USER}', 'password': '{PASSWORD}'}}, 4711, "
        f"'{mariadb.query('SHOW MASTER STATUS')[0][0]}', 4, [], True)\n"
        "next(events)\nprint('reading', flush=True)\ntime.sleep(600)\n")
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE)
    assert parent.stdout.readline().strip() == b"reading"
    children = subprocess.run(["pgrep", "-P", str(parent.pid)], capture_output=True,
                              text=True).stdout.split()
    assert len(children) == 1
    parent.kill()  # SIGKILL the parent alone, not its process group
    parent.wait()
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{children[0]}") and \
            open(f"/proc/{children[0]}/stat").read().split()[2] != "Z":
        assert time.monotonic() < deadline, "the parser outlived its parent"
        time.sleep(0.05)
