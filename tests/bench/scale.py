"""The scale run: a table of N rows (default 10M) snapshotted, then N/10 changes captured and
merged, each by `cdc-sql run --until-caught-up` in a child process whose peak memory is read.
`python -m tests.bench --stages scale` (the issue asks for under 2 GB on a 2-core machine)."""
from __future__ import annotations

from cdc_sql.dev.mariadb import MariaDB
from tests.bench.binlog import make_changes
from tests.bench.common import Result, create_table, run_cli, workdir, write_pipeline


def run(db: MariaDB, rows: int) -> list[Result]:
    table = create_table(db, rows, "scale")
    work = workdir()
    pipeline = write_pipeline(db, table, work)
    first, first_peak = run_cli(pipeline)
    assert first["snapshot_rows"] == rows, first
    changes = rows // 10
    make_changes(db, table, changes)
    second, second_peak = run_cli(pipeline)
    assert second["captured_changes"] == changes, second
    return [
        Result("scale: snapshot run (whole run)", rows, first["seconds"], first_peak),
        Result("scale: binlog -> bronze", changes, second["seconds_capture"], second_peak),
        Result("scale: silver MERGE into the big table", changes, second["seconds_merge"],
               second_peak),
    ]
