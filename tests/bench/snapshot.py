"""The first run of a table at default settings against the server's own streaming rate and the
fastest hand-written copy (connectorx, 2 partitions, into one delta-rs table), in the same run:
the whole run (process start to exit, `cdc-sql run --until-caught-up`, snapshot-only) and its
snapshot phase, with peak memory; medians of three rounds. The `many` stage runs a pipeline of
1,000 small tables: its first run, and a run after a change in every table."""
from __future__ import annotations

import shutil
import statistics
import subprocess
import time

from cdc_sql.dev.mariadb import PASSWORD, USER, MariaDB
from tests.bench.common import Result, create_table, run_cli, timed, workdir, write_pipeline

ROUNDS = 3


def server_stream(db: MariaDB, table: str) -> float:
    """`mariadb --quick` streaming the table to `wc -l`: the rate the server can send."""
    command = (f"mariadb --quick -N -h127.0.0.1 -P{db.port} -u{USER} -p{PASSWORD} "
               f"-e 'SELECT * FROM bench.{table}' | wc -l")
    out, seconds = timed(lambda: subprocess.run(command, shell=True, check=True,
                                                capture_output=True, text=True).stdout)
    return int(out) / seconds


def connectorx_copy(db: MariaDB, table: str) -> float:
    """connectorx with 2 partitions on the key, Arrow straight into one delta-rs table."""
    import connectorx
    from deltalake import write_deltalake

    scratch = workdir()
    target = scratch / "copy"

    def copy() -> int:
        data = connectorx.read_sql(
            f"mysql://{USER}:{PASSWORD}@127.0.0.1:{db.port}/bench",
            f"SELECT * FROM bench.{table}", partition_on="id", partition_num=2,
            return_type="arrow")
        write_deltalake(str(target), data)
        return data.num_rows

    rows, seconds = timed(copy)
    shutil.rmtree(scratch)
    return rows / seconds


def run(db: MariaDB, rows: int, rounds: int = ROUNDS) -> list[Result]:
    """Medians of `rounds` rounds, each measuring the stream, the copy and a first run in turn
    (so that the machine's drift reaches all three alike); the peak is the highest."""
    table = create_table(db, rows, "snapshot")
    measured = [one_round(db, table, rows) for _ in range(rounds)]
    server, copy, wall, snapshot, silver = (statistics.median(m[i] for m in measured)
                                            for i in range(5))
    peak = max(m[5] for m in measured)
    return [
        Result("server stream (mariadb --quick)", rows, rows / server),
        Result("connectorx (2 partitions) -> delta-rs", rows, rows / copy),
        Result("first run at defaults (wall)", rows, wall, peak, "connectorx copy", copy),
        Result("first run: snapshot phase", rows, snapshot, peak, "server stream", server),
        Result("first run: silver (first batch)", rows, silver, peak),
    ]


def one_round(db: MariaDB, table: str, rows: int) -> tuple[float, ...]:
    """Rates of the stream and the copy; wall, snapshot and silver seconds of a first run of a
    new pipeline into a new lakehouse; its peak memory."""
    server = server_stream(db, table)
    copy = connectorx_copy(db, table)
    lake = workdir()
    pipeline = write_pipeline(db, table, lake, startup="snapshot-only")
    started = time.perf_counter()
    summary, peak = run_cli(pipeline)
    wall = time.perf_counter() - started
    shutil.rmtree(lake)  # 10M rows: 0.5 GB a round
    assert summary["snapshot_rows"] == rows, summary
    return server, copy, wall, summary["seconds_snapshot"], summary["seconds_merge"], peak


def run_many(db: MariaDB, tables: int) -> list[Result]:
    """A pipeline of `tables` small tables (10 rows each): the first run, then a run after one
    change in every table."""
    names = [f"small_{tables}_{i}" for i in range(tables)]
    db.execute("CREATE DATABASE IF NOT EXISTS bench", *(
        f"CREATE TABLE bench.{name} (id INT PRIMARY KEY, v VARCHAR(20), n INT)" for name in names))
    with db.connect("bench") as conn, conn.cursor() as cur:
        for name in names:
            cur.execute(f"INSERT INTO {name} SELECT seq, CONCAT('v', seq), seq "
                        f"FROM seq_1_to_10")
    pipeline = write_pipeline(db, names, workdir())
    started = time.perf_counter()
    first, first_peak = run_cli(pipeline)
    first_wall = time.perf_counter() - started
    with db.connect("bench") as conn, conn.cursor() as cur:
        for name in names:
            cur.execute(f"UPDATE {name} SET n = n + 1 WHERE id = 1")
    started = time.perf_counter()
    second, second_peak = run_cli(pipeline)
    second_wall = time.perf_counter() - started
    assert second["captured_changes"] == tables, second
    return [
        Result(f"{tables} tables: first run (wall)", tables * 10, first_wall, first_peak),
        Result(f"{tables} tables: a change in each (wall)", tables, second_wall, second_peak),
    ]
