"""A regex source merges shards into one silver table keyed by (key, _cdc_source_table)."""
import pytest

from cdc_sql.verify import compare_table
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
