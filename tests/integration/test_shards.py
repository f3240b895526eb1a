"""A regex source merges shards into one silver table keyed by (key, _cdc_source_table)."""
import pytest

from cdc_sql.ops.verify import compare_table
from tests.integration.helpers import run

pytestmark = pytest.mark.integration


def test_shards_merge_into_one_silver_table(mariadb, database, engine, make_pipeline):
    for shard in ("orders_1", "orders_2", "orders_2_old"):
        mariadb.execute(f"CREATE TABLE {shard} (id INT PRIMARY KEY, amount INT)",
                        f"INSERT INTO {shard} SELECT seq, seq * 10 FROM seq_1_to_300", db=database)
    pipeline = make_pipeline(f"- name: orders\n  source: {database}\\.orders_[0-9]+")
    run(pipeline, engine)
    mariadb.execute("UPDATE orders_1 SET amount = -1 WHERE id = 5",
                    "DELETE FROM orders_2 WHERE id = 5",
                    "UPDATE orders_2_old SET amount = 0", db=database)
    run(pipeline, engine)
    silver = engine.read(f"{pipeline.root}/silver/orders")
    rows = {(r["_cdc_source_table"], r["id"]): r["amount"] for r in silver.collect()}
    assert len(rows) == 599  # 300 + 299, and nothing from orders_2_old
    assert rows[(f"{database}.orders_1", 5)] == -1
    assert (f"{database}.orders_2", 5) not in rows
    assert compare_table(engine, pipeline, pipeline.tables[0]) == ""


def test_keys_unique_across_shards_follow_a_row_that_moves(mariadb, database, engine,
                                                             make_pipeline):
    """With key_unique_across_shards the key alone identifies a row: moving it to another shard
    (delete there, then insert here) leaves one row, tagged with its new shard. The promise is
    the user's: were a key in two shards at once, the last change to it would win, a delete too."""
    mariadb.execute("CREATE TABLE users_1 (id INT PRIMARY KEY, name VARCHAR(20))",
                    "CREATE TABLE users_2 (id INT PRIMARY KEY, name VARCHAR(20))",
                    "INSERT INTO users_1 SELECT seq, CONCAT('u', seq) FROM seq_1_to_100",
                    "INSERT INTO users_2 SELECT seq, CONCAT('u', seq) FROM seq_101_to_200",
                    db=database)
    pipeline = make_pipeline(f"- name: users\n  source: {database}\\.users_[0-9]\n"
                             f"  key_unique_across_shards: true\n  history: true")
    run(pipeline, engine)
    mariadb.execute("BEGIN", "DELETE FROM users_1 WHERE id = 7",
                    "INSERT INTO users_2 VALUES (7, 'moved')", "COMMIT",
                    "DELETE FROM users_2 WHERE id = 150", "INSERT INTO users_1 VALUES (150, 'back')",
                    db=database)
    run(pipeline, engine)
    silver = engine.read(f"{pipeline.root}/silver/users")
    rows = {r["id"]: (r["_cdc_source_table"], r["name"]) for r in silver.collect()}
    assert len(rows) == 200
    assert rows[7] == (f"{database}.users_2", "moved")
    assert rows[150] == (f"{database}.users_1", "back")
    history = engine.read(f"{pipeline.root}/silver/users_history").where("id = 7") \
        .orderBy("_cdc_valid_from").collect()
    assert [(r["_cdc_source_table"], r["name"], r["_cdc_current"]) for r in history] == [
        (f"{database}.users_1", "u7", False), (f"{database}.users_2", "moved", True)]
    assert compare_table(engine, pipeline, pipeline.tables[0]) == ""
