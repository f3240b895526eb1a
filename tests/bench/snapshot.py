"""First loads (goals 1 and 7) and table count (goal 5).

`snapshot`: the whole first run of a table at default settings (`cdc-sql run --until-caught-up`,
process start to exit: interpreter, imports, preflight, snapshot, bronze, silver, state) against
the hand-written copy run the same way (tests/bench/copy_child.py: connectorx, 2 partitions,
into delta-rs, process start to exit), and the server's own streaming rate; medians of three
interleaved rounds (the machine's drift reaches all three alike), the highest peak.
`big` (slow: 100M rows by default): one round, the copy appending key ranges of 5M rows.
`many`: a pipeline of N tables of 10 rows: its first run, then a run after a change in each."""
from __future__ import annotations

import shutil
import statistics
import subprocess

from cdc_sql.dev.mariadb import PASSWORD, USER, MariaDB
from tests.bench.common import (Result, at_most, create_table, human, run_child, run_cli,
                                timed, workdir, write_pipeline)

ROUNDS = 3
BIG_CHUNK = 5_000_000


def server_stream(db: MariaDB, table: str) -> float:
    """Seconds of `mariadb --quick` streaming the table to `wc -l`: what the server can send."""
    command = (f"mariadb --quick -N -h127.0.0.1 -P{db.port} -u{USER} -p{PASSWORD} "
               f"-e 'SELECT * FROM bench.{table}' | wc -l")
    _, seconds = timed(lambda: subprocess.run(command, shell=True, check=True,
                                              capture_output=True))
    return seconds


def copy(db: MariaDB, table: str, chunk: int = 0) -> tuple[float, float, float]:
    """The copy as its own process: wall seconds, its own timed part, its peak MB."""
    scratch = workdir()
    child = run_child("-m", "tests.bench.copy_child", str(db.port), table,
                      str(scratch / "copy"), str(chunk))
    shutil.rmtree(scratch)
    return child.seconds, child.last_json()["seconds"], child.peak_mb


def first_run(db: MariaDB, table: str, rows: int) -> dict:
    """A first run of a new pipeline into a new lakehouse: wall, phases, peak."""
    lake = workdir()
    pipeline = write_pipeline(db, table, lake, startup="snapshot-only")
    summary, child = run_cli(pipeline)
    shutil.rmtree(lake)  # 10M rows: 0.5 GB a round
    assert summary["snapshot_rows"] == rows, summary
    return {"wall": child.seconds, "snapshot": summary["seconds_snapshot"],
            "silver": summary["seconds_merge"], "peak": child.peak_mb}


def run(db: MariaDB, rows: int, rounds: int = ROUNDS, chunk: int = 0) -> list:
    table = create_table(db, rows, "snapshot")
    measured = []
    for _ in range(rounds):
        stream = server_stream(db, table)
        copy_wall, copy_inside, copy_peak = copy(db, table, chunk)
        measured.append({"stream": stream, "copy": copy_wall, "copy_inside": copy_inside,
                         "copy_peak": copy_peak, **first_run(db, table, rows)})
    m = {k: statistics.median(r[k] for r in measured) for k in measured[0]}
    peak = max(r["peak"] for r in measured)
    size = human(rows)
    bound = 1.0 if rows >= 10_000_000 else 1.1
    goal = "7 big table" if chunk else "1 first load"
    how = f", key ranges of {human(chunk)}" if chunk else ""
    return [
        Result(f"server stream (mariadb --quick) {size}", rows, m["stream"]),
        Result(f"connectorx -> delta-rs copy, process{how} {size}", rows, m["copy"],
               max(r["copy_peak"] for r in measured)),
        Result(f"  the same, without interpreter and imports {size}", rows, m["copy_inside"]),
        Result(f"first run at defaults, process {size}", rows, m["wall"], peak,
               "copy (process)", rows / m["copy"]),
        Result(f"  its snapshot phase {size}", rows, m["snapshot"], peak,
               "server stream", rows / m["stream"]),
        Result(f"  its silver (first version) {size}", rows, m["silver"]),
        at_most(f"{goal}: first run / copy, {size} rows", m["wall"] / m["copy"], bound, "x"),
        *([at_most(f"{goal}: peak RSS, {size} rows", peak, 1024, " MB")] if chunk else []),
    ]


def run_big(db: MariaDB, rows: int) -> list:
    return run(db, rows, rounds=1, chunk=BIG_CHUNK)


def run_many(db: MariaDB, tables: int) -> list:
    """A pipeline of `tables` small tables (10 rows each): the first run, then a run after one
    change in every table; per-table cost is the wall time over the table count."""
    names = [f"small_{tables}_{i}" for i in range(tables)]
    with db.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS bench")
        for name in names:
            cur.execute(f"DROP TABLE IF EXISTS bench.{name}")  # afresh for each engine
            cur.execute(f"CREATE TABLE bench.{name} (id INT PRIMARY KEY, v VARCHAR(20), n INT)")
            cur.execute(f"INSERT INTO bench.{name} SELECT seq, CONCAT('v', seq), seq "
                        f"FROM bench.seq_1_to_10")
    pipeline = write_pipeline(db, names, workdir())
    _, first = run_cli(pipeline)
    with db.connect("bench") as conn, conn.cursor() as cur:
        for name in names:
            cur.execute(f"UPDATE {name} SET n = n + 1 WHERE id = 1")
    second, change = run_cli(pipeline)
    assert second["captured_changes"] == tables, second
    size = f"{tables:,} tables"
    return [
        Result(f"{size}: first run (process)", tables * 10, first.seconds, first.peak_mb),
        Result(f"{size}: a change in each (process)", tables, change.seconds, change.peak_mb),
        Result(f"  per table: first run {first.seconds / tables * 1000:.1f} ms, a change "
               f"{change.seconds / tables * 1000:.1f} ms", tables, 0),
        at_most(f"5 table count: first run, {size}", first.seconds, 180, " s"),
        at_most(f"5 table count: a change in each, {size}", change.seconds, 60, " s"),
        at_most(f"5 table count: peak RSS, {size}", max(first.peak_mb, change.peak_mb),
                2048, " MB"),
    ]
