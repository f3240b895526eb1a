"""Re-snapshot while the pipeline runs: `cdc-sql resnapshot`, an incompatible MODIFY, a purged
binlog. Silver stays readable (never empty, never half) and ends equal to the source."""
import os
import random
import signal
import subprocess
import sys
import threading

import pytest

from cdc_sql.dev.mariadb import MariaDB
from cdc_sql.errors import SourceError
from cdc_sql.lake.tables import RESNAPSHOT_MARK
from tests.integration.helpers import (assert_silver_equals, checkpoint, history_path, run,
                                       silver_path)
from tests.integration.writer import RandomWriter

pytestmark = pytest.mark.integration


def environment(**more: str) -> dict:
    """The test's environment (an object store's settings too) for a `cdc-sql` child."""
    return {**os.environ, "TEST_MYSQL_PASSWORD": "cdc-secret", **more}


STABLE = range(900_001, 900_301)  # rows no writer touches: every reader must see all of them


def cli(*args: str, env: dict | None = None, wait: float | None = None):
    process = subprocess.Popen([sys.executable, "-m", "cdc_sql.cli", *args], env=env or environment(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               start_new_session=True)
    if wait is None:
        return process
    out, err = process.communicate(timeout=wait)
    assert process.returncode == 0, err.decode()[-3000:]
    return out.decode()


def replaced(path: str) -> int:
    """Commits of the table that a re-snapshot made."""
    from deltalake import DeltaTable

    return sum(c.get("userMetadata") == RESNAPSHOT_MARK for c in DeltaTable(path).history())


class Reader(threading.Thread):
    """Reads silver over and over (delta-rs, as another engine would) and keeps what it saw
    wrong: a version without one of the rows no writer touches (empty or half)."""

    def __init__(self, path: str):
        super().__init__(daemon=True)
        self.path, self.halt = path, threading.Event()
        self.reads, self.wrong = 0, []

    def run(self) -> None:
        from deltalake import DeltaTable

        while not self.halt.wait(0.05):
            table = DeltaTable(self.path)
            ids = set(table.to_pyarrow_table(columns=["id"]).column("id").to_pylist())
            missing = [i for i in STABLE if i not in ids]
            if missing:
                self.wrong.append((table.version(), len(ids), missing[:3]))
            self.reads += 1


def test_resnapshot_under_a_writer_with_kills_readers_see_whole_tables(
        mariadb, database, engine, make_pipeline):
    rng = random.Random(int(os.environ.get("CDC_SQL_SEED", "11")))
    mariadb.execute("CREATE TABLE items (id INT PRIMARY KEY, v VARCHAR(40), n INT)",
                    "INSERT INTO items SELECT seq, CONCAT('v', seq), seq FROM seq_1_to_12000",
                    "INSERT INTO items SELECT seq, 'stable', 0 FROM seq_900001_to_900300",
                    db=database)
    pipeline = make_pipeline(f"""
        - name: items
          source: {database}.items
          history: true""", chunk_size=1500)
    run(pipeline, engine)
    writer = RandomWriter(mariadb, database, "items", 15000, seed=rng.randrange(2**32))
    reader = Reader(silver_path(pipeline, "items"))
    writer.start()
    reader.start()
    try:
        out = cli("resnapshot", pipeline.file, "--tables", "items", wait=120)
        assert f"re-snapshot requested: {database}.items" in out
        status = cli("status", pipeline.file, wait=120)
        assert "items" in status and "resnapshot" in status and "re-snapshot since" in status
        # killed: with bronze emptied and state not told; mid-snapshot; between history and
        # silver; after silver's replacement, before state has it
        for point in ("resnapshot.reset", "split.written", "history.merged", "silver.merged"):
            process = cli("run", pipeline.file, "--until-caught-up",
                          env=environment(CDC_SQL_KILL_AT=point))
            assert process.wait(timeout=300) == -signal.SIGKILL, \
                f"{point}: {process.stderr.read().decode()[-2000:]}"
        process = cli("run", pipeline.file, "--until-caught-up")
        assert process.wait(timeout=300) == 0, process.stderr.read().decode()[-3000:]
    finally:
        writer.stop()
        writer.join()
        reader.halt.set()
        reader.join()
    run(pipeline, engine)
    assert reader.reads > 10 and not reader.wrong, reader.wrong[:5]
    assert writer.committed > 0
    assert replaced(silver_path(pipeline, "items")) >= 1
    state = checkpoint(engine, pipeline)
    assert not state.table("items").resnapshot
    assert all(e.prepared for e in state.resnapshots())
    assert_silver_equals(engine, pipeline, "items", mariadb, f"SELECT * FROM {database}.items")
    history = engine.read(history_path(pipeline, "items"))
    current = sorted(tuple(r) for r in history.where("_cdc_current").select("id", "v", "n")
                     .collect())
    assert current == sorted(mariadb.query(f"SELECT id, v, n FROM {database}.items"))
    assert history.where("_cdc_current").groupBy("id").count().where("count > 1").count() == 0


def test_an_incompatible_modify_is_mended_by_a_resnapshot(mariadb, database, engine,
                                                          make_pipeline):
    mariadb.execute("CREATE TABLE items (id INT PRIMARY KEY, n INT)",
                    "INSERT INTO items SELECT seq, seq FROM seq_1_to_3000",
                    "CREATE TABLE other (id INT PRIMARY KEY, v VARCHAR(40))",
                    "INSERT INTO other SELECT seq, 'o' FROM seq_1_to_100", db=database)
    pipeline = make_pipeline(f"""
        - name: items
          source: {database}.items
          history: true
        - name: other
          source: {database}.other""")
    run(pipeline, engine)
    mariadb.execute("UPDATE items SET n = -1 WHERE id = 1",
                    "ALTER TABLE items MODIFY n VARCHAR(20)",
                    "UPDATE items SET n = CONCAT('n', n) WHERE id <= 10",
                    "UPDATE other SET v = 'changed' WHERE id <= 5", db=database)
    with pytest.raises(SourceError, match=r"(?s)`n`.*resnapshot"):
        run(pipeline, engine)
    cli("resnapshot", pipeline.file, "--tables", "items", wait=120)
    mariadb.execute("UPDATE items SET n = 'after' WHERE id = 20",
                    "DELETE FROM items WHERE id = 30", db=database)
    run(pipeline, engine)
    assert engine.read(silver_path(pipeline, "items")).schema["n"].dataType.simpleString() == \
        "string"
    assert_silver_equals(engine, pipeline, "items", mariadb, f"SELECT * FROM {database}.items")
    assert_silver_equals(engine, pipeline, "other", mariadb, f"SELECT * FROM {database}.other")
    history = engine.read(history_path(pipeline, "items"))
    versions = [r.n for r in history.where("id = 1").orderBy("_cdc_valid_from").collect()]
    # old versions cast to the new type; the re-snapshot adds the difference it found (-1, set
    # and changed again before the run that stopped, was never merged)
    assert versions == ["1", "n-1"]
    mariadb.execute("UPDATE items SET n = 'later' WHERE id = 2", db=database)
    run(pipeline, engine)  # and it goes on as usual
    assert_silver_equals(engine, pipeline, "items", mariadb, f"SELECT * FROM {database}.items")


@pytest.fixture
def private():
    """A server of the test's own: purging its binlog harms no other test."""
    server = MariaDB().start()
    try:
        yield server
    finally:
        server.stop()


def test_a_purged_binlog_stops_or_resnapshots_as_configured(private, engine, make_pipeline):
    private.execute("CREATE DATABASE shop")
    private.execute("CREATE TABLE shop.items (id INT PRIMARY KEY, v VARCHAR(40))",
                    "INSERT INTO shop.items SELECT seq, 'v' FROM seq_1_to_2000",
                    "CREATE TABLE shop.other (id INT PRIMARY KEY, v VARCHAR(40))",
                    "INSERT INTO shop.other SELECT seq, 'o' FROM seq_1_to_50", db="shop")
    tables = "- name: items\n  source: shop.items\n- name: other\n  source: shop.other"
    stopping = make_pipeline(tables, port=private.port)
    run(stopping, engine)
    private.execute("UPDATE shop.items SET v = 'lost' WHERE id <= 100",
                    "DELETE FROM shop.items WHERE id > 1900",
                    "UPDATE shop.other SET v = 'lost' WHERE id <= 10")
    private.purge_binlogs()
    private.execute("UPDATE shop.items SET v = 'kept' WHERE id = 1")
    with pytest.raises(SourceError, match=r"purged the binlog capture needs.*on_purged_binlog"):
        run(stopping, engine)

    resnapshotting = make_pipeline(tables, port=private.port, on_purged_binlog="resnapshot")
    assert run(resnapshotting, engine)["outcome"] == "ok"
    for name in ("items", "other"):
        assert_silver_equals(engine, resnapshotting, name, private, f"SELECT * FROM shop.{name}")
    private.execute("UPDATE shop.items SET v = 'after' WHERE id = 2")
    run(resnapshotting, engine)
    assert_silver_equals(engine, resnapshotting, "items", private, "SELECT * FROM shop.items")


def test_a_run_following_the_binlog_carries_out_a_request(mariadb, database, engine,
                                                          make_pipeline):
    import time

    from tests.integration.helpers import state_log

    mariadb.execute("CREATE TABLE items (id INT PRIMARY KEY, v VARCHAR(40), n INT)",
                    "INSERT INTO items SELECT seq, 'v', seq FROM seq_1_to_3000", db=database)
    pipeline = make_pipeline(f"- name: items\n  source: {database}.items")
    follower = cli("run", pipeline.file)
    try:
        deadline = time.monotonic() + 120
        while not any(kind == "table" for kind, _, _ in state_log(pipeline.root)):
            assert time.monotonic() < deadline and follower.poll() is None
            time.sleep(0.5)
        mariadb.execute("UPDATE items SET v = 'before' WHERE id <= 10", db=database)
        cli("resnapshot", pipeline.file, wait=120)
        mariadb.execute("UPDATE items SET v = 'during' WHERE id > 2990", db=database)
        while not replaced(silver_path(pipeline, "items")):
            assert time.monotonic() < deadline and follower.poll() is None, \
                follower.stderr.read().decode()[-3000:] if follower.poll() is not None else ""
            time.sleep(0.5)
        mariadb.execute("DELETE FROM items WHERE id = 5", db=database)
        time.sleep(3)
    finally:
        follower.send_signal(signal.SIGTERM)
        assert follower.wait(timeout=120) == 0, follower.stderr.read().decode()[-3000:]
    run(pipeline, engine)
    assert_silver_equals(engine, pipeline, "items", mariadb, f"SELECT * FROM {database}.items")
    assert not checkpoint(engine, pipeline).table("items").resnapshot
