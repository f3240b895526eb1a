"""SIGKILL at random points of `cdc-sql run`, with a writer going, then silver equals the source."""
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from tests.integration.helpers import assert_silver_equals, run
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
