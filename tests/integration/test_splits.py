"""Split planning against MariaDB: contiguous, covering, and about even for every key shape."""
import pytest

from cdc_sql.source import mysql
from cdc_sql.source.schema import read_table
from cdc_sql.source.splits import mysql_quote, plan_splits

pytestmark = pytest.mark.integration


def split_sizes(pipeline, database, name, chunk):
    with mysql.cursor(pipeline.source) as cur:
        table = read_table(cur, database, name)
        splits = plan_splits(cur, table, chunk)
        sizes = []
        for split in splits:
            predicate, args = split.where([mysql_quote(k) for k in table.key])
            cur.execute(f"SELECT COUNT(*) FROM `{database}`.`{name}` WHERE {predicate}", args)
            sizes.append(cur.fetchone()[0])
        cur.execute(f"SELECT COUNT(*) FROM `{database}`.`{name}`")
        total = cur.fetchone()[0]
    assert splits[0].lower is None and splits[-1].upper is None
    assert all(a.upper == b.lower for a, b in zip(splits, splits[1:]))  # contiguous
    assert sum(sizes) == total  # every row in exactly one split
    return sizes


def test_dense_integer_keys_by_arithmetic(mariadb, database, make_pipeline):
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY)",
                    "INSERT INTO t SELECT seq FROM seq_1_to_10000 WHERE seq % 3 <> 0", db=database)
    pipeline = make_pipeline(f"- name: t\n  source: {database}.t")
    sizes = split_sizes(pipeline, database, "t", 500)
    assert all(400 <= s <= 600 for s in sizes[:-1]), sizes


def test_skewed_integer_keys_are_walked(mariadb, database, make_pipeline):
    mariadb.execute("CREATE TABLE t (id BIGINT PRIMARY KEY)",
                    "INSERT INTO t SELECT seq FROM seq_1_to_3000",
                    "INSERT INTO t SELECT 1000000000 + seq * seq FROM seq_1_to_3000", db=database)
    pipeline = make_pipeline(f"- name: t\n  source: {database}.t")
    sizes = split_sizes(pipeline, database, "t", 500)
    assert len(sizes) == 12 and all(s == 500 for s in sizes[:-1]), sizes


def test_string_keys_follow_the_collation(mariadb, database, make_pipeline):
    mariadb.execute("CREATE TABLE t (k VARCHAR(20) PRIMARY KEY) COLLATE utf8mb4_general_ci",
                    "INSERT INTO t SELECT CONCAT(IF(seq % 2, 'a', 'B'), LPAD(seq, 6, '0')) "
                    "FROM seq_1_to_4000", db=database)
    pipeline = make_pipeline(f"- name: t\n  source: {database}.t")
    sizes = split_sizes(pipeline, database, "t", 700)
    assert all(s == 700 for s in sizes[:-1]) and 0 < sizes[-1] <= 700, sizes


def test_composite_keys(mariadb, database, make_pipeline):
    mariadb.execute("CREATE TABLE t (a INT, b VARCHAR(10), PRIMARY KEY (a, b))",
                    "INSERT INTO t SELECT seq % 7, CONCAT('x', seq) FROM seq_1_to_3500", db=database)
    pipeline = make_pipeline(f"- name: t\n  source: {database}.t")
    sizes = split_sizes(pipeline, database, "t", 500)
    assert len(sizes) == 7 and all(s == 500 for s in sizes[:-1]), sizes


def test_a_thousand_tiny_splits_cost_little_more_than_ten(mariadb, database, make_pipeline,
                                                          engine, tmp_path):
    """The fixed cost of a split is amortised: consecutive splits share a consistent read, a
    query and the bronze and state commits."""
    from pathlib import Path

    from cdc_sql.config.model import load_pipeline
    from cdc_sql.dev.mariadb import PASSWORD
    from tests.integration.helpers import assert_silver_equals, checkpoint, run

    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))",
                    "INSERT INTO t SELECT seq, CONCAT('v', seq) FROM seq_1_to_20000", db=database)
    seconds = {}
    for chunk in (2000, 20):
        tiny = make_pipeline(f"- name: t\n  source: {database}.t", chunk_size=chunk)
        text = Path(tiny.file).read_text().replace(str(tmp_path / "lake"),
                                                   str(tmp_path / f"lake{chunk}"))
        Path(tiny.file).write_text(text)
        pipeline = load_pipeline(tiny.file, environ={"TEST_MYSQL_PASSWORD": PASSWORD})
        summary = run(pipeline, engine)
        assert len(checkpoint(engine, pipeline).splits(f"{database}.t")) == 20_000 // chunk
        assert_silver_equals(engine, pipeline, "t", mariadb, f"SELECT id, v FROM {database}.t")
        seconds[chunk] = summary["seconds_snapshot"]
    assert seconds[20] <= seconds[2000] + 1.5, seconds


def test_the_first_silver_version_needs_no_clustering(mariadb, database, make_pipeline, engine):
    """The snapshot rows are written one branch per group of splits read together, so silver's
    first files hold disjoint key ranges and are not z-ordered again."""
    from deltalake import DeltaTable

    from tests.integration.helpers import assert_silver_equals, checkpoint, run, silver_path

    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))",
                    "INSERT INTO t SELECT seq, CONCAT('v', seq) FROM seq_1_to_20000", db=database)
    pipeline = make_pipeline(f"- name: t\n  source: {database}.t", chunk_size=1000,
                             parallelism=2)
    run(pipeline, engine)
    attempts = {s.attempt for s in checkpoint(engine, pipeline).splits(f"{database}.t")}
    assert len(attempts) >= 2  # read in several groups
    operations = [h["operation"] for h in DeltaTable(silver_path(pipeline, "t")).history()]
    assert not [op for op in operations if "OPTIMIZE" in op.upper()], operations
    assert_silver_equals(engine, pipeline, "t", mariadb, f"SELECT id, v FROM {database}.t")


def test_a_first_run_and_a_resnapshot_read_each_tables_size_once(mariadb, database,
                                                                  make_pipeline, engine,
                                                                  monkeypatch):
    """Planning a table's splits and grouping them for reading take the same size: one
    catalog query (and a COUNT(*) of a small table) a table, not two; so does a re-snapshot."""
    from cdc_sql.cli import main
    from cdc_sql.run import snapshot_phase
    from cdc_sql.source import splits
    from tests.integration.helpers import assert_silver_equals, run

    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))",
                    "INSERT INTO t SELECT seq, CONCAT('v', seq) FROM seq_1_to_3000",
                    "CREATE TABLE u (id INT PRIMARY KEY)", "INSERT INTO u VALUES (1), (2)",
                    db=database)
    pipeline = make_pipeline(f"- name: t\n  source: {database}.t\n"
                             f"- name: u\n  source: {database}.u", chunk_size=1000)
    read = []
    sized = splits.table_size
    for module in (splits, snapshot_phase):
        monkeypatch.setattr(module, "table_size",
                            lambda cur, table: read.append(table.name) or sized(cur, table))
    run(pipeline, engine)
    assert sorted(read) == ["t", "u"]
    assert_silver_equals(engine, pipeline, "t", mariadb, f"SELECT id, v FROM {database}.t")
    monkeypatch.setenv("TEST_MYSQL_PASSWORD", "cdc-secret")
    assert main(["resnapshot", pipeline.file, "--tables", "t"]) == 0
    read.clear()
    mariadb.execute("UPDATE t SET v = 'again' WHERE id <= 10", db=database)
    run(pipeline, engine)
    assert read == ["t"]
    assert_silver_equals(engine, pipeline, "t", mariadb, f"SELECT id, v FROM {database}.t")
