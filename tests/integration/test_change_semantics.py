"""Soft deletes, skipped operations and left-out columns (lake/semantics.py) against MariaDB.

Triggers keep, per table, the last image of every row deleted (or moved to another key): with
`deletes: soft` silver must hold the source's live rows plus those images of keys the source no
longer has, flagged `_cdc_deleted`; with `skip: [delete]`, the same rows unflagged. Runs are
killed at every fault point while writers go, on the in-process delta-rs path (a plain table)
and the engine's MERGE (a projection with `* EXCEPT` and a WHERE, history, exclude_columns).
"""
import signal

import pytest

from cdc_sql import faults
from cdc_sql.lake import semantics
from cdc_sql.lake.lake import Lake
from cdc_sql.ops.verify import verify_table
from tests.integration.helpers import checkpoint, history_path, run, runs_killed_at, silver_path
from tests.integration.writer import RandomWriter

pytestmark = pytest.mark.integration


def gone_triggers(table: str) -> list[str]:
    """`gone_<table>`: the last image of every key deleted or moved away."""
    return [f"CREATE TABLE gone_{table} (id INT PRIMARY KEY, v VARCHAR(40), n INT)",
            f"CREATE TRIGGER {table}_ad AFTER DELETE ON {table} FOR EACH ROW "
            f"REPLACE INTO gone_{table} VALUES (OLD.id, OLD.v, OLD.n)",
            f"CREATE TRIGGER {table}_au AFTER UPDATE ON {table} FOR EACH ROW "
            f"IF OLD.id <> NEW.id THEN REPLACE INTO gone_{table} VALUES (OLD.id, OLD.v, OLD.n); "
            f"END IF"]


def rows(engine, pipeline, name: str, columns: list[str], where: str) -> list[tuple]:
    silver = engine.read(silver_path(pipeline, name)).where(where)
    return sorted(tuple(r) for r in silver.select(*columns).collect())


def test_soft_and_skipped_deletes_through_kills_equal_the_source(mariadb, database, engine,
                                                                 make_pipeline):
    setup = []
    for table in ("a", "b", "c"):
        setup += [f"CREATE TABLE {table} (id INT PRIMARY KEY, v VARCHAR(40), n INT)",
                  *gone_triggers(table),
                  f"INSERT INTO {table} SELECT seq, CONCAT('v', seq), seq FROM seq_1_to_2000"]
    mariadb.execute(*setup, db=database)
    pipeline = make_pipeline(f"""
        - name: a
          source: {database}.a
          deletes: soft
        - name: b
          source: {database}.b
          skip: [delete, truncate]
          exclude_columns: [n]
        - name: c
          source: {database}.c
          projection: SELECT * EXCEPT (n) FROM c WHERE n % 5 <> 0
          deletes: soft
          history: true
        """, chunk_size=500)
    run(pipeline, engine)  # the snapshot: every delete from here on is captured
    writers = [RandomWriter(mariadb, database, table, 3000, seed=seed, rate=150)
               for seed, table in enumerate(("a", "b", "c"))]
    for writer in writers:
        writer.start()
    try:
        outcomes = runs_killed_at(pipeline, [  # each fault point of a batch
            p for p in faults.POINTS if not p.startswith("resnapshot.") and
            p not in ("silver.first_spliced", "split.written")])
    finally:
        for writer in writers:
            writer.stop()
    assert sum(code == -signal.SIGKILL for _, code in outcomes) >= 4, outcomes
    assert all(writer.committed > 50 for writer in writers)
    run(pipeline, engine)

    def source(sql: str) -> list[tuple]:
        return sorted(tuple(r) for r in mariadb.query(sql.format(db=database)))

    gone = "SELECT {cols} FROM {db}.gone_{t} g WHERE g.id NOT IN (SELECT id FROM {db}.{t})"
    # a: deletes: soft, merged in this process
    assert rows(engine, pipeline, "a", ["id", "v", "n"], "NOT _cdc_deleted") == \
        source("SELECT id, v, n FROM {db}.a")
    soft_a = source(gone.format(cols="id, v, n", db="{db}", t="a"))
    assert soft_a and rows(engine, pipeline, "a", ["id", "v", "n"], "_cdc_deleted") == soft_a
    assert rows(engine, pipeline, "a", ["_cdc_op"], "_cdc_deleted") == [("d",)] * len(soft_a)
    # b: skip: [delete], no column n
    assert "n" not in engine.read(silver_path(pipeline, "b")).columns
    kept_b = source(gone.format(cols="id, v", db="{db}", t="b"))
    assert kept_b and rows(engine, pipeline, "b", ["id", "v"], "TRUE") == \
        sorted(source("SELECT id, v FROM {db}.b") + kept_b)
    # c: deletes: soft through the engine's MERGE, with a WHERE, * EXCEPT and history
    assert rows(engine, pipeline, "c", ["id", "v"], "NOT _cdc_deleted") == \
        source("SELECT id, v FROM {db}.c WHERE n % 5 <> 0")
    soft_c = source(gone.format(cols="id, v", db="{db}", t="c") + " AND g.n % 5 <> 0")
    assert soft_c and rows(engine, pipeline, "c", ["id", "v"], "_cdc_deleted") == soft_c
    current = sorted(tuple(r) for r in engine.read(history_path(pipeline, "c"))
                     .where("_cdc_current").select("id", "v").collect())
    assert current == rows(engine, pipeline, "c", ["id", "v"], "NOT _cdc_deleted")
    # verify compares the live rows and counts what silver holds on purpose
    state = checkpoint(engine, pipeline)
    reports = {t.name: verify_table(engine, pipeline, t, state) for t in pipeline.tables}
    assert all(r.equal for r in reports.values()), {n: r.summary() for n, r in reports.items()}
    assert (reports["a"].soft_deleted, reports["c"].soft_deleted) == (len(soft_a), len(soft_c))
    assert reports["b"].kept == len(kept_b) and "kept on purpose" in reports["b"].summary()
    lake = Lake.open(engine, str(pipeline.root))
    assert semantics.soft_deleted_rows(lake, pipeline.table("a")) == len(soft_a)
    print(f"outcomes: {outcomes}; soft-deleted {len(soft_a)}/{len(soft_c)}, kept {len(kept_b)}")


def soft_and_skipping(mariadb, database, engine, make_pipeline, n: int, skipped: str):
    """Tables s (deletes: soft) and k (skip: [skipped]) of rows (id, 'v<id>') 1..n, merged."""
    mariadb.execute(*[sql for t in ("s", "k") for sql in (
        f"CREATE TABLE {t} (id INT PRIMARY KEY, v VARCHAR(40))",
        f"INSERT INTO {t} SELECT seq, CONCAT('v', seq) FROM seq_1_to_{n}")], db=database)
    pipeline = make_pipeline(f"""
        - name: s
          source: {database}.s
          deletes: soft
        - name: k
          source: {database}.k
          skip: [{skipped}]
        """)
    run(pipeline, engine)
    return pipeline


def test_truncate_flags_rows_or_is_skipped(mariadb, database, engine, make_pipeline):
    """A TRUNCATE: with soft deletes its rows stay flagged deleted at its offset (a re-insert
    revives its key); with skip: [truncate] nothing leaves silver. A kill after the MERGE
    replays the window, with the same silver."""
    from tests.integration.test_cascades import run_killed_at

    pipeline = soft_and_skipping(mariadb, database, engine, make_pipeline, 300, "truncate")
    mariadb.execute("UPDATE s SET v = 'late' WHERE id <= 10", "TRUNCATE s", "TRUNCATE k",
                    "INSERT INTO s VALUES (5, 'back'), (1000, 'new')",
                    "INSERT INTO k VALUES (7000, 'new')", "DELETE FROM k WHERE id = 7000",
                    db=database)
    run_killed_at(pipeline, "silver.merged@1")
    run(pipeline, engine)
    live = rows(engine, pipeline, "s", ["id", "v"], "NOT _cdc_deleted")
    assert live == [(5, "back"), (1000, "new")]
    flagged = rows(engine, pipeline, "s", ["id", "v", "_cdc_op"], "_cdc_deleted")
    assert len(flagged) == 299 and (1, "late", "d") in flagged and (20, "v20", "d") in flagged
    assert len({r["_cdc_offset"] for r in engine.read(silver_path(pipeline, "s"))
                .where("_cdc_deleted").collect()}) == 1  # the TRUNCATE's offset
    assert rows(engine, pipeline, "k", ["id", "v"], "TRUE") == \
        [(i, f"v{i}") for i in range(1, 301)]  # nothing left: the delete of 7000 applies
    state = checkpoint(engine, pipeline)
    report = verify_table(engine, pipeline, pipeline.table("k"), state)
    assert report.equal and report.kept == 300, report.summary()
    report = verify_table(engine, pipeline, pipeline.table("s"), state)
    assert report.equal and report.soft_deleted == 299, report.summary()


def test_a_pattern_source_leaves_out_what_exclude_matches(mariadb, database, engine,
                                                          make_pipeline):
    mariadb.execute(*[sql for t in ("orders_1", "orders_2", "orders_archive") for sql in (
        f"CREATE TABLE {t} (id INT PRIMARY KEY, v VARCHAR(40))",
        f"INSERT INTO {t} VALUES (1, '{t}')")], db=database)
    pipeline = make_pipeline(f"""
        - name: orders
          source: {database}\\.orders_.*
          exclude: {database}\\.orders_archive
        """)
    run(pipeline, engine)
    assert rows(engine, pipeline, "orders", ["_cdc_source_table", "v"], "TRUE") == [
        (f"{database}.orders_1", "orders_1"), (f"{database}.orders_2", "orders_2")]


def test_cascaded_deletes_are_soft_or_skipped(mariadb, database, engine, make_pipeline):
    """InnoDB's ON DELETE CASCADE (no binlog event for the children): a soft child keeps the
    cascaded rows flagged at the parent's delete, a child that skips deletes keeps them as they
    were; a soft-deleted child row is no longer reached by a later cascade."""
    mariadb.execute(
        "CREATE TABLE parent (id INT PRIMARY KEY)",
        *[f"CREATE TABLE {t} (id INT PRIMARY KEY, parent_id INT, v INT, CONSTRAINT fk_{t} "
          f"FOREIGN KEY (parent_id) REFERENCES parent (id) ON DELETE CASCADE)"
          for t in ("soft", "kept")],
        "INSERT INTO parent SELECT seq FROM seq_1_to_10",
        *[f"INSERT INTO {t} SELECT seq, seq % 10 + 1, seq FROM seq_1_to_100"
          for t in ("soft", "kept")], db=database)
    pipeline = make_pipeline(f"""
        - name: parent
          source: {database}.parent
        - name: soft
          source: {database}.soft
          deletes: soft
        - name: kept
          source: {database}.kept
          skip: [delete]
        """)
    run(pipeline, engine)
    mariadb.execute("DELETE FROM soft WHERE id = 2", "DELETE FROM parent WHERE id IN (2, 3)",
                    "UPDATE kept SET v = -v WHERE parent_id = 4", db=database)
    run(pipeline, engine)
    gone = sorted((i, i % 10 + 1, i) for i in range(1, 101) if i % 10 + 1 in (2, 3))
    assert rows(engine, pipeline, "soft", ["id", "parent_id", "v"], "_cdc_deleted") == gone
    assert rows(engine, pipeline, "soft", ["id", "parent_id", "v"], "NOT _cdc_deleted") == \
        sorted(tuple(r) for r in mariadb.query(f"SELECT * FROM {database}.soft"))
    assert rows(engine, pipeline, "kept", ["id", "parent_id", "v"], "TRUE") == sorted(
        (i, i % 10 + 1, -i if i % 10 + 1 == 4 else i) for i in range(1, 101))
    state = checkpoint(engine, pipeline)
    for name, kept, soft in (("soft", 0, len(gone)), ("kept", len(gone), 0)):
        report = verify_table(engine, pipeline, pipeline.table(name), state)
        assert (report.equal, report.kept, report.soft_deleted) == (True, kept, soft), \
            report.summary()


def test_soft_deletes_turned_on_later_with_a_new_column(mariadb, database, engine,
                                                        make_pipeline):
    """A table merged with hard deletes, then `deletes: soft` and an added column: silver gains
    `_cdc_deleted` (NULL, live, in older rows) and the column; deletes merged from then on
    (those captured before the switch too) are flagged."""
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))",
                    "INSERT INTO t SELECT seq, 'v' FROM seq_1_to_50", db=database)
    pipeline = make_pipeline(f"- name: t\n  source: {database}.t")
    run(pipeline, engine)
    mariadb.execute("DELETE FROM t WHERE id = 1", "ALTER TABLE t ADD COLUMN w INT",
                    "UPDATE t SET w = id WHERE id <= 20", "DELETE FROM t WHERE id IN (2, 3)",
                    db=database)
    pipeline = make_pipeline(f"- name: t\n  source: {database}.t\n  deletes: soft")
    run(pipeline, engine)
    assert rows(engine, pipeline, "t", ["id", "v", "w"], "_cdc_deleted") == \
        [(1, "v", None), (2, "v", 2), (3, "v", 3)]  # every change merged since: 1 too
    assert rows(engine, pipeline, "t", ["id", "v", "w"], "NOT COALESCE(_cdc_deleted, FALSE)") \
        == sorted(tuple(r) for r in mariadb.query(f"SELECT id, v, w FROM {database}.t"))
    report = verify_table(engine, pipeline, pipeline.table("t"), checkpoint(engine, pipeline))
    assert report.equal and report.soft_deleted == 3, report.summary()


def test_a_resnapshot_flags_or_keeps_rows_it_no_longer_finds(mariadb, database, engine,
                                                            make_pipeline):
    """Rows deleted without the binlog knowing (sql_log_bin = 0, as after a purge the
    re-snapshot mends): the re-snapshot flags them (soft) or keeps them (skip), replayed after a
    kill between its replacement and the state commit."""
    from tests.integration.test_cascades import run_killed_at
    from tests.integration.test_resnapshot import cli

    pipeline = soft_and_skipping(mariadb, database, engine, make_pipeline, 100, "delete")
    mariadb.execute("SET SESSION sql_log_bin = 0", "DELETE FROM s WHERE id <= 10",
                    "DELETE FROM k WHERE id <= 10", "SET SESSION sql_log_bin = 1",
                    "UPDATE s SET v = 'w' WHERE id = 50", "DELETE FROM s WHERE id = 60",
                    db=database)
    cli("resnapshot", pipeline.file, "--tables", "s,k", wait=120)
    run_killed_at(pipeline, "silver.merged@2")
    run(pipeline, engine)
    flagged = rows(engine, pipeline, "s", ["id", "v"], "_cdc_deleted")
    assert flagged == [(i, f"v{i}") for i in [*range(1, 11), 60]]
    assert rows(engine, pipeline, "s", ["id", "v"], "NOT _cdc_deleted") == \
        sorted(tuple(r) for r in mariadb.query(f"SELECT * FROM {database}.s"))
    assert rows(engine, pipeline, "k", ["id", "v"], "TRUE") == \
        [(i, f"v{i}") for i in range(1, 101)]
