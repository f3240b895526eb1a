"""Capture (source to committed bronze) and the silver step, at default settings, against
baselines measured in the same run on the same events:

- the bare python-mysql-replication parse (`BinLogStreamReader`, rows decoded, nothing written);
- MariaDB's C decoder, `mariadb-binlog --base64-output=DECODE-ROWS -vv`, over the same binlog
  files fetched raw (`--read-from-remote-server --raw`, timed apart);
- one bare `MERGE INTO` of the same changes, deduplicated and typed, for the silver step.

The changes are UPDATEs in transactions of 5,000 rows (every row once). Capture alone is also
timed on one core and on all of them (the same events, bronze as it was before each), to show
it scales with cores. The `bigtxn` stage updates every row of a table in one transaction and
reports the peak memory of the capture.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from cdc_sql.dev.mariadb import PASSWORD, USER, MariaDB
from tests.bench.common import (ENGINE, Result, create_table, engine_label, run_child, run_cli,
                                timed, workdir, write_pipeline)


def make_changes(db: MariaDB, table: str, rows: int, per_transaction: int = 5_000) -> tuple:
    db.execute("FLUSH BINARY LOGS")
    start = db.query("SHOW MASTER STATUS")[0][:2]
    with db.connect("bench") as conn, conn.cursor() as cur:
        for low in range(1, rows + 1, per_transaction):
            cur.execute(f"UPDATE {table} SET a = a + 1, b = CONCAT(b, 'x') "
                        f"WHERE id BETWEEN %s AND %s", (low, low + per_transaction - 1))
    return start


def bare_parse(db: MariaDB, table: str, start: tuple) -> tuple[int, float]:
    def parse() -> int:
        stream = BinLogStreamReader(
            connection_settings={"host": "127.0.0.1", "port": db.port, "user": USER,
                                 "passwd": PASSWORD},
            server_id=9001, log_file=start[0], log_pos=start[1], resume_stream=True,
            blocking=False, only_schemas=["bench"], only_tables=[table],
            only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent])
        n = sum(len(event.rows) for event in stream)
        stream.close()
        return n
    return timed(parse)


def c_decoder(db: MariaDB, start: tuple, work) -> tuple[float, float]:
    """Seconds to fetch the binlog raw, and for mariadb-binlog -vv to decode it to text."""
    raw = work / "raw"
    raw.mkdir(exist_ok=True)
    fetch = (f"mariadb-binlog --read-from-remote-server --raw --to-last-log -h127.0.0.1 "
             f"-P{db.port} -u{USER} -p{PASSWORD} --result-file={raw}/ {start[0]}")
    _, fetch_seconds = timed(lambda: subprocess.run(fetch, shell=True, check=True,
                                                    capture_output=True))
    files = sorted(glob.glob(f"{raw}/*"))
    decode = (f"mariadb-binlog --base64-output=DECODE-ROWS -vv --start-position={start[1]} "
              f"{' '.join(files)} > /dev/null")
    _, decode_seconds = timed(lambda: subprocess.run(decode, shell=True, check=True))
    shutil.rmtree(raw, ignore_errors=True)
    return fetch_seconds, decode_seconds


def bare_merge(db: MariaDB, table: str, work, silver_copy: str) -> float:
    """One MERGE INTO of the same changes, pre-deduplicated (every row changed once: the table
    as it is now), into a copy of silver taken before the measured run."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from cdc_sql.config.model import Source
    from cdc_sql.source import mysql
    from cdc_sql.source.schema import read_table
    from cdc_sql.source.snapshot import read_split
    from cdc_sql.source.splits import Split

    source = Source(host="127.0.0.1", port=db.port, user=USER, password=PASSWORD)
    with mysql.cursor(source) as cur:
        source_table = read_table(cur, "bench", table)
    rows = pa.Table.from_batches(list(read_split(source, source_table, Split(
        f"bench.{table}", 0, None, None), mariadb=True).batches))
    n = rows.num_rows
    rows = rows.append_column("_cdc_offset", pa.repeat(pa.scalar("999999:000000000000:000000"), n))
    rows = rows.append_column("_cdc_op", pa.repeat(pa.scalar("u"), n))
    rows = rows.append_column("_cdc_ts", pa.repeat(pa.scalar(0, pa.timestamp("us", tz="UTC")), n))
    changes = str(work / "bare_changes")
    write_deltalake(changes, rows)
    out, _ = run_child("-m", "tests.bench.merge_child", silver_copy, changes, "id",
                       ENGINE.get("mode", "sail"), ENGINE.get("url", ""))
    return json.loads(out.strip().splitlines()[-1])["seconds"]


def run(db: MariaDB, rows: int, wide: bool = False) -> list[Result]:
    kind = "wide table" if wide else "7 columns"
    table = create_table(db, rows, "binlog", wide)
    work = workdir()
    pipeline = write_pipeline(db, table, work)
    run_cli(pipeline)  # the snapshot, so the measured run only captures and merges
    silver_copy = str(work / "silver_copy")
    shutil.copytree(work / "lake" / "silver" / table, silver_copy)
    start = make_changes(db, table, rows)
    parsed, bare = bare_parse(db, table, start)
    assert parsed == rows, parsed
    fetch, decode = c_decoder(db, start, work)
    cores = len(os.sched_getaffinity(0))
    one_core, all_cores = (capture_alone(pipeline, work, n) for n in (1, cores))
    summary, peak = run_cli(pipeline)
    assert summary["captured_changes"] == rows, summary
    merge = bare_merge(db, table, work, silver_copy)
    label = f"({kind})"
    return [
        Result(f"bare BinLogStreamReader parse {label}", rows, bare),
        Result(f"mariadb-binlog --raw fetch {label}", rows, fetch),
        Result(f"mariadb-binlog -vv decode {label}", rows, decode),
        Result(f"capture -> bronze {label}", rows, summary["seconds_capture"], peak,
               "bare parse", rows / bare),
        Result(f"capture -> bronze {label}", rows, summary["seconds_capture"], peak,
               "mariadb-binlog -vv", rows / decode),
        Result(f"capture alone, 1 core {label}", rows, one_core),
        Result(f"capture alone, {cores} cores {label}", rows, all_cores, None, "1 core",
               rows / one_core),
        Result(f"bare {engine_label().split()[0]} MERGE (deduplicated) {label}", rows, merge),
        Result(f"silver step (filter, dedup, MERGE) {label}", rows, summary["seconds_merge"],
               peak, "bare MERGE", rows / merge),
    ]


def capture_alone(pipeline, work, cores: int) -> float:
    """Seconds of the capture phase alone on `cores` cores; the lakehouse is left as before."""
    lake, kept = work / "lake", work / "lake_before"
    shutil.copytree(lake, kept)
    try:
        out, _ = run_child("-m", "tests.bench.capture_child", str(pipeline), str(cores))
    finally:
        shutil.rmtree(lake)
        kept.rename(lake)
    return json.loads(out.strip().splitlines()[-1])["seconds"]


def run_wide(db: MariaDB, rows: int) -> list[Result]:
    return run(db, rows, wide=True)


def run_big_transaction(db: MariaDB, rows: int) -> list[Result]:
    """Every row of a table updated in one transaction: capture alone (its peak memory must not
    follow the transaction's size), then the whole run that merges it."""
    table = create_table(db, rows, "bigtxn")
    work = workdir()
    pipeline = write_pipeline(db, table, work)
    run_cli(pipeline)
    db.execute("FLUSH BINARY LOGS")
    start = db.query("SHOW MASTER STATUS")[0][:2]
    db.execute(f"UPDATE bench.{table} SET a = a + 1, b = CONCAT(b, 'x')")
    fetch, decode = c_decoder(db, start, work)
    out, capture_peak = run_child("-m", "tests.bench.capture_child", str(pipeline))
    captured = json.loads(out.strip().splitlines()[-1])
    assert captured["changes"] == rows, captured
    summary, run_peak = run_cli(pipeline)
    return [
        Result("one-transaction UPDATE: mariadb-binlog -vv", rows, decode),
        Result("one-transaction UPDATE: capture alone", rows, captured["seconds"], capture_peak,
               "mariadb-binlog -vv", rows / decode),
        Result("one-transaction UPDATE: the run merging it", rows, summary["seconds"], run_peak),
    ]
