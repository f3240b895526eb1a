"""Snapshot into bronze against the server's own streaming rate and a bare pymysql scan."""
from __future__ import annotations

import json
import subprocess

import pymysql.cursors

from cdc_sql.devdb import PASSWORD, USER, MariaDB
from tests.bench.common import Result, create_table, run_child, timed, workdir, write_pipeline


def server_stream(db: MariaDB, table: str) -> float:
    """`mariadb --quick` streaming the table to `wc -l`: the rate the server can send."""
    command = (f"mariadb --quick -N -h127.0.0.1 -P{db.port} -u{USER} -p{PASSWORD} "
               f"-e 'SELECT * FROM bench.{table}' | wc -l")
    out, seconds = timed(lambda: subprocess.run(command, shell=True, check=True,
                                                capture_output=True, text=True).stdout)
    return int(out) / seconds


def pymysql_scan(db: MariaDB, table: str) -> float:
    def scan() -> int:
        with db.connect(cursorclass=pymysql.cursors.SSCursor) as conn, conn.cursor() as cur:
            cur.execute(f"SELECT * FROM bench.{table}")
            return sum(len(rows) for rows in iter(lambda: cur.fetchmany(10_000), ()))
    rows, seconds = timed(scan)
    return rows / seconds


def run(db: MariaDB, rows: int, parallelism: int = 2) -> list[Result]:
    table = create_table(db, rows, "snapshot")
    server = server_stream(db, table)
    bare = pymysql_scan(db, table)
    work = workdir()
    pipeline = write_pipeline(db, table, work, startup="snapshot-only",
                              chunk_size=100_000, parallelism=parallelism)
    out, peak = run_child("-m", "tests.bench.snapshot_child", str(pipeline))
    seconds = json.loads(out.strip().splitlines()[-1])["seconds"]
    tasks = write_pipeline(db, table, workdir(), startup="snapshot-only", chunk_size=100_000,
                           runner="spark")
    out, tasks_peak = run_child("-m", "tests.bench.snapshot_child", str(tasks))
    tasks_seconds = json.loads(out.strip().splitlines()[-1])["seconds"]
    return [
        Result("server stream (mariadb --quick)", rows, rows / server),
        Result("bare pymysql SSCursor scan", rows, rows / bare),
        Result(f"snapshot -> bronze (p={parallelism})", rows, seconds, peak,
               "server stream", server),
        Result(f"snapshot -> bronze (p={parallelism})", rows, seconds, peak,
               "pymysql scan", bare),
        Result("snapshot as Spark tasks (Sail)", rows, tasks_seconds, tasks_peak,
               "server stream", server),
    ]
