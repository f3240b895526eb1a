"""Engine mode `remote` decides what the engine behind the URL can do by asking it: a Sail
server in a process of its own (`sail spark server`, SAIL_MODE=local-cluster) has no
OPTIMIZE or ALTER TABLE ADD COLUMNS, and cdc-sql does not use them there. (The JVM Spark
Connect server behind engine `remote` is CDC_SQL_TEST_ENGINE=cluster: scripts/test.sh.)"""
import pytest

from cdc_sql import engine as engines
from cdc_sql.dev.spark_cluster import SailServer
from cdc_sql.ops.maintain import maintain
from tests.engines import kind
from tests.integration.helpers import assert_silver_equals, history_path, run

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(kind() != "sail", reason="the default run starts its own "
                                 "Sail server")]


@pytest.fixture(scope="module")
def sail_remote():
    with SailServer() as server:
        started = engines.start("remote", server.url)
        yield started
        started.stop()


def test_a_sail_server_behind_remote_is_known_as_sail(sail_remote):
    assert sail_remote.kind == "sail" and sail_remote.version.startswith("0.")
    assert "sail" in sail_remote.describe() and "remote" in sail_remote.describe()


def test_plain_and_projected_tables_with_history_on_a_sail_server(mariadb, database, sail_remote,
                                                                  make_pipeline):
    """The runs that failed with `found OPTIMIZE` and `unsupported ALTER TABLE operation`
    when `remote` was taken to mean JVM Spark."""
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))",
                    "INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')", db=database)
    pipeline = make_pipeline(f"""
        - name: t
          source: {database}.t
        - name: p
          source: {database}.t
          projection: SELECT id, v FROM t WHERE id > 1
          history: true
        - name: h
          source: {database}.t
          history: true
        """)
    run(pipeline, sail_remote)
    mariadb.execute("UPDATE t SET v = 'B' WHERE id = 2", "DELETE FROM t WHERE id = 3",
                    "ALTER TABLE t ADD COLUMN w INT", "INSERT INTO t VALUES (4, 'd', 7)",
                    db=database)
    run(pipeline, sail_remote)
    assert_silver_equals(sail_remote, pipeline, "t", mariadb, f"SELECT * FROM {database}.t")
    assert_silver_equals(sail_remote, pipeline, "p", mariadb,
                         f"SELECT id, v FROM {database}.t WHERE id > 1")
    assert_silver_equals(sail_remote, pipeline, "h", mariadb, f"SELECT * FROM {database}.t")
    history = sail_remote.read(history_path(pipeline, "h"))  # a column added to it too
    assert "w" in history.columns and history.where("id = 2").count() == 2
    maintain(sail_remote, pipeline)  # no OPTIMIZE or VACUUM asked of Sail: skipped, said
