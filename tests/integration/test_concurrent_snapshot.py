"""A random writer during the snapshot (chunk_size 500, parallelism 2): silver equals the source."""
import time

import pytest

from tests.integration.helpers import assert_silver_equals, run
from tests.integration.writer import RandomWriter

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("reader", ["native", "pymysql"])
def test_writes_during_snapshot(mariadb, database, engine, make_pipeline, reader):
    mariadb.execute("CREATE TABLE items (id INT PRIMARY KEY, v VARCHAR(40), n INT)",
                    "INSERT INTO items SELECT seq, CONCAT('v', seq), seq FROM seq_1_to_30000",
                    db=database)
    pipeline = make_pipeline(f"- name: items\n  source: {database}.items", chunk_size=500,
                             parallelism=2, snapshot_reader=reader)
    writer = RandomWriter(mariadb, database, "items", 35000, seed=11)
    writer.start()
    try:
        started = time.monotonic()  # writing already, so that the snapshot (quicker than the
        while writer.committed < 20 and time.monotonic() - started < 30:  # writer) meets it
            time.sleep(0.01)
        run(pipeline, engine)  # snapshot (60 splits) and binlog while the writer goes on
    finally:
        writer.stop()
    assert writer.committed > 100
    run(pipeline, engine)
    assert_silver_equals(engine, pipeline, "items", mariadb, f"SELECT * FROM {database}.items")
