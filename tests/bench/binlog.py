"""Binlog capture into bronze against a bare BinLogStreamReader parse of the same events."""
from __future__ import annotations

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from cdc_sql.devdb import PASSWORD, USER, MariaDB
from tests.bench.common import Result, create_table, run_cli, timed, workdir, write_pipeline


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


def run(db: MariaDB, rows: int) -> list[Result]:
    table = create_table(db, rows, "binlog")
    work = workdir()
    pipeline = write_pipeline(db, table, work, chunk_size=100_000)
    run_cli(pipeline)  # the snapshot, so the measured run only captures
    start = make_changes(db, table, rows)
    bare = bare_parse(db, table, start)
    summary, peak = run_cli(pipeline)
    assert summary["captured_changes"] == rows, summary
    return [
        Result("bare BinLogStreamReader parse", rows, rows / bare),
        Result("binlog -> bronze", rows,
               summary["seconds_capture"], peak, "bare parse", bare),
        Result("silver MERGE of the captured window", rows, summary["seconds_merge"], peak),
    ]
