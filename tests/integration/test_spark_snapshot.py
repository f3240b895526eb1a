"""Snapshot splits as Spark tasks (`snapshot_runner: spark`): the same bronze and silver as the
in-process readers, the same watermark guarantee under writes, the same resume after a crash."""
import os
import signal
import subprocess
import sys
from dataclasses import replace

import pytest
from chispa import assert_df_equality

from cdc_sql.lake.lake import Lake
from tests.integration.helpers import assert_silver_equals, run, state_log
from tests.integration.writer import RandomWriter

pytestmark = pytest.mark.integration


@pytest.fixture
def items(mariadb, database):
    mariadb.execute("CREATE TABLE items (id INT PRIMARY KEY, v VARCHAR(40), n INT, "
                    "d DECIMAL(20,4), t DATETIME(6))",
                    "INSERT INTO items SELECT seq, CONCAT('v', seq), seq, seq / 7, "
                    "NOW(6) - INTERVAL seq SECOND FROM seq_1_to_20000", db=database)
    return database


def _bronze_rows(engine, pipeline, database):
    path = Lake(None, str(pipeline.root), None).snapshot_path(database, "items")
    return engine.read(path).drop("_cdc_attempt", "_cdc_read_at", "_cdc_watermark") \
        .orderBy("id")


def test_spark_tasks_land_what_the_in_process_readers_land(items, make_pipeline, engine,
                                                           mariadb, tmp_path):
    tables = f"- name: items\n  source: {items}.items"
    in_process = make_pipeline(tables, chunk_size=1500, startup="snapshot-only")
    run(in_process, engine)
    os.rename(tmp_path / "pipeline.yaml", tmp_path / "in_process.yaml")
    as_tasks = make_pipeline(tables, chunk_size=1500, startup="snapshot-only",
                             snapshot_runner="spark")
    as_tasks = replace(as_tasks, target=replace(as_tasks.target, path=f"{as_tasks.root}-tasks"))
    run(as_tasks, engine)
    splits = [v for kind, _, v in state_log(as_tasks.root) if kind == "split"
              and v["status"] == "done"]
    assert len(splits) == 14 and sum(s["rows"] for s in splits) == 20000
    assert_df_equality(_bronze_rows(engine, as_tasks, items),
                       _bronze_rows(engine, in_process, items))
    assert_silver_equals(engine, as_tasks, "items", mariadb, f"SELECT * FROM {items}.items")


def test_spark_tasks_under_writes_then_binlog(items, make_pipeline, engine, mariadb):
    pipeline = make_pipeline(f"- name: items\n  source: {items}.items", chunk_size=1000,
                             snapshot_runner="spark")
    writer = RandomWriter(mariadb, items, "items", 25000, seed=5)
    writer.start()
    try:
        run(pipeline, engine)
    finally:
        writer.stop()
    assert writer.committed > 0
    run(pipeline, engine)
    assert_silver_equals(engine, pipeline, "items", mariadb, f"SELECT * FROM {items}.items")


def test_a_crash_inside_a_task_rereads_the_splits(items, make_pipeline, engine, mariadb):
    pipeline = make_pipeline(f"- name: items\n  source: {items}.items", chunk_size=1000,
                             snapshot_runner="spark")
    process = subprocess.run(
        [sys.executable, "-m", "cdc_sql.cli", "run", pipeline.file, "--until-caught-up"],
        env={**os.environ, "TEST_MYSQL_PASSWORD": "cdc-secret",
             "CDC_SQL_KILL_AT": "split.written@2"}, capture_output=True, timeout=300)
    assert process.returncode == -signal.SIGKILL, process.stderr.decode()[-2000:]
    assert not [v for kind, _, v in state_log(pipeline.root)
                if kind == "split" and v["status"] == "done"]
    mariadb.execute("UPDATE items SET v = 'after the crash' WHERE id % 100 = 0", db=items)
    run(pipeline, engine)
    assert_silver_equals(engine, pipeline, "items", mariadb, f"SELECT * FROM {items}.items")
    bronze = _bronze_rows(engine, pipeline, items)
    assert bronze.count() == 20000  # rows of the killed job's attempts were dropped
