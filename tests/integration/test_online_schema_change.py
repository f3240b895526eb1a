"""gh-ost and pt-online-schema-change, replayed statement by statement as their documentation
describes them, against MariaDB, with a writer running and runs killed at fault points: silver
ends equal to the source, with the new schema (an added column with a default, a retyped
column), and the tools' shadow tables are never merged, though the pipeline's pattern matches
every table of the database. RENAME TABLE on its own: a table renamed away stops the run with
what to do; renamed to a name the pattern matches, it is followed."""
import os
import signal
import subprocess
import sys
import threading

import pytest

from cdc_sql.errors import SourceError
from tests.integration.helpers import assert_silver_equals, checkpoint, resnapshot_and_run, run
from tests.integration.writer import RandomWriter

pytestmark = pytest.mark.integration
ENV = {**os.environ, "TEST_MYSQL_PASSWORD": "cdc-secret"}
ALTER = "ADD COLUMN note VARCHAR(20) NOT NULL DEFAULT 'x', MODIFY n BIGINT"
KILLS = ("bronze.appended", "resnapshot.reset", "silver.merged")


def killed_run(pipeline, point: str) -> int:
    process = subprocess.Popen([sys.executable, "-m", "cdc_sql.cli", "run", pipeline.file,
                                "--until-caught-up"], env={**ENV, "CDC_SQL_KILL_AT": point},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               start_new_session=True)
    code = process.wait(timeout=300)
    assert code in (0, -signal.SIGKILL), process.stderr.read().decode()[-2000:]
    return code


def setup(mariadb, database, make_pipeline):
    mariadb.execute("CREATE TABLE orders (id INT PRIMARY KEY, v VARCHAR(40), n INT)",
                    "INSERT INTO orders SELECT seq, CONCAT('v', seq), seq FROM seq_1_to_600",
                    db=database)
    return make_pipeline(f"- name: everything\n  source: {database}\\..*\n  history: true")


def copy(mariadb, database: str, shadow: str, statement: str) -> None:
    """The tool's row copy, in chunks of the key."""
    for low in range(1, 1001, 250):
        mariadb.execute(statement.format(shadow=shadow, low=low, high=low + 249), db=database)


def after_swap(engine, pipeline) -> int:
    """Runs killed at the fault points after the swap, then one that finishes: the kills."""
    kills = sum(killed_run(pipeline, point) != 0 for point in KILLS[1:])
    run(pipeline, engine)
    return kills


def finish(engine, pipeline, mariadb, database, writer, kills: int, caplog) -> None:
    """The writer stopped: silver equals the source, only `orders` in it, no sqlglot warning."""
    assert writer.committed > 0 and kills >= 2
    run(pipeline, engine)
    assert_silver_equals(engine, pipeline, "everything", mariadb,
                         f"SELECT * FROM {database}.orders")
    silver = engine.read(f"{pipeline.root}/silver/everything")
    assert {r[0] for r in silver.select("_cdc_source_table").distinct().collect()} == \
        {f"{database}.orders"}
    assert not [r for r in caplog.records if "unsupported syntax" in r.getMessage()]


def test_gh_ost(mariadb, database, engine, make_pipeline, caplog):
    pipeline = setup(mariadb, database, make_pipeline)
    run(pipeline, engine)
    kills = 0
    with RandomWriter(mariadb, database, "orders", 900, seed=5, rate=100) as writer:
        mariadb.execute(
            "CREATE TABLE _orders_ghc (id BIGINT AUTO_INCREMENT, last_update TIMESTAMP NOT NULL "
            "DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP, hint VARCHAR(64) NOT NULL, "
            "value VARCHAR(4096) NOT NULL, PRIMARY KEY (id), UNIQUE KEY hint_uidx (hint))",
            "CREATE TABLE _orders_gho LIKE orders",
            f"ALTER TABLE _orders_gho {ALTER}",
            "INSERT /* gh-ost */ INTO _orders_ghc (id, hint, value) VALUES (2, 'state', "
            "'GhostTableMigrated') ON DUPLICATE KEY UPDATE last_update = NOW(), "
            "value = VALUES(value)", db=database)
        # gh-ost applies the table's binlog changes to the shadow; triggers stand in for it
        # here (the shadow's rows are copies cdc-sql never merges, however they got there)
        for op, body in (("INSERT", "REPLACE INTO _orders_gho (id, v, n) VALUES (NEW.id, NEW.v, "
                                    "NEW.n)"),
                         ("UPDATE", "BEGIN DELETE FROM _orders_gho WHERE id = OLD.id; REPLACE INTO "
                                    "_orders_gho (id, v, n) VALUES (NEW.id, NEW.v, NEW.n); END"),
                         ("DELETE", "DELETE FROM _orders_gho WHERE id = OLD.id")):
            mariadb.execute(f"CREATE TRIGGER gho_{op.lower()} AFTER {op} ON orders FOR EACH ROW "
                            f"{body}", db=database)
        copy(mariadb, database, "_orders_gho",
             "INSERT /* gh-ost */ IGNORE INTO {shadow} (id, v, n) SELECT id, v, n FROM orders "
             "FORCE INDEX (PRIMARY) WHERE id BETWEEN {low} AND {high} LOCK IN SHARE MODE")
        kills += killed_run(pipeline, KILLS[0]) != 0
        run(pipeline, engine)
        # the cut-over: a sentry table, tables locked, the atomic swap waiting on the lock
        locker, renamer = mariadb.connect(database), mariadb.connect(database)
        with locker.cursor() as cur:
            cur.execute("CREATE TABLE _orders_del (id INT AUTO_INCREMENT PRIMARY KEY) "
                        "COMMENT='ghost-cut-over-sentry'")
            cur.execute("LOCK TABLES orders WRITE, _orders_del WRITE")
            for op in ("insert", "update", "delete"):
                cur.execute(f"DROP TRIGGER gho_{op}")
        swap = threading.Thread(target=lambda: renamer.cursor().execute(
            "RENAME /* gh-ost */ TABLE orders TO _orders_del, _orders_gho TO orders"))
        swap.start()
        with locker.cursor() as cur:
            cur.execute("DROP /* gh-ost */ TABLE IF EXISTS _orders_del")
            cur.execute("UNLOCK TABLES")
        swap.join()
        locker.close()
        renamer.close()
        mariadb.execute("DROP /* gh-ost */ TABLE IF EXISTS _orders_ghc",
                        "DROP /* gh-ost */ TABLE IF EXISTS _orders_del", db=database)
        kills += after_swap(engine, pipeline)
    finish(engine, pipeline, mariadb, database, writer, kills, caplog)


def test_pt_online_schema_change(mariadb, database, engine, make_pipeline, caplog):
    pipeline = setup(mariadb, database, make_pipeline)
    run(pipeline, engine)
    kills = 0
    db = f"`{database}`"
    columns = "(`id`, `v`, `n`) VALUES (NEW.`id`, NEW.`v`, NEW.`n`)"
    with RandomWriter(mariadb, database, "orders", 900, seed=6, rate=100) as writer:
        create = mariadb.query(f"SHOW CREATE TABLE {db}.`orders`")[0][1]
        mariadb.execute(
            create.replace("CREATE TABLE `orders`", f"CREATE TABLE {db}.`_orders_new`", 1),
            f"ALTER TABLE {db}.`_orders_new` {ALTER}",
            f"CREATE TRIGGER `pt_osc_{database}_orders_del` AFTER DELETE ON {db}.`orders` FOR "
            f"EACH ROW BEGIN DECLARE CONTINUE HANDLER FOR 1146 begin end; DELETE IGNORE FROM "
            f"{db}.`_orders_new` WHERE {db}.`_orders_new`.`id` <=> OLD.`id`; END",
            f"CREATE TRIGGER `pt_osc_{database}_orders_upd` AFTER UPDATE ON {db}.`orders` FOR "
            f"EACH ROW BEGIN DECLARE CONTINUE HANDLER FOR 1146 begin end; DELETE IGNORE FROM "
            f"{db}.`_orders_new` WHERE !(OLD.`id` <=> NEW.`id`) AND {db}.`_orders_new`.`id` "
            f"<=> OLD.`id`; REPLACE INTO {db}.`_orders_new` {columns}; END",
            f"CREATE TRIGGER `pt_osc_{database}_orders_ins` AFTER INSERT ON {db}.`orders` FOR "
            f"EACH ROW BEGIN DECLARE CONTINUE HANDLER FOR 1146 begin end; REPLACE INTO "
            f"{db}.`_orders_new` {columns}; END", db=database)
        copy(mariadb, database, f"{db}.`_orders_new`",
             "INSERT LOW_PRIORITY IGNORE INTO {shadow} (`id`, `v`, `n`) SELECT `id`, `v`, `n` "
             f"FROM {db}.`orders` FORCE INDEX(`PRIMARY`) WHERE ((`id` >= {{low}})) AND "
             "((`id` <= {high})) LOCK IN SHARE MODE /*pt-online-schema-change copy nibble*/")
        kills += killed_run(pipeline, KILLS[0]) != 0
        mariadb.execute(f"ANALYZE TABLE {db}.`_orders_new`",
                        f"RENAME TABLE {db}.`orders` TO {db}.`_orders_old`, {db}.`_orders_new` "
                        f"TO {db}.`orders`",
                        f"DROP TABLE IF EXISTS {db}.`_orders_old`",
                        *(f"DROP TRIGGER IF EXISTS {db}.`pt_osc_{database}_orders_{op}`"
                          for op in ("del", "upd", "ins")), db=database)
        kills += after_swap(engine, pipeline)
    finish(engine, pipeline, mariadb, database, writer, kills, caplog)


def test_rename_table(mariadb, database, engine, make_pipeline):
    for name in ("shard_1", "shard_2", "alone"):
        mariadb.execute(f"CREATE TABLE {name} (id INT PRIMARY KEY, v INT)",
                        f"INSERT INTO {name} SELECT seq, seq FROM seq_1_to_30", db=database)
    pipeline = make_pipeline(f"""
        - name: shards
          source: {database}\\.shard_[0-9]+
        - name: alone
          source: {database}.alone""")
    run(pipeline, engine)
    # followed: renamed to a name the pattern matches
    mariadb.execute("RENAME TABLE shard_2 TO shard_3", "UPDATE shard_3 SET v = 0 WHERE id = 1",
                    db=database)
    run(pipeline, engine)
    run(pipeline, engine)
    rows = engine.read(f"{pipeline.root}/silver/shards").select("_cdc_source_table", "id", "v")
    found = sorted(tuple(r) for r in rows.collect())
    assert found == sorted([(f"{database}.shard_1", i, i) for i in range(1, 31)] +
                           [(f"{database}.shard_3", i, 0 if i == 1 else i) for i in range(1, 31)])
    # renamed away: stops, saying what happened and what to do
    mariadb.execute("RENAME TABLE alone TO elsewhere", db=database)
    with pytest.raises(SourceError, match=r"no source table matches `.*alone` \(if it was "
                                          r"dropped or renamed"):
        run(pipeline, engine)
    # back under its name: capture meets the rename away, and stops there
    mariadb.execute("UPDATE elsewhere SET v = -1 WHERE id = 2",
                    "RENAME TABLE elsewhere TO alone", db=database)
    with pytest.raises(SourceError, match=rf"{database}\.alone was renamed to {database}\."
                                          r"elsewhere at binlog .*: the pipeline does not "
                                          r"capture that name.*re-snapshot it"):
        run(pipeline, engine)
    resnapshot_and_run(engine, pipeline, "alone", mariadb, f"SELECT * FROM {database}.alone")
    assert checkpoint(engine, pipeline).table("alone").resnapshot == ""
