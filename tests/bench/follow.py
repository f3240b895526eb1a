"""Commits that stay cheap through a long run (issue 39: flat in every dimension; a run
following the binlog commits every few seconds, for days).

N small transactions (two inserts each), each closing a capture batch (`binlog_batch_rows: 2`),
are captured and merged by one run; N/4 of them by another run on a pipeline of its own. The
figure is the capture phase's seconds per batch at N over those at N/4: every batch is a
bronze commit and two state commits, and a Delta commit costs more the longer the table's log
and the more files it has, unless the run keeps both short (docs/architecture.md, "State")."""
from __future__ import annotations

from cdc_sql.dev.mariadb import MariaDB
from tests.bench.common import Child, Result, at_most, human, run_cli, workdir, write_pipeline

BATCH_ROWS = 2
BOUND = 1.25  # seconds per batch at N over N/4


def run(db: MariaDB, batches: int) -> list:
    few, few_child = capture_seconds(db, batches // 4, "follow_few")
    many, many_child = capture_seconds(db, batches, "follow_many")
    ratio = (many / batches) / (few / (batches // 4))
    return [
        Result(f"a run of {human(batches // 4)} batches of {BATCH_ROWS} changes: capture",
               batches // 4, few, few_child.peak_mb),
        Result(f"a run of {human(batches)} batches of {BATCH_ROWS} changes: capture",
               batches, many, many_child.peak_mb),
        at_most(f"flat: seconds per capture batch, {human(batches)} batches in a run vs "
                f"{human(batches // 4)}", ratio, BOUND, "x"),
    ]


def capture_seconds(db: MariaDB, batches: int, name: str) -> tuple[float, Child]:
    """The capture phase's seconds of one run over `batches` transactions, each a batch."""
    db.execute("CREATE DATABASE IF NOT EXISTS bench", f"DROP TABLE IF EXISTS bench.{name}",
               f"CREATE TABLE bench.{name} (id BIGINT PRIMARY KEY, v INT)")
    pipeline = write_pipeline(db, name, workdir(), binlog_batch_rows=BATCH_ROWS)
    run_cli(pipeline)  # the snapshot, of no rows
    with db.connect("bench") as conn, conn.cursor() as cur:
        for i in range(batches):
            cur.execute(f"INSERT INTO {name} VALUES (%s, %s), (%s, %s)",
                        (2 * i, i, 2 * i + 1, i))
            conn.commit()
    summary, child = run_cli(pipeline)
    assert summary["captured_changes"] == BATCH_ROWS * batches, summary
    return summary["seconds_capture"], child
