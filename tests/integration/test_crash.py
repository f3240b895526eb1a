"""SIGKILL at random points of `cdc-sql run`, with a writer going, then silver equals the source."""
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.helpers import (assert_silver_equals, checkpoint, run, run_crashing_at,
                                       runs_killed_at, silver_path, state_log)
from tests.integration.writer import RandomWriter

pytestmark = pytest.mark.integration


def cli(pipeline, env):
    return subprocess.Popen([sys.executable, "-m", "cdc_sql.cli", "run", pipeline.file,
                             "--until-caught-up"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)


def test_sigkill_at_random_points_then_equal(mariadb, database, engine, make_pipeline):
    rng = random.Random(int(os.environ.get("CDC_SQL_SEED", "7")))
    mariadb.execute("CREATE TABLE items (id INT PRIMARY KEY, v VARCHAR(40), n INT)", db=database)
    with mariadb.connect(database) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO items VALUES (%s, %s, %s)",
                        [(i, f"v{i}", i) for i in range(1, 20001)])
    pipeline = make_pipeline(f"- name: items\n  source: {database}.items", chunk_size=1500)
    env = {**os.environ, "TEST_MYSQL_PASSWORD": "cdc-secret"}
    writer = RandomWriter(mariadb, database, "items", 25000, seed=rng.randrange(2**32))
    writer.start()
    kills = 0
    try:
        for _ in range(6):
            process = cli(pipeline, env)
            try:
                process.wait(timeout=rng.uniform(0.5, 6.0))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                kills += 1
            else:
                assert process.returncode == 0, process.stderr.read().decode()[-3000:]
    finally:
        writer.stop()
    assert writer.committed > 0
    run(pipeline, engine)
    assert_silver_equals(engine, pipeline, "items", mariadb, f"SELECT * FROM {database}.items")
    print(f"kills: {kills}, writer transactions: {writer.committed}")


def done_splits(root) -> dict[str, str]:
    """Split name -> attempt of the splits state marks done."""
    return {name: value["attempt"] for kind, name, value in state_log(root)
            if kind == "split" and value.get("status") == "done"}


def test_sigkill_mid_snapshot_rereads_only_unfinished_splits(mariadb, database, engine,
                                                             make_pipeline):
    mariadb.execute("CREATE TABLE items (id INT PRIMARY KEY, v VARCHAR(40), n INT)",
                    "INSERT INTO items SELECT seq, CONCAT('v', seq), seq FROM seq_1_to_60000",
                    db=database)
    # 30 splits, read in groups of 4 by 8 readers: a kill leaves some groups unread
    pipeline = make_pipeline(f"- name: items\n  source: {database}.items", chunk_size=2000,
                             snapshot_reader="pymysql", parallelism=8)
    # killed right after the first state commit: the groups that finished first are recorded
    env = {**os.environ, "TEST_MYSQL_PASSWORD": "cdc-secret",
           "CDC_SQL_KILL_AT": "state.committed@1"}
    process = cli(pipeline, env)
    assert process.wait(timeout=120) == -signal.SIGKILL
    before = done_splits(pipeline.root)
    # groups of 4 and a last one of 2 (#28, #29), which, half the rows, often lands first
    assert 2 <= len(before) < 30, "kill landed outside the snapshot"
    mariadb.execute("UPDATE items SET v = 'after kill' WHERE id % 1000 = 0",
                    "DELETE FROM items WHERE id % 999 = 0", db=database)
    run(pipeline, engine)
    after = done_splits(pipeline.root)
    assert len(after) == 30
    assert {name: after[name] for name in before} == before  # finished splits were not re-read
    from cdc_sql.lake.lake import Lake

    attempts = engine.read(Lake(None, str(pipeline.root), None).snapshot_path(database, "items"))\
        .select("_cdc_split_id", "_cdc_attempt").distinct().collect()
    assert sorted(a for _, a in attempts) == sorted(after.values())  # no rows of killed attempts
    assert_silver_equals(engine, pipeline, "items", mariadb, f"SELECT * FROM {database}.items")


def test_a_small_tables_read_creates_bronze_with_its_rows_and_a_kill_after_it_reads_again(
        mariadb, database, engine, make_pipeline):
    """A table read in one group: its read creates bronze's snapshot table with its rows, in
    one commit (splits.creating_groups); killed right after it (state not told), the next run
    deletes those rows and reads the table again: bronze holds the recorded attempt's rows
    once, and silver equals the source."""
    from deltalake import DeltaTable

    from cdc_sql.lake.lake import Lake

    mariadb.execute("CREATE TABLE items (id INT PRIMARY KEY, v VARCHAR(40), n INT)",
                    "INSERT INTO items SELECT seq, CONCAT('v', seq), seq FROM seq_1_to_500",
                    db=database)
    pipeline = make_pipeline(f"- name: items\n  source: {database}.items")
    assert runs_killed_at(pipeline, ["split.written"]) == [("split.written", -signal.SIGKILL)]
    path = Lake(None, str(pipeline.root), None).snapshot_path(database, "items")
    bronze = DeltaTable(path)
    assert bronze.version() == 0 and bronze.to_pyarrow_table().num_rows == 500  # one commit
    mariadb.execute("UPDATE items SET v = 'after kill' WHERE id % 7 = 0",
                    "DELETE FROM items WHERE id % 11 = 0", db=database)
    run(pipeline, engine)
    rows = DeltaTable(path).to_pyarrow_table(columns=["id", "_cdc_attempt"])
    assert rows.num_rows == 500 - 45 and set(rows["_cdc_attempt"].to_pylist()) == \
        set(done_splits(pipeline.root).values())  # read again; the killed attempt's deleted
    assert_silver_equals(engine, pipeline, "items", mariadb, f"SELECT * FROM {database}.items")


def applied_offset(root) -> str:
    tables = [value for kind, _, value in state_log(root) if kind == "table"]
    return tables[-1]["applied"] if tables else ""


def test_follow_mode_applies_changes_then_sigterm_exits_0(mariadb, database, engine,
                                                          make_pipeline):
    from cdc_sql.source.offsets import Offset, file_sequence

    mariadb.execute("CREATE TABLE items (id INT PRIMARY KEY, v VARCHAR(40), n INT)",
                    "INSERT INTO items SELECT seq, 'v', seq FROM seq_1_to_500", db=database)
    pipeline = make_pipeline(f"- name: items\n  source: {database}.items")
    process = subprocess.Popen([sys.executable, "-m", "cdc_sql.cli", "run", pipeline.file],
                               env={**os.environ, "TEST_MYSQL_PASSWORD": "cdc-secret"},
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not applied_offset(pipeline.root):
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        mariadb.execute("UPDATE items SET v = 'followed' WHERE id < 100",
                        "DELETE FROM items WHERE id > 400",
                        "INSERT INTO items VALUES (1000, 'new', 0)", db=database)
        file, pos = mariadb.query("SHOW MASTER STATUS")[0][:2]
        target = Offset(file_sequence(file), pos, 0).text
        while applied_offset(pipeline.root) < target:
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, process.stderr.read().decode()[-2000:]
    finally:
        if process.poll() is None:
            process.kill()
    assert "SIGTERM received" in process.stderr.read().decode()
    assert_silver_equals(engine, pipeline, "items", mariadb, f"SELECT * FROM {database}.items")


def test_a_kill_after_an_in_process_merge_replays_the_window(mariadb, database, engine,
                                                             make_pipeline):
    """A small window of a plain table is merged by delta-rs in this process
    (lake/small_merge.py): killed between that MERGE and the state commit, the next run
    accepts the commit as its own, replays the window (harmless) and goes on."""
    from deltalake import DeltaTable

    from tests.integration.test_cascades import run_killed_at

    # a DATETIME column: Sail gives silver the timestampNtz feature (delta-rs writes it too)
    mariadb.execute("CREATE TABLE items (id INT PRIMARY KEY, v VARCHAR(40), n INT, "
                    "at DATETIME(6))",
                    "INSERT INTO items SELECT seq, 'v', seq, '2024-01-02 03:04:05.678901' "
                    "FROM seq_1_to_500", db=database)
    pipeline = make_pipeline(f"- name: items\n  source: {database}.items")
    run(pipeline, engine)
    mariadb.execute("UPDATE items SET v = 'killed' WHERE id < 100",
                    "DELETE FROM items WHERE id > 450",
                    "INSERT INTO items VALUES (1000, 'new', 0, NOW(6))", db=database)
    recorded = checkpoint(engine, pipeline).table("items").silver_version
    run_killed_at(pipeline, "silver.merged@1")
    silver = DeltaTable(silver_path(pipeline, "items"))
    assert silver.version() == recorded + 1
    assert silver.history(1)[0]["clientVersion"].startswith(("delta-rs", "cdc-sql"))  # in-process
    assert checkpoint(engine, pipeline).table("items").silver_version == recorded
    mariadb.execute("UPDATE items SET n = -n WHERE id % 7 = 0", "DELETE FROM items WHERE id = 5",
                    db=database)
    run(pipeline, engine)
    assert_silver_equals(engine, pipeline, "items", mariadb, f"SELECT * FROM {database}.items")


@pytest.mark.parametrize("point", ["silver.staged", "silver.merged"])
def test_a_window_past_the_budget_is_merged_in_key_ranges_through_crashes(
        mariadb, database, engine, make_pipeline, monkeypatch, point):
    """A window past the memory budget (forced here) is merged by rewriting silver's files in
    key ranges, committed at once: crashed with every range's files written but none
    committed, nothing of them stays and silver is as it was; crashed after the commit, the
    replay changes nothing. Either way the next run leaves silver equal to the source. On a
    local path and in an object store alike (CDC_SQL_TEST_STORE)."""
    from deltalake import DeltaTable
    from pyarrow.fs import FileSelector

    from cdc_sql.lake import file_merge, small_merge
    from cdc_sql.lake.parquet_files import table_files

    def listed(path):  # every object under silver's root
        return {f.path for f in table_files(path).get_file_info(FileSelector("", recursive=True))}

    mariadb.execute("CREATE TABLE items (id INT PRIMARY KEY, v VARCHAR(40), n INT)",
                    "INSERT INTO items SELECT seq, 'v', seq FROM seq_1_to_3000", db=database)
    pipeline = make_pipeline(f"- name: items\n  source: {database}.items", chunk_size=500)
    run(pipeline, engine)
    mariadb.execute("UPDATE items SET v = 'ranged' WHERE id % 3 = 0",
                    "DELETE FROM items WHERE id % 11 = 0",
                    "INSERT INTO items SELECT seq, 'new', 0 FROM seq_5000_to_5100", db=database)
    monkeypatch.setattr(small_merge, "merger", lambda *_: None)  # every window past it
    monkeypatch.setattr(small_merge, "range_count", lambda *_: 4)
    parts = []
    real_add = file_merge.Rewrite.add
    monkeypatch.setattr(file_merge.Rewrite, "add",
                        lambda self, *args: parts.append(1) or real_add(self, *args))
    path = silver_path(pipeline, "items")
    version, files = DeltaTable(path).version(), listed(path)

    run_crashing_at(pipeline, engine, monkeypatch, point)
    assert len(parts) > 1  # several ranges
    if point == "silver.staged":  # written, not committed: nothing of it stays
        assert DeltaTable(path).version() == version and listed(path) == files
    else:
        assert DeltaTable(path).version() == version + 1  # one commit for every range
    run(pipeline, engine)
    assert_silver_equals(engine, pipeline, "items", mariadb, f"SELECT * FROM {database}.items")


def test_a_kill_after_silver_is_created_in_process_then_equal(mariadb, database, engine,
                                                              make_pipeline):
    """A small table's first batch creates silver by delta-rs, all its snapshot rows in the
    creating commit: killed right after it, the next run finds silver complete, merges only
    the changes, and silver equals the source."""
    from deltalake import DeltaTable

    from tests.integration.test_cascades import run_killed_at

    mariadb.execute("CREATE TABLE items (id INT PRIMARY KEY, v VARCHAR(40), at DATETIME(6))",
                    "INSERT INTO items SELECT seq, 'v', NOW(6) FROM seq_1_to_3000", db=database)
    pipeline = make_pipeline(f"- name: items\n  source: {database}.items", chunk_size=700)
    run_killed_at(pipeline, "silver.snapshot_written@1")
    silver = DeltaTable(silver_path(pipeline, "items"))
    assert silver.version() == 0 and silver.history()[-1]["clientVersion"].startswith("delta-rs")
    assert silver.to_pyarrow_table().num_rows == 3000
    mariadb.execute("UPDATE items SET v = 'after' WHERE id % 10 = 0",
                    "DELETE FROM items WHERE id % 13 = 0", db=database)
    run(pipeline, engine)
    assert_silver_equals(engine, pipeline, "items", mariadb, f"SELECT * FROM {database}.items")


@pytest.mark.local_lake  # silver's first files are made of bronze's on a local lake
def test_silver_made_of_bronze_files_and_killed_before_its_commit_then_equal(
        mariadb, database, engine, make_pipeline):
    """Silver's first version is made of bronze's files (lake/first_version.py): killed once
    its files are in silver's directory but before the commit that creates it, the next run
    makes them again and creates silver with those alone, and silver equals the source."""
    from deltalake import DeltaTable

    from tests.integration.test_cascades import run_killed_at

    mariadb.execute("CREATE TABLE items (id INT PRIMARY KEY, v VARCHAR(40), at DATETIME(6))",
                    "INSERT INTO items SELECT seq, 'v', NOW(6) FROM seq_1_to_3000", db=database)
    pipeline = make_pipeline(f"- name: items\n  source: {database}.items", chunk_size=700)
    run_killed_at(pipeline, "silver.first_spliced@1")
    silver = Path(silver_path(pipeline, "items"))
    killed = {p.name for p in silver.glob("*.parquet")}
    assert not (silver / "_delta_log").exists() and killed
    mariadb.execute("UPDATE items SET v = 'after' WHERE id % 10 = 0",
                    "DELETE FROM items WHERE id % 13 = 0", db=database)
    run(pipeline, engine)
    first = DeltaTable(str(silver), version=0)
    assert first.to_pyarrow_table().num_rows == 3000
    assert not killed & {Path(f).name for f in first.file_uris()}  # made again, the old unused
    assert_silver_equals(engine, pipeline, "items", mariadb, f"SELECT * FROM {database}.items")
