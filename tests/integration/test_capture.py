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

from cdc_sql.dev.mariadb import PASSWORD, USER, MariaDB
from cdc_sql.lake.lake import Lake
from cdc_sql.source.offsets import Offset, Position, file_sequence
from tests.integration.helpers import (assert_silver_equals, checkpoint, run, run_crashing_at,
                                       state_log)
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


def changes_path(root, db: str, table: str) -> str:
    return Lake(None, str(root), None).changes_path(db, table)


def bronze_offsets(root, db: str, table: str) -> list[str]:
    rows = DeltaTable(changes_path(root, db, table)).to_pyarrow_table(
        columns=["_cdc_offset"]).to_pylist()
    return sorted(r["_cdc_offset"] for r in rows)


# A large transaction by its changes (parts of 100), or by its bytes of row images: rows of
# 2 KB (before and after), parts of about 100 rows by binlog_batch_bytes alone.
LARGE = {"rows": ("", "", {"binlog_batch_rows": 100}),
         "bytes": (", w VARCHAR(1000)", ", REPEAT('x', 1000)", {"binlog_batch_bytes": 200_000})}


def bronze_versions(path: str) -> dict[str, set[int]]:
    """GTID -> the versions of a bronze changes table that added its rows."""
    commits: dict[str, set[int]] = {}
    previous: set[str] = set()
    for version in range(DeltaTable(path).version() + 1):
        rows = DeltaTable(path, version=version).to_pyarrow_table(
            columns=["_cdc_offset", "_cdc_gtid"]).to_pylist()
        for r in rows:
            if r["_cdc_offset"] not in previous:
                commits.setdefault(r["_cdc_gtid"], set()).add(version)
        previous |= {r["_cdc_offset"] for r in rows}
    return commits


@pytest.mark.parametrize("large", sorted(LARGE))
def test_a_transaction_larger_than_a_batch_lands_in_parts_and_reaches_silver_whole(
        mariadb, database, engine, make_pipeline, large):
    column, value, settings = LARGE[large]
    mariadb.execute(f"CREATE TABLE t (id INT PRIMARY KEY, v INT{column})",
                    f"INSERT INTO t SELECT seq, 0{value} FROM seq_1_to_3000", db=database)
    pipeline = make_pipeline(f"- name: t\n  source: {database}.t", **settings)
    start = binlog_end(mariadb)  # nothing is written until the snapshot's watermark
    run(pipeline, engine)
    before = binlog_end(mariadb)
    mariadb.execute("START TRANSACTION", "UPDATE t SET v = 1", "DELETE FROM t WHERE id <= 50",
                    "COMMIT", db=database)
    after = binlog_end(mariadb)
    with mariadb.connect(database) as conn, conn.cursor() as cur:
        cur.executemany("UPDATE t SET v = v + 1 WHERE id = %s", [(i,) for i in range(51, 351)])
    run(pipeline, engine)
    commits = bronze_versions(changes_path(pipeline.root, database, "t"))
    sizes = {g: sum(1 for o in bronze_offsets(pipeline.root, database, "t")
                    if before < o < after) for g in commits}
    # 3050 changes in parts of at least 100 changes or 200,000 bytes (a part closes after
    # the rows event crossing it)
    assert max(len(v) for v in commits.values()) >= 5
    assert sum(1 for v in commits.values() if len(v) > 1) == 1, sizes
    # Capture never recorded a position inside the large transaction: silver saw it whole.
    positions = [Position.parse(value["position"]).offset.text
                 for kind, _, value in state_log(pipeline.root) if kind == "capture"]
    assert not [p for p in positions if before < p < after]
    assert bronze_offsets(pipeline.root, database, "t") == \
        source_offsets(mariadb, database, "t", start)
    assert_silver_equals(engine, pipeline, "t", mariadb, f"SELECT * FROM {database}.t")


def test_small_transactions_land_whole_and_each_batch_ends_at_a_boundary(
        mariadb, database, engine, make_pipeline):
    """Batches of 100 changes, transactions of 7: a batch closes at the end of the
    transaction that fills it, with its boundary in state. (Parts were cut inside whichever
    transaction crossed the batch's size: its rows landed in two bronze commits, and state
    recorded no boundary until the batch timer, so silver moved by 5-second steps under load.)"""
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)", db=database)
    pipeline = make_pipeline(f"- name: t\n  source: {database}.t", binlog_batch_rows=100,
                             binlog_batch_seconds=3600)
    run(pipeline, engine)
    before = binlog_end(mariadb)
    with mariadb.connect(database) as conn, conn.cursor() as cur:
        for i in range(60):
            cur.execute(f"INSERT INTO t SELECT seq + {7 * i}, {i} FROM seq_1_to_7")
            conn.commit()
    run(pipeline, engine)
    commits = bronze_versions(changes_path(pipeline.root, database, "t"))
    assert len(commits) == 60 and all(len(v) == 1 for v in commits.values()), commits
    assert len(set().union(*commits.values())) >= 4  # 420 changes in batches of 105
    positions = [Position.parse(value["position"]).offset.text
                 for kind, _, value in state_log(pipeline.root) if kind == "capture"]
    assert len([p for p in positions if p > before]) >= 4  # each batch's end recorded
    assert_silver_equals(engine, pipeline, "t", mariadb, f"SELECT * FROM {database}.t")


def test_a_long_capture_compacts_state_as_it_goes(mariadb, database, engine, make_pipeline,
                                                  monkeypatch):
    """Each batch makes a state commit, and a Delta commit costs more the more files the
    table has: a capture pass compacts the state log as it goes (COMPACT_AT lowered to 5
    here), and what state records stays whole: capture stands at the source's end, silver
    equals the source."""
    from cdc_sql.lake import state as state_module

    monkeypatch.setattr(state_module, "COMPACT_AT", 5)
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)", db=database)
    pipeline = make_pipeline(f"- name: t\n  source: {database}.t", binlog_batch_rows=4,
                             binlog_batch_seconds=3600)
    run(pipeline, engine)
    with mariadb.connect(database) as conn, conn.cursor() as cur:
        for i in range(60):  # transactions of 4 changes, a batch each: 60 state commits
            cur.execute("INSERT INTO t VALUES (%s, %s), (%s, %s)", (2 * i, i, 2 * i + 1, i))
            cur.execute("UPDATE t SET v = v + 1 WHERE id = %s", (2 * i,))
            cur.execute("DELETE FROM t WHERE id = %s", (2 * i + 1,))
            conn.commit()
    end = binlog_end(mariadb)
    run(pipeline, engine)
    log = DeltaTable(f"{pipeline.root}/_state/checkpoint")
    compactions = [c for c in log.history()
                   if "predicate" in c.get("operationParameters", {})]
    assert len(compactions) >= 8, compactions
    assert len(log.file_uris()) <= 12  # 60 without compaction
    assert checkpoint(engine, pipeline).capture.offset >= end
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
    path, secret = tmp_path / "p.yaml", tmp_path / "password"
    secret.write_text(PASSWORD)
    secret.chmod(0o600)
    path.write_text(f"name: p\nsource:\n  host: 127.0.0.1\n  port: {server.port}\n"
                    f"  user: {USER}\n  password_file: {secret}\n"
                    f"target:\n  path: {tmp_path / 'lake'}\n"
                    f"tables:\n  - name: t\n    source: d.t\n")
    return path


def test_idle_table_moves_its_applied_offset_without_a_merge(mariadb, database, engine,
                                                             make_pipeline):
    mariadb.execute("CREATE TABLE quiet (id INT PRIMARY KEY)", "INSERT INTO quiet VALUES (1)",
                    "CREATE TABLE busy (id INT PRIMARY KEY, n INT)",
                    "INSERT INTO busy VALUES (1, 0)", db=database)
    pipeline = make_pipeline(f"- name: quiet\n  source: {database}.quiet\n"
                             f"- name: busy\n  source: {database}.busy")
    run(pipeline, engine)
    versions = DeltaTable(f"{pipeline.root}/silver/quiet").version()
    mariadb.execute("UPDATE busy SET n = n + 1", db=database)
    run(pipeline, engine)
    state = checkpoint(engine, pipeline)
    assert state.table("quiet").applied == state.capture.offset
    assert state.table("busy").applied == state.table("quiet").applied
    assert DeltaTable(f"{pipeline.root}/silver/quiet").version() == versions  # no MERGE
    assert_silver_equals(engine, pipeline, "busy", mariadb, f"SELECT * FROM {database}.busy")


def test_ddl_statements_are_captured(mariadb, database, engine, make_pipeline):
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY)", db=database)
    pipeline = make_pipeline(f"- name: t\n  source: {database}.t")
    run(pipeline, engine)
    mariadb.execute("ALTER TABLE t ADD COLUMN note VARCHAR(10)", db=database)
    run(pipeline, engine)
    statements = Lake(None, str(pipeline.root), None).statements_path
    rows = DeltaTable(statements).to_pyarrow_table().to_pylist()
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


def test_kills_between_the_parts_of_a_large_transaction_write_nothing_twice(
        mariadb, database, engine, make_pipeline):
    """A transaction of 12,000 changes lands in parts of about 500; the run is killed after
    the 1st, 5th and 9th part's bronze commit (and again after a resumed run's first part), and
    every next run resumes inside the transaction: bronze ends with every change exactly once,
    silver never saw the transaction half done, and equals the source."""
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT, w VARCHAR(20))",
                    "INSERT INTO t SELECT seq, 0, 'x' FROM seq_1_to_6000", db=database)
    other = "CREATE TABLE u (id INT PRIMARY KEY, v INT)"
    mariadb.execute(other, "INSERT INTO u VALUES (1, 0)", db=database)
    pipeline = make_pipeline(f"- name: t\n  source: {database}.t\n- name: u\n  source: {database}.u",
                             binlog_batch_rows=500)
    start = binlog_end(mariadb)
    run(pipeline, engine)
    before = binlog_end(mariadb)
    mariadb.execute("START TRANSACTION", "UPDATE t SET v = v + 1, w = 'first'",
                    "UPDATE u SET v = 1", "UPDATE t SET v = v + 1, w = 'second'", "COMMIT",
                    db=database)
    after = binlog_end(mariadb)
    env = {**os.environ, "TEST_MYSQL_PASSWORD": PASSWORD}
    for nth in (1, 5, 9, 1):
        process = cli(pipeline, {**env, "CDC_SQL_KILL_AT": f"bronze.appended@{nth}"})
        process.wait(timeout=120)
        assert process.returncode == -signal.SIGKILL, process.stderr.read().decode()[-2000:]
        entries = [v for kind, _, v in state_log(pipeline.root) if kind == "capture"]
        assert entries[-1]["landing"], "a part was landing when the run died"
        positions = [Position.parse(v["position"]).offset.text for v in entries]
        assert not [p for p in positions if before < p < after]
        applied = [v["applied"] for kind, _, v in state_log(pipeline.root) if kind == "table"]
        assert not [a for a in applied if before < a < after]  # silver: all or nothing
    run(pipeline, engine)
    assert bronze_offsets(pipeline.root, database, "t") == \
        source_offsets(mariadb, database, "t", start)
    assert bronze_offsets(pipeline.root, database, "u") == \
        source_offsets(mariadb, database, "u", start)
    assert checkpoint(engine, pipeline).capture.landing == []
    assert_silver_equals(engine, pipeline, "t", mariadb, f"SELECT * FROM {database}.t")
    assert_silver_equals(engine, pipeline, "u", mariadb, f"SELECT * FROM {database}.u")


def test_a_pass_lists_its_tables_once_and_kills_between_its_batches_write_nothing_twice(
        mariadb, database, engine, make_pipeline):
    """A pass of eight batches or more over the same two tables commits state once a batch
    (the tables listed as landing before its first batch stay listed until its last), and
    runs killed after a later batch's bronze commit, before its state commit, resume with
    every change exactly once: the tables the kill left rows past the recorded position in
    were listed."""
    for name in ("t", "u"):
        mariadb.execute(f"CREATE TABLE {name} (id INT PRIMARY KEY, v INT)", db=database)
    pipeline = make_pipeline(f"- name: t\n  source: {database}.t\n- name: u\n  source: "
                             f"{database}.u", binlog_batch_rows=50)
    start = binlog_end(mariadb)
    run(pipeline, engine)

    def write(first: int) -> None:  # 400 transactions of a change, in both tables
        mariadb.execute(*(f"INSERT INTO {name} VALUES ({i}, 0)"
                          for i in range(first, first + 200) for name in ("t", "u")),
                        db=database)

    def batches() -> int:  # a bronze commit of `t` a batch
        return DeltaTable(changes_path(pipeline.root, database, "t")).version()

    write(0)
    entries, versions = len(state_log(pipeline.root)), batches()
    run(pipeline, engine)
    captures = [v for kind, _, v in state_log(pipeline.root)[entries:] if kind == "capture"]
    assert batches() - versions >= 8
    assert len(captures) <= batches() - versions + 2, captures  # two a batch before
    assert captures[-1]["landing"] == []
    env = {**os.environ, "TEST_MYSQL_PASSWORD": PASSWORD}
    for nth, first in ((3, 1000), (7, 2000), (2, 3000)):
        write(first)
        process = cli(pipeline, {**env, "CDC_SQL_KILL_AT": f"bronze.appended@{nth}"})
        process.wait(timeout=120)
        assert process.returncode == -signal.SIGKILL, process.stderr.read().decode()[-2000:]
        captures = [v for kind, _, v in state_log(pipeline.root) if kind == "capture"]
        assert captures[-1]["landing"] == [[database, "t"], [database, "u"]]
    run(pipeline, engine)
    for name in ("t", "u"):
        assert bronze_offsets(pipeline.root, database, name) == \
            source_offsets(mariadb, database, name, start)
        assert_silver_equals(engine, pipeline, name, mariadb, f"SELECT * FROM {database}.{name}")
    assert checkpoint(engine, pipeline).capture.landing == []


def snapshotted_with_every_pass_cut(mariadb, database, engine, make_pipeline, projected: bool,
                                    key_type: str = "INT"):
    """A table t of 100 rows (id, v = 0), snapshotted by a pipeline whose capture passes end
    at every transaction (`engine.window_bytes` 1), through a projection if `projected`."""
    import dataclasses

    mariadb.execute(f"CREATE TABLE t (id {key_type} PRIMARY KEY, v INT)",
                    "INSERT INTO t SELECT seq, 0 FROM seq_1_to_100", db=database)
    projection = "\n  projection: SELECT id, v FROM t WHERE v >= 0" if projected else ""
    pipeline = make_pipeline(f"- name: t\n  source: {database}.t{projection}")
    pipeline = dataclasses.replace(pipeline, engine=dataclasses.replace(pipeline.engine,
                                                                        window_bytes=1))
    run(pipeline, engine)
    return pipeline


@pytest.mark.parametrize("kind", ["engine", "in-process", "text-key"])
def test_a_pass_ends_past_the_engines_window_bytes_and_the_run_goes_on(
        mariadb, database, engine, make_pipeline, kind):
    """A run far behind the source, whose windows go through the engine (a projection), merges
    them a pass at a time: each pass ends at the first transaction's end past
    `engine.window_bytes` (1 here: every transaction), its windows are merged, and capture
    goes on to the position the run saw at start. The engine's memory follows a window; a
    plain table's window is merged in this process in key ranges whatever its size, so its
    pass is not cut, unless its key is text (no key ranges: a window past the memory budget
    would go through the engine)."""
    from tests.integration.helpers import silver_path

    projected, cut = kind == "engine", kind != "in-process"
    pipeline = snapshotted_with_every_pass_cut(
        mariadb, database, engine, make_pipeline, projected,
        "VARCHAR(8)" if kind == "text-key" else "INT")
    first = DeltaTable(silver_path(pipeline, "t")).version()
    mariadb.execute(*[f"UPDATE t SET v = v + {i} WHERE id <= {20 * i}" for i in range(1, 5)],
                    "DELETE FROM t WHERE id > 90", db=database)
    summary = run(pipeline, engine)
    assert summary["captured_changes"] == 20 + 40 + 60 + 80 + 10
    assert DeltaTable(silver_path(pipeline, "t")).version() - first == (5 if cut else 1)
    positions = [value["position"] for entry, _, value in state_log(pipeline.root)
                 if entry == "capture"]
    assert len(set(positions)) == (1 + 5 if cut else 1 + 1)  # the first run's, each pass's
    assert_silver_equals(engine, pipeline, "t", mariadb, f"SELECT id, v FROM {database}.t")


@pytest.mark.parametrize("point", ["bronze.appended", "state.committed"])
def test_a_run_killed_between_its_passes_is_finished_by_the_next(
        mariadb, database, engine, make_pipeline, monkeypatch, point):
    """Killed in its second pass (its batch in bronze, state not told; or its windows merged
    and recorded), a run bounded by `engine.window_bytes` leaves what the next run finishes
    exactly: each pass's commits are those of a whole run."""
    pipeline = snapshotted_with_every_pass_cut(mariadb, database, engine, make_pipeline, True)
    mariadb.execute(*[f"UPDATE t SET v = v + {i} WHERE id <= {20 * i}" for i in range(1, 5)],
                    "DELETE FROM t WHERE id > 90", "INSERT INTO t VALUES (200, -1)",
                    db=database)
    run_crashing_at(pipeline, engine, monkeypatch, point, nth=2)  # in the second pass
    run(pipeline, engine)
    assert_silver_equals(engine, pipeline, "t", mariadb,
                         f"SELECT id, v FROM {database}.t WHERE v >= 0")
