"""The source fails over to its GTID replica: capture resumes there by GTID, exactly once, or
stops saying why; it never reads a position on a server that did not write it."""
import os
import subprocess
import sys

import pytest

from cdc_sql.dev.mariadb import MariaDB
from cdc_sql.errors import SourceError
from cdc_sql.lake.lake import Lake
from tests.integration.helpers import assert_silver_equals, checkpoint, run, silver_path
from tests.integration.writer import RandomWriter

pytestmark = pytest.mark.integration
FLAGS = ["--log-slave-updates", "--gtid-strict-mode=1"]


@pytest.fixture
def pair():
    """A primary and its GTID replica, with a table of 3,000 rows on both."""
    primary = MariaDB(extra_flags=FLAGS).start()
    replica = MariaDB(extra_flags=[*FLAGS, "--server-id=2"]).start()
    try:
        replica.replicate_from(primary)
        primary.execute("CREATE DATABASE shop",
                        "CREATE TABLE shop.items (id INT PRIMARY KEY, v VARCHAR(40), n INT)")
        with primary.connect("shop") as conn, conn.cursor() as cur:
            cur.executemany("INSERT INTO items VALUES (%s, %s, %s)",
                            [(i, f"v{i}", i) for i in range(1, 3001)])
        replica.caught_up_with(primary)
        yield primary, replica
    finally:
        replica.stop()
        primary.stop()


def write(server, seed: int, transactions: int) -> None:
    writer = RandomWriter(server, "shop", "items", 4000, seed=seed,
                          max_transactions=transactions)
    writer.start()
    writer.join()


def test_capture_moves_to_the_promoted_replica_by_gtid(pair, engine, make_pipeline, caplog):
    primary, replica = pair
    old = make_pipeline("- name: items\n  source: shop.items", port=primary.port,
                        server_id=7001)
    write(primary, seed=1, transactions=300)
    assert run(old, engine)["outcome"] == "ok"
    write(primary, seed=2, transactions=300)  # the replica gets these, capture does not
    replica.caught_up_with(primary)
    primary.kill()
    replica.promote()
    write(replica, seed=3, transactions=300)  # the new primary's own, in its own binlog

    moved = make_pipeline("- name: items\n  source: shop.items", port=replica.port,
                          server_id=7001)
    assert run(moved, engine)["outcome"] == "ok"
    assert "capture resumes by GTID" in caplog.text and "server_id=2" in caplog.text
    assert_silver_equals(engine, moved, "items", replica, "SELECT id, v, n FROM shop.items")
    capture = checkpoint(engine, moved).capture
    assert capture.server == "server_id=2" and capture.gtid.startswith("0-2-")

    write(replica, seed=4, transactions=200)  # and on from there by position
    caplog.clear()
    assert run(moved, engine)["outcome"] == "ok"
    assert "capture resumes by GTID" not in caplog.text
    assert_silver_equals(engine, moved, "items", replica, "SELECT id, v, n FROM shop.items")
    changes = engine.read(Lake(None, str(moved.root), None).changes_path("shop", "items"))
    assert changes.count() == changes.select("_cdc_offset", "_cdc_op").distinct().count()


def test_a_replica_that_was_behind_stops_the_run_and_silver_stays(pair, engine, make_pipeline):
    primary, replica = pair
    replica.execute("STOP SLAVE")
    pipeline = make_pipeline("- name: items\n  source: shop.items", port=primary.port,
                             server_id=7002)
    write(primary, seed=5, transactions=200)  # captured, never replicated
    assert run(pipeline, engine)["outcome"] == "ok"
    before = engine.read(silver_path(pipeline, "items")).count()
    primary.kill()
    replica.promote()
    write(replica, seed=6, transactions=50)

    moved = make_pipeline("- name: items\n  source: shop.items", port=replica.port,
                          server_id=7002)
    with pytest.raises(SourceError, match=r"server_id=2.*lacks transactions.*behind"):
        run(moved, engine)
    assert engine.read(silver_path(moved, "items")).count() == before
    # the way out it names: every table read again, capture starting over on this server
    env = {**os.environ, "TEST_MYSQL_PASSWORD": "cdc-secret"}
    subprocess.run([sys.executable, "-m", "cdc_sql.cli", "resnapshot", moved.file], env=env,
                   check=True, capture_output=True, timeout=120)
    write(replica, seed=7, transactions=50)
    assert run(moved, engine)["outcome"] == "ok"
    assert_silver_equals(engine, moved, "items", replica, "SELECT id, v, n FROM shop.items")
    capture = checkpoint(engine, moved).capture
    assert capture.server == "server_id=2"
    write(replica, seed=8, transactions=50)  # and it goes on from there
    run(moved, engine)
    assert_silver_equals(engine, moved, "items", replica, "SELECT id, v, n FROM shop.items")
