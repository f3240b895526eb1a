"""DDL while the pipeline runs: silver (and history) follow the source after each change.

ADD COLUMN (older rows NULL), DROP COLUMN (kept in silver, NULL for rows changed from then on),
RENAME COLUMN (the new name, filled from the old), widening MODIFY (rewritten), an incompatible
MODIFY (stops with what to do), TRUNCATE (silver emptied), and a new shard table picked up --
each with writes before and after the DDL in the same run.
"""
import pytest

from cdc_sql.errors import SourceError
from cdc_sql.ops.verify import compare_table
from tests.integration.helpers import history_path, run, silver_path

pytestmark = pytest.mark.integration


def silver(engine, pipeline, name: str, columns: list[str]) -> list[tuple]:
    rows = engine.read(silver_path(pipeline, name)).select(*columns).orderBy(columns[0])
    return [tuple(r) for r in rows.collect()]


def source(mariadb, database: str, sql: str) -> list[tuple]:
    return [tuple(r) for r in mariadb.query(sql.format(db=database))]


def test_add_drop_rename_modify_truncate_between_writes(mariadb, database, engine, make_pipeline):
    mariadb.execute("CREATE TABLE items (id INT PRIMARY KEY, a VARCHAR(10), b INT, n SMALLINT, "
                    "d DECIMAL(6,2))",
                    "INSERT INTO items SELECT seq, CONCAT('a', seq), seq, seq, seq / 4 "
                    "FROM seq_1_to_40", db=database)
    pipeline = make_pipeline(f"- name: items\n  source: {database}.items\n  history: true")
    run(pipeline, engine)

    mariadb.execute("UPDATE items SET a = 'before' WHERE id = 1",
                    "ALTER TABLE items ADD COLUMN c DATETIME(3) NULL",
                    "UPDATE items SET c = '2024-01-01 00:00:00.5', a = 'after' WHERE id <= 5",
                    "INSERT INTO items VALUES (100, 'new', 1, 1, 1.5, '2024-02-02 00:00:00')",
                    db=database)
    run(pipeline, engine)
    columns = ["id", "a", "b", "n", "d", "c"]
    assert silver(engine, pipeline, "items", columns) == source(
        mariadb, database, "SELECT id, a, b, n, d, c FROM {db}.items ORDER BY id")

    mariadb.execute("ALTER TABLE items DROP COLUMN b",
                    "UPDATE items SET a = 'post-drop' WHERE id IN (7, 100)", db=database)
    run(pipeline, engine)
    columns = ["id", "a", "n", "d", "c"]
    assert silver(engine, pipeline, "items", columns) == source(
        mariadb, database, "SELECT id, a, n, d, c FROM {db}.items ORDER BY id")
    dropped = dict(silver(engine, pipeline, "items", ["id", "b"]))
    assert dropped[7] is None and dropped[100] is None and dropped[8] == 8  # kept, NULL from then on

    mariadb.execute("UPDATE items SET a = 'pre-rename' WHERE id = 9",
                    "ALTER TABLE items RENAME COLUMN a TO label",
                    "UPDATE items SET label = 'renamed' WHERE id = 10", db=database)
    run(pipeline, engine)
    columns = ["id", "label", "n", "d", "c"]
    assert silver(engine, pipeline, "items", columns) == source(
        mariadb, database, "SELECT id, label, n, d, c FROM {db}.items ORDER BY id")

    mariadb.execute("UPDATE items SET n = 7 WHERE id = 11",
                    "ALTER TABLE items MODIFY n BIGINT, MODIFY d DECIMAL(10,4), "
                    "MODIFY label VARCHAR(40)",
                    "UPDATE items SET n = 9000000000, d = 123456.1234, "
                    "label = 'a longer label than before' WHERE id = 12", db=database)
    run(pipeline, engine)
    assert silver(engine, pipeline, "items", columns) == source(
        mariadb, database, "SELECT id, label, n, d, c FROM {db}.items ORDER BY id")
    history = engine.read(history_path(pipeline, "items"))
    assert {"label", "c", "b"} <= set(history.columns)
    current = [tuple(r) for r in history.where("_cdc_current").select(*columns).orderBy("id").collect()]
    assert current == silver(engine, pipeline, "items", columns)

    mariadb.execute("INSERT INTO items (id, label) VALUES (200, 'gone soon')",
                    "TRUNCATE TABLE items",
                    "INSERT INTO items (id, label) VALUES (201, 'after truncate')", db=database)
    run(pipeline, engine)
    assert silver(engine, pipeline, "items", columns) == source(
        mariadb, database, "SELECT id, label, n, d, c FROM {db}.items ORDER BY id")
    assert [r[0] for r in silver(engine, pipeline, "items", columns)] == [201]
    history = engine.read(history_path(pipeline, "items"))
    assert [r.id for r in history.where("_cdc_current").collect()] == [201]
    ended = history.where("id = 12 AND NOT _cdc_current").orderBy("_cdc_valid_from").collect()[-1]
    assert ended._cdc_valid_to is not None and ended._cdc_valid_to_ts is not None

    mariadb.execute("ALTER TABLE items MODIFY n TINYINT", db=database)  # narrowing
    with pytest.raises(SourceError, match=r"column `n` of items changed type.*from bigint to "
                                          r"tinyint.*Re-snapshot the table"):
        run(pipeline, engine)

    mariadb.execute("DROP TABLE items", db=database)
    with pytest.raises(SourceError, match=r"no source table matches .*dropped or renamed"):
        run(pipeline, engine)


@pytest.mark.parametrize("kind", ["history", "projection", "text key"])
def test_a_pass_bounded_by_window_bytes_goes_on_to_a_ddl_ahead(mariadb, database, engine,
                                                                 make_pipeline, kind):
    """A run reads the tables' definitions as they are when it starts, after every DDL of its
    backlog; a capture pass that ended at `engine.window_bytes` between some changes and a
    RENAME COLUMN would have its window merged with the new name before the rename reached
    silver: the new name as a new column, every value held under the old one lost (the
    window after a pass cut at every transaction here). Where a DDL of a captured table lies
    ahead, before the definitions were read, the pass goes on to it. Each way the engine may
    merge a window of any size: history, a projection, a text key (no key ranges)."""
    import dataclasses

    key = "VARCHAR(8)" if kind == "text key" else "INT"
    mariadb.execute(f"CREATE TABLE items (id {key} PRIMARY KEY, a VARCHAR(10), n INT)",
                    "INSERT INTO items SELECT seq, CONCAT('a', seq), seq FROM seq_1_to_10",
                    db=database)
    extra = {"history": "\n  history: true",
             "projection": "\n  projection: SELECT * FROM items WHERE n >= 0"}.get(kind, "")
    pipeline = make_pipeline(f"- name: items\n  source: {database}.items{extra}")
    pipeline = dataclasses.replace(pipeline, engine=dataclasses.replace(pipeline.engine,
                                                                        window_bytes=1))
    run(pipeline, engine)
    mariadb.execute("UPDATE items SET a = 'pre' WHERE id = 9",
                    "ALTER TABLE items RENAME COLUMN a TO label",
                    "UPDATE items SET label = 'renamed' WHERE id = 10",
                    "UPDATE items SET n = 0 WHERE id = 8", db=database)
    run(pipeline, engine)
    assert silver(engine, pipeline, "items", ["id", "label", "n"]) == source(
        mariadb, database, "SELECT id, label, n FROM {db}.items ORDER BY id")


def test_a_run_stopped_short_of_a_ddl_its_definitions_are_from_after_merges_nothing(
        mariadb, database, engine, make_pipeline, monkeypatch):
    """A run asked to stop (a following run's SIGTERM) ends its pass where it stands; if a DDL
    it has not reached lies before the point where it read the tables' definitions, its
    window is not merged (it would be with the new definitions: a column renamed there would
    lose its values). The next run reads the definitions again and reaches the DDL."""
    import threading

    from cdc_sql import faults
    from cdc_sql.run.runner import Runner

    mariadb.execute("CREATE TABLE items (id INT PRIMARY KEY, a VARCHAR(10), n INT)",
                    "INSERT INTO items SELECT seq, CONCAT('a', seq), seq FROM seq_1_to_10",
                    db=database)
    pipeline = make_pipeline(f"- name: items\n  source: {database}.items", binlog_batch_rows=1)
    run(pipeline, engine)
    mariadb.execute("UPDATE items SET a = 'pre' WHERE id = 9",
                    "UPDATE items SET a = 'pre' WHERE id = 8",
                    "ALTER TABLE items RENAME COLUMN a TO label",
                    "UPDATE items SET label = 'renamed' WHERE id = 10", db=database)
    stop, point = threading.Event(), faults.point
    monkeypatch.setattr(faults, "point", lambda name: (
        stop.set() if name == "bronze.appended" else None, point(name)))
    stopped = Runner(pipeline, engine, stop).run(until_caught_up=False)
    monkeypatch.undo()
    assert stopped.outcome == "stopped"
    assert silver(engine, pipeline, "items", ["id", "a"])[7:9] == [(8, "a8"), (9, "a9")]
    run(pipeline, engine)
    assert silver(engine, pipeline, "items", ["id", "label", "n"]) == source(
        mariadb, database, "SELECT id, label, n FROM {db}.items ORDER BY id")


def test_a_new_shard_created_while_running_is_picked_up(mariadb, database, engine, make_pipeline):
    mariadb.execute("CREATE TABLE orders_1 (id INT PRIMARY KEY, amount INT)",
                    "INSERT INTO orders_1 SELECT seq, seq FROM seq_1_to_20", db=database)
    pipeline = make_pipeline(f"- name: orders\n  source: {database}\\.orders_[0-9]+")
    run(pipeline, engine)
    mariadb.execute("CREATE TABLE orders_2 (id INT PRIMARY KEY, amount INT)",
                    "INSERT INTO orders_2 SELECT seq, -seq FROM seq_1_to_5",
                    "UPDATE orders_1 SET amount = 0 WHERE id = 1", db=database)
    run(pipeline, engine)
    rows = silver(engine, pipeline, "orders", ["_cdc_source_table", "id", "amount"])
    assert len(rows) == 25
    assert (f"{database}.orders_2", 3, -3) in rows and (f"{database}.orders_1", 1, 0) in rows
    # a table that already holds rows begins to match: it is snapshotted, then followed
    mariadb.execute("CREATE TABLE staged (id INT PRIMARY KEY, amount INT)",
                    "INSERT INTO staged SELECT seq, 100 + seq FROM seq_1_to_30", db=database)
    run(pipeline, engine)
    mariadb.execute("RENAME TABLE staged TO orders_3",
                    "UPDATE orders_3 SET amount = 0 WHERE id = 30",
                    "UPDATE orders_2 SET amount = 1 WHERE id = 1", db=database)
    run(pipeline, engine)
    run(pipeline, engine)  # the new table's watermark came after this run's end: merged now
    rows = silver(engine, pipeline, "orders", ["_cdc_source_table", "id", "amount"])
    assert len(rows) == 55
    assert (f"{database}.orders_3", 30, 0) in rows and (f"{database}.orders_3", 29, 129) in rows
    assert (f"{database}.orders_2", 1, 1) in rows
    assert compare_table(engine, pipeline, pipeline.tables[0]) == ""
