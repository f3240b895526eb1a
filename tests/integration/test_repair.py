"""Repair without re-reading a table: `cdc-sql resnapshot --where` and `cdc-sql verify --repair`
(docs/operations.md, "Repairing rows"). Silver is made wrong on purpose (source changes written
with `sql_log_bin = 0`, which no binlog reader sees; silver rows changed with delta-rs), then
repaired while a writer goes on and runs are killed at every fault point: the rows in the range
end equal to the source row by row, the rows outside it stay as they were."""
import signal
import subprocess
import sys

import pyarrow as pa
import pytest

from tests.integration.helpers import checkpoint, history_path, run, runs_killed_at, silver_path
from tests.integration.test_resnapshot import cli, environment
from tests.integration.writer import RandomWriter

pytestmark = pytest.mark.integration

OUTSIDE = range(900_001, 900_011)  # rows no writer touches, outside every repaired range


def unlogged(mariadb, database: str, *statements: str) -> None:
    """Source changes no binlog reader sees: what a repair is for."""
    mariadb.execute("SET SESSION sql_log_bin = 0", *statements, "SET SESSION sql_log_bin = 1",
                    db=database)


def silver_rows(engine, pipeline, name: str, columns=("id", "v", "n")) -> list[tuple]:
    return sorted(tuple(r) for r in engine.read(silver_path(pipeline, name))
                  .select(*columns).collect())


def source_rows(mariadb, database: str, table: str) -> list[tuple]:
    return sorted(mariadb.query(f"SELECT id, v, n FROM {database}.{table}"))


def test_a_range_is_read_again_under_a_writer_and_kills(mariadb, database, engine,
                                                        make_pipeline):
    mariadb.execute("CREATE TABLE items (id INT PRIMARY KEY, v VARCHAR(40), n INT)",
                    "INSERT INTO items SELECT seq, CONCAT('v', seq), seq FROM seq_1_to_6000",
                    "INSERT INTO items SELECT seq, 'outside', 0 FROM seq_900001_to_900010",
                    db=database)
    pipeline = make_pipeline(f"""
        - name: items
          source: {database}.items
          history: true
        - name: evens
          source: {database}.items
          projection: SELECT id, v FROM items WHERE n % 2 = 0""", chunk_size=1500)
    run(pipeline, engine)
    unlogged(mariadb, database, "DELETE FROM items WHERE id BETWEEN 1000 AND 1100",
             "UPDATE items SET v = 'unlogged', n = n + 1 WHERE id BETWEEN 2000 AND 2100",
             "INSERT INTO items SELECT seq, 'unlogged', 2 FROM seq_6001_to_6020",
             "UPDATE items SET v = 'unlogged' WHERE id > 900000")
    before_outside = [r for r in silver_rows(engine, pipeline, "items") if r[0] in OUTSIDE]
    writer = RandomWriter(mariadb, database, "items", 7000, seed=37, rate=150)
    writer.start()
    try:
        out = cli("resnapshot", pipeline.file, "--tables", "items", "--where",
                  "id BETWEEN 900 AND 2500 OR id IN (6001, 6002, 6003) OR id >= 6004 AND "
                  "id < 900000", wait=120)
        assert f"range re-read requested: {database}.items where id BETWEEN 900 AND 2500" in out
        status = cli("status", pipeline.file, wait=120)
        assert "items: range re-read where id BETWEEN 900 AND 2500" in status and \
            "(not read yet)" in status and "evens: range re-read" in status
        again = subprocess.run([sys.executable, "-m", "cdc_sql.cli", "resnapshot",
                                pipeline.file, "--tables", "items", "--where", "id = 1"],
                               env=environment(), capture_output=True, timeout=120)
        assert again.returncode == 1 and b"is not merged yet: run the pipeline first" in \
            again.stderr
        outcomes = runs_killed_at(pipeline, ["split.written", "silver.merged", "history.staged",
                                             "history.merged", "state.committed",
                                             "silver.staged"])
        assert sum(code == -signal.SIGKILL for _, code in outcomes) >= 5, outcomes
    finally:
        writer.stop()
        writer.join()
    run(pipeline, engine)
    assert writer.committed > 0
    state = checkpoint(engine, pipeline)
    ranged = [s for s in state.splits(f"{database}.items") if s.predicate]
    assert len(ranged) == 1 and ranged[0].done
    assert state.table("items").ranged == ranged[0].split_id == state.table("evens").ranged

    expected = source_rows(mariadb, database, "items")
    outside = [r for r in expected if r[0] in OUTSIDE]
    assert all(v == "unlogged" for _, v, _ in outside)  # the source changed them unlogged
    inside = [r for r in expected if r[0] not in OUTSIDE]
    have = silver_rows(engine, pipeline, "items")
    assert [r for r in have if r[0] not in OUTSIDE] == inside
    assert [r for r in have if r[0] in OUTSIDE] == before_outside  # left as they were
    assert silver_rows(engine, pipeline, "evens", ("id", "v")) == \
        sorted((i, v) for i, v, n in inside if n % 2 == 0) + \
        sorted((i, v) for i, v, n in before_outside if n % 2 == 0)
    history = engine.read(history_path(pipeline, "items"))
    current = sorted(tuple(r) for r in history.where("_cdc_current").select("id", "v", "n")
                     .collect())
    assert current == have
    assert history.where("_cdc_current").groupBy("id").count().where("count > 1").count() == 0


def test_verify_repair_reads_again_what_differs_and_verifies_again(mariadb, database, engine,
                                                                   make_pipeline):
    from deltalake import DeltaTable, write_deltalake

    mariadb.execute("CREATE TABLE items (id INT PRIMARY KEY, v VARCHAR(40), n INT)",
                    "INSERT INTO items SELECT seq, CONCAT('v', seq), seq FROM seq_1_to_3000",
                    "CREATE TABLE codes (code VARCHAR(20) PRIMARY KEY, n INT)",
                    "INSERT INTO codes SELECT CONCAT('c', seq), seq FROM seq_1_to_500",
                    db=database)
    pipeline = make_pipeline(f"""
        - name: items
          source: {database}.items
        - name: codes
          source: {database}.codes
          deletes: soft""", chunk_size=1000)
    run(pipeline, engine)
    mariadb.execute("DELETE FROM codes WHERE code = 'c7'", db=database)
    run(pipeline, engine)
    items = DeltaTable(silver_path(pipeline, "items"))
    items.delete("id >= 100 AND id < 110")                       # missing in silver
    items.update(updates={"v": "'broken'"}, predicate="id = 2000")   # different
    extra = items.to_pyarrow_table(filters=[("id", "=", 5)])
    at = extra.schema.get_field_index("id")
    extra = extra.set_column(at, extra.schema.field(at),
                             pa.array([99_999], extra.schema.field(at).type))
    write_deltalake(silver_path(pipeline, "items"), extra, mode="append")  # not in the source
    codes = DeltaTable(silver_path(pipeline, "codes"))
    codes.update(updates={"n": "-1"}, predicate="code = 'c42'")
    unlogged(mariadb, database, "UPDATE codes SET n = -2 WHERE code = 'c43'")

    broken = subprocess.run([sys.executable, "-m", "cdc_sql.cli", "verify", pipeline.file],
                            env=environment(), capture_output=True, timeout=300)
    assert broken.returncode == 1 and b"not in the source" in broken.stdout
    out = subprocess.run([sys.executable, "-m", "cdc_sql.cli", "verify", pipeline.file,
                          "--repair"], env=environment(), capture_output=True, timeout=600)
    text = out.stdout.decode()
    assert out.returncode == 0, (text, out.stderr.decode()[-3000:])
    assert "items: repaired 12 differing keys" in text and "codes: repaired 2 differing" in text
    assert text.count("equal to the source") == 2
    assert silver_rows(engine, pipeline, "items") == source_rows(mariadb, database, "items")
    codes_silver = engine.read(silver_path(pipeline, "codes"))
    assert sorted(tuple(r) for r in codes_silver.where("NOT _cdc_deleted").select("code", "n")
                  .collect()) == sorted(mariadb.query(f"SELECT code, n FROM {database}.codes"))
    assert [tuple(r) for r in codes_silver.where("_cdc_deleted").select("code").collect()] == \
        [("c7",)]  # the soft-deleted row stays as it was
    again = subprocess.run([sys.executable, "-m", "cdc_sql.cli", "verify", pipeline.file],
                           env=environment(), capture_output=True, timeout=300)
    assert again.returncode == 0, again.stdout.decode()


def test_bad_range_requests_are_refused_in_one_line_and_write_nothing(mariadb, database, engine,
                                                                     make_pipeline):
    mariadb.execute("CREATE TABLE items (id INT PRIMARY KEY, v VARCHAR(40), n INT)",
                    "INSERT INTO items SELECT seq, 'v', seq FROM seq_1_to_50",
                    "CREATE TABLE other (id INT PRIMARY KEY, v VARCHAR(40))",
                    "INSERT INTO other SELECT seq, 'o' FROM seq_1_to_50", db=database)
    pipeline = make_pipeline(f"""
        - name: items
          source: {database}.items
        - name: other
          source: {database}.other
          projection: SELECT id AS other_id, v FROM other""")

    def refused(tables: str, where: str) -> str:
        done = subprocess.run([sys.executable, "-m", "cdc_sql.cli", "resnapshot", pipeline.file,
                               "--tables", tables, "--where", where], env=environment(),
                              capture_output=True, timeout=120)
        err = done.stderr.decode().strip()
        assert done.returncode == 1 and len(err.splitlines()) == 1 and "Traceback" not in err
        return err

    assert "not merged yet" in refused("items", "id = 1")
    run(pipeline, engine)
    assert "name exactly one table with --tables" in refused("items,other", "id = 1")
    assert f"on {database}.items: `n` is not a key column (id)" in refused("items", "n > 3")
    assert "a function is not allowed" in refused("items", "id = SLEEP(1)")
    assert "comments" in refused("items", "id = 1 -- x")
    assert "other does not hold the key column `id` as it is" in refused("other", "id < 5")
    assert not [s for s in checkpoint(engine, pipeline).all_splits() if s.predicate]
