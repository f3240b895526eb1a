"""Binlog capture into bronze against a bare BinLogStreamReader parse of the same events."""
from __future__ import annotations

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from cdc_sql.devdb import PASSWORD, USER, MariaDB
from tests.bench.common import (Result, create_table, run_child, run_cli, timed, workdir,
                                write_pipeline)


def make_changes(db: MariaDB, table: str, rows: int, per_transaction: int = 5_000) -> tuple:
    start = db.query("SHOW MASTER STATUS")[0][:2]
    with db.connect("bench") as conn, conn.cursor() as cur:
        for low in range(1, rows + 1, per_transaction):
            cur.execute(f"UPDATE {table} SET a = a + 1, b = CONCAT(b, 'x') "
                        f"WHERE id BETWEEN %s AND %s", (low, low + per_transaction - 1))
    return start


def bare_parse(db: MariaDB, table: str, start: tuple) -> float:
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
    rows, seconds = timed(parse)
    return rows / seconds


def bare_merge(db: MariaDB, table: str, work, silver_copy: str) -> float:
    """One MERGE INTO of the same changes, pre-deduplicated (every row changed once: the table
    as it is now), into a copy of silver taken before the measured run."""
    import json

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
    out, _ = run_child("-m", "tests.bench.merge_child", silver_copy, changes, "id")
    return n / json.loads(out.strip().splitlines()[-1])["seconds"]


def run(db: MariaDB, rows: int) -> list[Result]:
    import shutil

    table = create_table(db, rows, "binlog")
    work = workdir()
    pipeline = write_pipeline(db, table, work, chunk_size=100_000)
    run_cli(pipeline)  # the snapshot, so the measured run only captures
    silver_copy = str(work / "silver_copy")
    shutil.copytree(work / "lake" / "silver" / table, silver_copy)
    start = make_changes(db, table, rows)
    bare = bare_parse(db, table, start)
    summary, peak = run_cli(pipeline)
    assert summary["captured_changes"] == rows, summary
    merge_rate = bare_merge(db, table, work, silver_copy)
    return [
        Result("bare BinLogStreamReader parse", rows, rows / bare),
        Result("binlog -> bronze", rows,
               summary["seconds_capture"], peak, "bare parse", bare),
        Result("bare Sail MERGE (deduplicated)", rows, rows / merge_rate),
        Result("silver step (filter, dedup, MERGE)", rows, summary["seconds_merge"], peak,
               "bare MERGE", merge_rate),
    ]
