"""Foreign-key cascades reach silver: InnoDB's ON DELETE/UPDATE CASCADE and SET NULL change
child rows without a binlog event; cdc-sql applies them at the parent change's offset."""
import os
import random
import signal
import subprocess
import sys
import threading

import pymysql
import pytest

from cdc_sql.source.preflight import inspect_source
from tests.integration.helpers import assert_silver_equals, history_path, run, silver_path

pytestmark = pytest.mark.integration

SCHEMA = [
    "CREATE TABLE parent (id INT PRIMARY KEY, name VARCHAR(20))",
    "CREATE TABLE child (id INT PRIMARY KEY, parent_id INT, other_id INT, v INT, "
    "CONSTRAINT fk_child FOREIGN KEY (parent_id) REFERENCES parent (id) "
    "ON DELETE CASCADE ON UPDATE CASCADE, "
    "CONSTRAINT fk_other FOREIGN KEY (other_id) REFERENCES parent (id) "
    "ON DELETE SET NULL ON UPDATE SET NULL)",
    "CREATE TABLE link (parent_id INT, n INT, v INT, PRIMARY KEY (parent_id, n), "
    "CONSTRAINT fk_link FOREIGN KEY (parent_id) REFERENCES parent (id) "
    "ON DELETE CASCADE ON UPDATE CASCADE)",
]
TABLES = """
- name: parent
  source: {db}.parent
- name: child
  source: {db}.child
  history: true
- name: link
  source: {db}.link
"""


def equal(engine, pipeline, mariadb, database):
    assert_silver_equals(engine, pipeline, "parent", mariadb, f"SELECT * FROM {database}.parent")
    assert_silver_equals(engine, pipeline, "child", mariadb, f"SELECT * FROM {database}.child")
    assert_silver_equals(engine, pipeline, "link", mariadb, f"SELECT * FROM {database}.link",
                         key="parent_id, n")


def run_killed_at(pipeline, point: str) -> None:
    """`cdc-sql run` in a child that SIGKILLs itself at `point` (cdc_sql/faults.py)."""
    env = {**os.environ, "TEST_MYSQL_PASSWORD": "cdc-secret", "CDC_SQL_KILL_AT": point}
    killed = subprocess.run([sys.executable, "-m", "cdc_sql.cli", "run", pipeline.file,
                             "--until-caught-up"], env=env, capture_output=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]


def run_under_writer(mariadb, database, pipeline, engine, change) -> None:
    """Three runs while `change(cur)` is made again and again on one autocommit connection (a
    change that meets a row gone since is skipped); then a run after the writer stopped."""
    stop, done = threading.Event(), []

    def write():
        with mariadb.connect(database) as conn, conn.cursor() as cur:
            while not stop.is_set():
                try:
                    change(cur)
                    done.append(True)
                except pymysql.err.IntegrityError:
                    pass  # a parent that is gone

    writer = threading.Thread(target=write)
    writer.start()
    try:
        for _ in range(3):
            run(pipeline, engine)
    finally:
        stop.set()
        writer.join()
    assert len(done) > 50
    run(pipeline, engine)


def collected_by(module, engine, monkeypatch) -> list:
    """A list that gains an item for every query whose rows code in `module` collects."""
    kind, said = type(engine.spark.range(1)), []
    collect = kind.collect

    def counted(self, *args, **kwargs):
        if sys._getframe(1).f_code.co_filename == module.__file__:
            said.append(module.__name__)
        return collect(self, *args, **kwargs)

    monkeypatch.setattr(kind, "collect", counted)
    return said


def test_cascades_reach_child_silver_and_history(mariadb, database, engine, make_pipeline,
                                                 monkeypatch):
    from cdc_sql.lake.silver import cascade_rows

    mariadb.execute(*SCHEMA,
                    "INSERT INTO parent SELECT seq, CONCAT('p', seq) FROM seq_1_to_20",
                    "INSERT INTO child SELECT seq, 1 + seq % 20, 1 + (seq * 7) % 20, seq "
                    "FROM seq_1_to_8000",
                    "INSERT INTO link SELECT 1 + seq % 20, seq, seq FROM seq_1_to_400",
                    db=database)
    pipeline = make_pipeline(TABLES.format(db=database))
    assert not [w for w in inspect_source(pipeline).warnings if "foreign key" in w]
    shown = subprocess.run([sys.executable, "-m", "cdc_sql.cli", "plan", pipeline.file],
                           env={**os.environ, "TEST_MYSQL_PASSWORD": "cdc-secret"},
                           capture_output=True, text=True, check=True).stdout
    assert "foreign key `fk_child` (ON UPDATE CASCADE, ON DELETE CASCADE from" in shown
    assert "cdc_images_child_x: the rows foreign-key cascades changed" in shown
    run(pipeline, engine)
    mariadb.execute("UPDATE parent SET id = 100 WHERE id = 1",   # 400 child rows, link keys
                    "DELETE FROM parent WHERE id = 2",           # cascade and SET NULL
                    "UPDATE child SET v = -1 WHERE parent_id = 100 AND id < 100",  # own change
                    "UPDATE parent SET id = 101 WHERE id = 100",  # the same rows again
                    "UPDATE parent SET name = 'renamed' WHERE id = 3",  # no key change
                    db=database)
    with mariadb.connect(database) as conn, conn.cursor() as cur:  # InnoDB cascades nothing
        cur.execute("SET SESSION foreign_key_checks = 0")
        cur.execute("DELETE FROM parent WHERE id = 4")
        cur.execute("UPDATE parent SET id = 104 WHERE id = 5")
    assert mariadb.query(f"SELECT COUNT(*) FROM {database}.child WHERE parent_id = 4")[0][0] > 0
    queries = collected_by(cascade_rows, engine, monkeypatch)
    run(pipeline, engine)
    equal(engine, pipeline, mariadb, database)
    assert len(queries) == 4  # child and link: the parent's key changes, the rows reached
    versions = engine.read(history_path(pipeline, "child")).where("id = 20").orderBy(
        "_cdc_valid_from").select("parent_id", "v", "_cdc_current").collect()
    assert [tuple(r) for r in versions] == [(1, 20, False), (100, 20, False), (100, -1, False),
                                            (101, -1, True)]


def test_a_writer_with_cascades_during_snapshot_and_binlog(mariadb, database, engine,
                                                          make_pipeline):
    mariadb.execute(*SCHEMA,
                    "INSERT INTO parent SELECT seq, 'p' FROM seq_1_to_300",
                    "INSERT INTO child SELECT seq, 1 + seq % 300, 1 + (seq * 7) % 300, seq "
                    "FROM seq_1_to_30000",
                    "INSERT INTO link SELECT 1 + seq % 300, seq, seq FROM seq_1_to_3000",
                    db=database)
    pipeline = make_pipeline(TABLES.format(db=database), chunk_size=2000)
    rng, next_key = random.Random(5), 1000

    def change(cur) -> None:
        nonlocal next_key
        parent = rng.randint(1, next_key)
        choice = rng.random()
        if choice < 0.3:
            next_key += 1
            cur.execute("UPDATE parent SET id = %s WHERE id = %s", (next_key, parent))
        elif choice < 0.5:
            cur.execute("DELETE FROM parent WHERE id = %s", (parent,))
        elif choice < 0.7:
            next_key += 1
            cur.execute("INSERT INTO parent VALUES (%s, 'new')", (next_key,))
            cur.execute("INSERT INTO child SELECT MAX(id) + 1, %s, NULL, 0 FROM child",
                        (next_key,))
        else:
            cur.execute("UPDATE child SET v = v + 1, other_id = %s WHERE id = %s",
                        (parent, rng.randint(1, 30000)))

    run_under_writer(mariadb, database, pipeline, engine, change)
    equal(engine, pipeline, mariadb, database)


@pytest.mark.parametrize("point", ["silver.merged", "history.staged", "state.committed"])
def test_a_kill_after_the_merge_replays_the_same_cascades(mariadb, database, engine,
                                                          make_pipeline, point):
    """Killed between the child's MERGE and its state commit, the next run replays the window:
    it works out the cascades again from silver as of the recorded version, not as merged."""
    mariadb.execute(*SCHEMA,
                    "INSERT INTO parent SELECT seq, 'p' FROM seq_1_to_10",
                    "INSERT INTO child SELECT seq, 1 + seq % 10, 1 + seq % 7, seq "
                    "FROM seq_1_to_200",
                    "INSERT INTO link SELECT 1 + seq % 10, seq, seq FROM seq_1_to_50",
                    db=database)
    pipeline = make_pipeline(TABLES.format(db=database))
    run(pipeline, engine)
    mariadb.execute("UPDATE parent SET id = 50 WHERE id = 1", "DELETE FROM parent WHERE id = 2",
                    "UPDATE child SET v = -v WHERE parent_id = 50 AND id < 50",
                    "UPDATE parent SET id = 51 WHERE id = 50", db=database)
    run_killed_at(pipeline, point)
    mariadb.execute("DELETE FROM parent WHERE id = 51", db=database)  # and more after it
    run(pipeline, engine)
    equal(engine, pipeline, mariadb, database)
    history = engine.read(history_path(pipeline, "child")).where("id = 10").orderBy(
        "_cdc_valid_from").select("parent_id", "v", "_cdc_current").collect()
    assert [tuple(r) for r in history] == [(1, 10, False), (50, 10, False), (50, -10, False),
                                           (51, -10, False)]


TWO_TABLES = """
- name: parent
  source: {db}.parent
- name: child
  source: {db}.child
"""


def test_a_replay_reads_silver_as_of_a_version_behind_its_last_checkpoint(mariadb, database,
                                                                         engine, make_pipeline):
    """The replay after a kill between MERGE and state commit reads silver as of the recorded
    version though a checkpoint was written after it (Sail 0.7 cannot time-travel there: found
    by the chaos run, whose replays pushed silver past a checkpoint)."""
    from deltalake import DeltaTable

    mariadb.execute(*SCHEMA, "INSERT INTO parent SELECT seq, 'p' FROM seq_1_to_10",
                    "INSERT INTO child SELECT seq, 1 + seq % 10, NULL, seq FROM seq_1_to_100",
                    db=database)
    pipeline = make_pipeline(TWO_TABLES.format(db=database))
    run(pipeline, engine)
    for n in range(2):
        mariadb.execute(f"UPDATE child SET v = v + 1 WHERE id % 3 = {n}", db=database)
        run(pipeline, engine)
    silver = DeltaTable(silver_path(pipeline, "child"))
    recorded = silver.version()
    assert recorded >= 2  # versions 0 and 1 Sail reads whatever the checkpoints
    mariadb.execute("UPDATE parent SET id = 50 WHERE id = 1", "DELETE FROM parent WHERE id = 2",
                    db=database)
    run_killed_at(pipeline, "silver.merged@2")  # the parent's MERGE is the first
    silver = DeltaTable(silver_path(pipeline, "child"))
    assert silver.version() == recorded + 1
    silver.create_checkpoint()  # as a maintenance job may; Sail writes one every 10 commits
    run(pipeline, engine)
    assert_silver_equals(engine, pipeline, "parent", mariadb, f"SELECT * FROM {database}.parent")
    assert_silver_equals(engine, pipeline, "child", mariadb, f"SELECT * FROM {database}.child")


NESTED = [
    "CREATE TABLE customer (id INT PRIMARY KEY, name VARCHAR(20))",
    "CREATE TABLE orders (customer_id INT, order_no INT, total INT, "
    "PRIMARY KEY (customer_id, order_no), KEY by_no (order_no, customer_id), "
    "CONSTRAINT fk_orders FOREIGN KEY (customer_id) "
    "REFERENCES customer (id) ON DELETE CASCADE ON UPDATE CASCADE)",
    "CREATE TABLE item (customer_id INT, order_no INT, n INT, qty INT, "
    "PRIMARY KEY (customer_id, order_no, n), CONSTRAINT fk_item FOREIGN KEY "
    "(customer_id, order_no) REFERENCES orders (customer_id, order_no) "
    "ON DELETE CASCADE ON UPDATE CASCADE)",
    "CREATE TABLE note (id INT PRIMARY KEY, customer_id INT, order_no INT, body VARCHAR(20), "
    "CONSTRAINT fk_note FOREIGN KEY (order_no, customer_id) REFERENCES orders "
    "(order_no, customer_id) ON DELETE SET NULL ON UPDATE CASCADE)",
]
NESTED_TABLES = """
- name: customer
  source: {db}.customer
- name: orders
  source: {db}.orders
- name: item
  source: {db}.item
  history: true
- name: note
  source: {db}.note
"""


GRANDCHILDREN_FIRST = """
- name: item
  source: {db}.item
- name: note
  source: {db}.note
- name: orders
  source: {db}.orders
- name: customer
  source: {db}.customer
"""


def nested_equal(engine, pipeline, mariadb, database):
    for name, key in (("customer", "id"), ("orders", "customer_id, order_no"),
                      ("item", "customer_id, order_no, n"), ("note", "id")):
        assert_silver_equals(engine, pipeline, name, mariadb, f"SELECT * FROM {database}.{name}",
                             key=key)


def test_cascades_set_off_by_cascades_reach_the_grandchildren(mariadb, database, engine,
                                                               make_pipeline):
    mariadb.execute(*NESTED,
                    "INSERT INTO customer SELECT seq, 'c' FROM seq_1_to_10",
                    "INSERT INTO orders SELECT 1 + seq % 10, seq, seq FROM seq_1_to_100",
                    "INSERT INTO item SELECT 1 + seq % 10, seq, 1, seq FROM seq_1_to_100",
                    "INSERT INTO item SELECT 1 + seq % 10, seq, 2, seq FROM seq_1_to_100",
                    "INSERT INTO note SELECT seq, 1 + seq % 10, seq, 'n' FROM seq_1_to_100",
                    db=database)
    pipeline = make_pipeline(NESTED_TABLES.format(db=database))
    from cdc_sql.lake.silver.plan import cascade_warnings, silver_plans

    view = inspect_source(pipeline)
    assert not cascade_warnings(silver_plans(pipeline, view), view)
    run(pipeline, engine)
    mariadb.execute("UPDATE customer SET id = 100 WHERE id = 1",   # orders, items re-keyed
                    "DELETE FROM customer WHERE id = 2",           # orders, items go; notes NULL
                    "UPDATE item SET qty = -1 WHERE customer_id = 100",
                    "UPDATE customer SET id = 101 WHERE id = 100",  # again, after own changes
                    "DELETE FROM orders WHERE customer_id = 3 AND order_no = 2",  # one level
                    db=database)
    run(pipeline, engine)
    nested_equal(engine, pipeline, mariadb, database)
    history = engine.read(history_path(pipeline, "item")).where("order_no = 10 AND n = 1") \
        .orderBy("_cdc_valid_from").select("customer_id", "qty", "_cdc_current").collect()
    assert [tuple(r) for r in history] == [(1, 10, False), (100, 10, False), (100, -1, False),
                                           (101, -1, True)]


def test_a_writer_with_nested_cascades_during_snapshot_and_binlog(mariadb, database, engine,
                                                                  make_pipeline):
    mariadb.execute(*NESTED,
                    "INSERT INTO customer SELECT seq, 'c' FROM seq_1_to_400",
                    "INSERT INTO orders SELECT 1 + seq % 400, seq, seq FROM seq_1_to_8000",
                    "INSERT INTO item SELECT 1 + seq % 400, seq, 1, seq FROM seq_1_to_8000",
                    "INSERT INTO item SELECT 1 + seq % 400, seq, 2, seq FROM seq_1_to_8000",
                    "INSERT INTO note SELECT seq, 1 + seq % 400, seq, 'n' FROM seq_1_to_8000",
                    db=database)
    # the grandchildren first: without levels, their splits would be read before the orders'
    # many key ranges read at once: a customer re-keyed between their reads moves its orders
    # from one range to another (hence orders and items are read whole, in one read)
    pipeline = make_pipeline(GRANDCHILDREN_FIRST.format(db=database), chunk_size=500,
                             parallelism=4)
    rng, next_key = random.Random(11), 1000

    def change(cur) -> None:
        nonlocal next_key
        customer = rng.randint(1, next_key)
        choice = rng.random()
        if choice < 0.35:
            next_key += 1
            cur.execute("UPDATE customer SET id = %s WHERE id = %s", (next_key, customer))
        elif choice < 0.6:
            cur.execute("DELETE FROM customer WHERE id = %s", (customer,))
        elif choice < 0.8:
            cur.execute("UPDATE item SET qty = qty + 1 WHERE customer_id = %s", (customer,))
        else:
            next_key += 1
            cur.execute("INSERT INTO customer VALUES (%s, 'new')", (next_key,))
            cur.execute("INSERT INTO orders VALUES (%s, 1, 0)", (next_key,))
            cur.execute("INSERT INTO item VALUES (%s, 1, 1, 0)", (next_key,))

    run_under_writer(mariadb, database, pipeline, engine, change)
    nested_equal(engine, pipeline, mariadb, database)


def test_a_self_reference_cascades_through_a_subtree(mariadb, database, engine, make_pipeline):
    mariadb.execute("CREATE TABLE employee (id INT PRIMARY KEY, boss INT, mentor INT, "
                    "CONSTRAINT fk_boss FOREIGN KEY (boss) REFERENCES employee (id) "
                    "ON DELETE CASCADE ON UPDATE CASCADE, CONSTRAINT fk_mentor FOREIGN KEY "
                    "(mentor) REFERENCES employee (id) ON DELETE SET NULL)",
                    "INSERT INTO employee VALUES (1, NULL, NULL)",
                    "INSERT INTO employee SELECT seq, seq DIV 2, IF(seq > 8, 1 + seq % 7, NULL) "
                    "FROM seq_2_to_200",
                    db=database)
    pipeline = make_pipeline(f"- name: employee\n  source: {database}.employee")
    run(pipeline, engine)
    # 3's subtree goes, depth first; whoever 3, 6, 7 ... mentored has mentor NULL (InnoDB
    # refuses an ON UPDATE CASCADE that comes back to its own table)
    mariadb.execute("DELETE FROM employee WHERE id = 3", db=database)
    run(pipeline, engine)
    assert_silver_equals(engine, pipeline, "employee", mariadb,
                         f"SELECT * FROM {database}.employee")


def test_maintain_keeps_the_parent_changes_a_child_has_not_applied(mariadb, database, engine,
                                                                   make_pipeline):
    import dataclasses

    from cdc_sql.lake.lake import Lake
    from cdc_sql.lake.state import State
    from cdc_sql.ops.maintain import maintain
    from tests.integration.helpers import checkpoint

    mariadb.execute(*SCHEMA, "INSERT INTO parent SELECT seq, 'p' FROM seq_1_to_10",
                    "INSERT INTO child SELECT seq, 1 + seq % 10, NULL, seq FROM seq_1_to_50",
                    db=database)
    pipeline = make_pipeline(TABLES.format(db=database))
    run(pipeline, engine)
    before = checkpoint(engine, pipeline).table("child")
    mariadb.execute("DELETE FROM parent WHERE id = 1", db=database)
    run(pipeline, engine)
    state = State(Lake.open(engine, str(pipeline.root)))  # the child lags behind its parent
    state.write(dataclasses.replace(checkpoint(engine, pipeline).table("child"),
                                    applied=before.applied, silver_version=before.silver_version))
    maintain(engine, pipeline, retention_hours=0)
    changes = Lake(None, str(pipeline.root), None).changes_path(database, "parent")
    assert engine.read(changes).where("_cdc_op = 'd'").count() == 1


def test_a_user_with_only_the_grants_validate_asks_for_sees_the_rules(mariadb, database, engine,
                                                                      make_pipeline):
    """MariaDB shows such a user no rows of information_schema.REFERENTIAL_CONSTRAINTS: the
    rules come from SHOW CREATE TABLE (the chaos run found cascades silently not applied)."""
    from cdc_sql.dev.mariadb import PASSWORD

    user = f"least_{database}"
    mariadb.execute(*SCHEMA, "INSERT INTO parent SELECT seq, 'p' FROM seq_1_to_10",
                    "INSERT INTO child SELECT seq, 1 + seq % 10, 1 + seq % 9, seq "
                    "FROM seq_1_to_100",
                    f"CREATE USER '{user}'@'%' IDENTIFIED BY '{PASSWORD}'",
                    f"GRANT SELECT ON `{database}`.* TO '{user}'@'%'",
                    f"GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '{user}'@'%'", db=database)
    try:
        pipeline = make_pipeline(TABLES.format(db=database), user=user)
        assert {fk.name for fk in inspect_source(pipeline).foreign_keys} == \
            {"fk_child", "fk_other", "fk_link"}
        run(pipeline, engine)
        mariadb.execute("UPDATE parent SET id = 50 WHERE id = 1",
                        "DELETE FROM parent WHERE id = 2", db=database)
        run(pipeline, engine)
        equal(engine, pipeline, mariadb, database)
    finally:
        mariadb.execute(f"DROP USER '{user}'@'%'")
