"""Memory flat in window size and transaction size (goal 3), and wide values (goal 4).

`window`: a run merging one window of N changes (3 updates : 1 delete : 1 insert in
transactions of 5,000, every key changed once, on a 7-column table of 0.8N rows).
`spread`: updates of every eighth key of an N-row table, twice (silver's size, not the
window's, is what grows).
`bigtxn`: every row of an N-row table updated in one transaction: capture alone (its own
child), then the whole run that captures and merges it.
`values`: 40 rows of 1-14 MB (a LONGTEXT in ucs2, a LONGBLOB and a JSON document, each about
a third of the row): the first run (snapshot), then a run applying 14 updates of the largest
rows and a delete, then a run applying one transaction that updates every row left (landed
in parts by `binlog_batch_bytes`); silver is compared with the source after each of the last
two, row by row (MD5 of each value).
Peaks are of each run's whole process tree (the engine included); the bound is 1 GB."""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from cdc_sql.dev.mariadb import MariaDB
from tests.bench.common import (Child, Goal, Result, at_most, binlog_start, create_table, human,
                                make_mixed_changes, merged_by, mixed_rows, run_child, run_cli,
                                workdir, write_pipeline)

MB = 2**20


def run_window(db: MariaDB, changes: int) -> list:
    table = create_table(db, mixed_rows(changes), "window")
    pipeline = write_pipeline(db, table, workdir())
    run_cli(pipeline)
    make_mixed_changes(db, table, changes)
    summary, child = run_cli(pipeline)
    assert summary["captured_changes"] == changes, summary
    return merge_run(f"a window of {human(changes)} changes", pipeline, table, summary, child)


def merge_run(what: str, pipeline: Path, table: str, summary: dict, child: Child) -> list:
    """A run that merged `what`: its time and peak, by which MERGE, its phases, the bound."""
    by = merged_by(pipeline.parent / "lake" / "silver" / table)
    changes = summary["captured_changes"]
    return [
        Result(f"{what}: the run, merged by {by}", changes, child.seconds, child.peak_mb),
        Result(f"  capture {summary['seconds_capture']:.1f} s, merge "
               f"{summary['seconds_merge']:.1f} s", changes, 0),
        at_most(f"3 memory: peak RSS, {what}", child.peak_mb, 1024, " MB"),
    ]


def run_spread(db: MariaDB, rows: int) -> list:
    """A window of rows/8 updates spread over every file of an N-row silver (every eighth
    key, in transactions of 400,000 keys' range), twice: merged at a memory that follows the
    window, not silver's size (delta-rs's MERGE holds the silver files it rewrites)."""
    table = create_table(db, rows, "spread")
    pipeline = write_pipeline(db, table, workdir())
    run_cli(pipeline)
    results, size = [], human(rows)
    for n, change in enumerate(("a = a + 1", "b = CONCAT(b, 'y')")):
        with db.connect("bench", autocommit=False) as conn, conn.cursor() as cur:
            for low in range(1, rows + 1, 400_000):
                cur.execute(f"UPDATE {table} SET {change} WHERE id BETWEEN %s AND %s "
                            f"AND id %% 8 = {n}", (low, low + 399_999))
                conn.commit()
        summary, child = run_cli(pipeline)
        results += merge_run(f"{human(summary['captured_changes'])} updates spread over a "
                             f"{size}-row silver", pipeline, table, summary, child)
    return results


def run_transaction(db: MariaDB, rows: int) -> list:
    table = create_table(db, rows, "bigtxn")
    pipeline = write_pipeline(db, table, workdir())
    run_cli(pipeline)
    binlog_start(db)
    db.execute(f"UPDATE bench.{table} SET a = a + 1, b = CONCAT(b, 'x')")
    capture = capture_alone(pipeline)
    assert capture.last_json()["changes"] == rows, capture.out
    summary, child = run_cli(pipeline)
    assert summary["captured_changes"] == rows, summary
    by = merged_by(pipeline.parent / "lake" / "silver" / table)
    size = human(rows)
    return [
        Result(f"one {size}-row transaction: capture alone", rows,
               capture.last_json()["seconds"], capture.peak_mb),
        Result(f"one {size}-row transaction: the run, merged by {by}", rows, child.seconds,
               child.peak_mb),
        at_most(f"3 memory: peak RSS, one transaction of {size} rows", child.peak_mb, 1024,
                " MB"),
    ]


def capture_alone(pipeline: Path) -> Child:
    """The capture phase alone, in a child; the lakehouse is left as it was before."""
    lake, kept = pipeline.parent / "lake", pipeline.parent / "lake_before"
    shutil.copytree(lake, kept)
    try:
        return run_child("-m", "tests.bench.capture_child", str(pipeline))
    finally:
        shutil.rmtree(lake)
        kept.rename(lake)


WIDE_VALUES_DDL = ("CREATE TABLE bench.{name} (id INT PRIMARY KEY, n INT, "
                   "lt LONGTEXT CHARACTER SET ucs2, lb LONGBLOB, js JSON)")
UPDATES = 14  # of the largest rows; the next is deleted (fewer of a smaller --size values=N)


def row_bytes(i: int) -> int:
    """Row i of 40: 1 MB to 14 MB."""
    return MB + 13 * MB * (i - 1) // 39


def fill_wide_values(db: MariaDB, name: str, rows: int) -> None:
    db.execute("CREATE DATABASE IF NOT EXISTS bench", f"DROP TABLE IF EXISTS bench.{name}",
               WIDE_VALUES_DDL.format(name=name))
    with db.connect("bench") as conn, conn.cursor() as cur:
        for i in range(1, rows + 1):
            third = row_bytes(i) // 3
            cur.execute(  # ucs2: 2 bytes a character, 'é€a' is 6; a JSON element is 27
                f"INSERT INTO {name} VALUES (%s, 0, REPEAT(CONVERT('é€a' USING ucs2), %s), "
                f"REPEAT(UNHEX(MD5(%s)), %s), CONCAT('[', REPEAT(%s, %s), '0]'))",
                (i, third // 6, i, third // 16, '{"k":12345,"v":"abcdefgh"},', third // 27))


def source_digests(db: MariaDB, name: str) -> dict:
    return {row[0]: tuple(row[1:]) for row in db.query(
        f"SELECT id, n, MD5(CONVERT(lt USING utf8mb4)), MD5(lb), MD5(js) FROM bench.{name}")}


def silver_digests(silver) -> dict:
    from deltalake import DeltaTable

    table = DeltaTable(str(silver))
    digests = {}
    for batch in table.to_pyarrow_dataset().to_batches(columns=["id", "n", "lt", "lb", "js"],
                                                       batch_size=4):
        for row in batch.to_pylist():
            digests[row["id"]] = (row["n"], *(hashlib.md5(
                v.encode() if isinstance(v, str) else v).hexdigest() for v in
                (row["lt"], row["lb"], row["js"])))
    return digests


def binlog_bytes_since(db: MariaDB, start: tuple[str, int]) -> int:
    return sum(int(size) for log, size, *_ in db.query("SHOW BINARY LOGS")
               if log >= start[0]) - int(start[1])


def run_values(db: MariaDB, rows: int) -> list:
    name = f"values_{rows}"
    fill_wide_values(db, name, rows)
    total = sum(row_bytes(i) for i in range(1, rows + 1))
    pipeline = write_pipeline(db, name, workdir())
    first_summary, first = run_cli(pipeline)
    assert first_summary["snapshot_rows"] == rows, first_summary
    start = binlog_start(db)
    updated = range(max(2, rows - UPDATES + 1), rows + 1)
    for i in updated:
        db.execute(f"UPDATE bench.{name} SET n = n + 1 WHERE id = {i}")
    db.execute(f"DELETE FROM bench.{name} WHERE id = {updated[0] - 1}")
    binlog_bytes = binlog_bytes_since(db, start)
    summary, child = run_cli(pipeline)
    silver = pipeline.parent / "lake" / "silver" / name
    exact = silver_digests(silver) == source_digests(db, name)
    by = merged_by(silver)
    start = binlog_start(db)
    db.execute(f"UPDATE bench.{name} SET n = n + 1")  # one transaction of every row left
    whole_bytes = binlog_bytes_since(db, start)
    whole_summary, whole = run_cli(pipeline)
    exact = exact and silver_digests(silver) == source_digests(db, name)
    label = f"{rows} rows of 1-14 MB ({total / MB:.0f} MB)"
    return [
        Result(f"wide values, first run: {label}", rows, first.seconds, first.peak_mb),
        Result(f"wide values: {len(updated)} updates, a delete ({binlog_bytes / MB:.0f} MB of "
               f"binlog), merged by {by}", summary["captured_changes"], child.seconds, child.peak_mb),
        Result(f"wide values: one transaction updating every row ({whole_bytes / MB:.0f} MB of "
               f"binlog), merged by {merged_by(silver)}", whole_summary["captured_changes"],
               whole.seconds, whole.peak_mb),
        at_most("4 wide values: peak RSS, first run", first.peak_mb, 1024, " MB"),
        at_most(f"4 wide values: peak RSS, {len(updated)} updates and a delete", child.peak_mb,
                1024, " MB"),
        at_most("4 wide values: peak RSS, one transaction of every row", whole.peak_mb, 1024,
                " MB"),
        Goal("4 wide values: silver equals the source", "exact",
             "exact" if exact else "DIFFERS", exact),
    ]
