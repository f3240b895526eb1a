"""Binlog to silver (goal 2): a run that captures and merges N changes (3 updates : 1 delete :
1 insert, in transactions of 5,000 holding all three), on a 7-column and a 40-column table, on
the in-process path (a plain table, merged by delta-rs in the cdc-sql process when its window
fits) and on the engine path (the same table through a projection renaming a column, so the
engine's SQL merges it), against MariaDB's C decoder in the same invocation:
`mariadb-binlog --read-from-remote-server --base64-output=DECODE-ROWS -vv` over the same
events, end to end (fetched from the server and decoded to text, into /dev/null); the decode
alone, of the same files fetched raw beforehand, is shown too.

Each run is a whole `cdc-sql run --until-caught-up` process (start to exit), its peak RSS that
of its process tree; the pipelines were snapshotted before the changes were made."""
from __future__ import annotations

import glob
import shutil
import subprocess

from cdc_sql.dev.mariadb import PASSWORD, USER, MariaDB
from tests.bench.common import (Result, at_least, columns_of, create_table, human,
                                make_mixed_changes, merged_by, mixed_rows, run_cli, timed,
                                workdir, write_pipeline)

BOUNDS = {"in-process": 1.0, "engine": 0.5}


def c_decoder(db: MariaDB, start: tuple) -> tuple[float, float]:
    """Seconds of `mariadb-binlog -vv` end to end from the server, and of its decode alone."""
    remote = (f"mariadb-binlog --read-from-remote-server --to-last-log -h127.0.0.1 -P{db.port} "
              f"-u{USER} -p{PASSWORD} --base64-output=DECODE-ROWS -vv "
              f"--start-position={start[1]} {start[0]} > /dev/null")
    _, end_to_end = timed(lambda: subprocess.run(remote, shell=True, check=True))
    raw = workdir()
    subprocess.run(f"mariadb-binlog --read-from-remote-server --raw --to-last-log -h127.0.0.1 "
                   f"-P{db.port} -u{USER} -p{PASSWORD} --result-file={raw}/ {start[0]}",
                   shell=True, check=True, capture_output=True)
    files = " ".join(sorted(glob.glob(f"{raw}/*")))
    _, decode = timed(lambda: subprocess.run(
        f"mariadb-binlog --base64-output=DECODE-ROWS -vv --start-position={start[1]} {files} "
        f"> /dev/null", shell=True, check=True))
    shutil.rmtree(raw)
    return end_to_end, decode


def engine_projection(table: str, wide: bool) -> str:
    """All columns, one renamed: silver holds the same rows, but not `as is`."""
    columns = ["id", "a AS a_renamed", *(c for c, *_ in columns_of(wide)[1:])]
    return f"SELECT {', '.join(columns)} FROM {table}"


def run(db: MariaDB, changes: int) -> list:
    results = []
    for wide in (False, True):
        results += run_table(db, changes, wide)
    return results


def run_table(db: MariaDB, changes: int, wide: bool) -> list:
    kind = "40 columns" if wide else "7 columns"
    table = create_table(db, mixed_rows(changes), "binlog", wide)
    paths = {"in-process": table,
             "engine": {"name": table, "projection": engine_projection(table, wide)}}
    pipelines = {}
    for path, spec in paths.items():
        pipelines[path] = write_pipeline(db, spec, workdir())
        run_cli(pipelines[path])  # the snapshot, so the measured runs capture and merge only
    start = make_mixed_changes(db, table, changes, wide)
    end_to_end, decode = c_decoder(db, start)
    label = f"{human(changes)} changes, {kind}"
    results = [Result(f"mariadb-binlog -vv, remote, end to end ({label})", changes, end_to_end),
               Result(f"  its decode alone, of local files ({label})", changes, decode)]
    for path, pipeline in pipelines.items():
        summary, child = run_cli(pipeline)
        assert summary["captured_changes"] == changes, summary
        by = merged_by(pipeline.parent / "lake" / "silver" / table)
        results += [
            Result(f"run, {path} path, merged by {by} ({label})", changes, child.seconds,
                   child.peak_mb, "mariadb-binlog -vv", changes / end_to_end),
            Result(f"  capture {summary['seconds_capture']:.2f} s, merge "
                   f"{summary['seconds_merge']:.2f} s, the rest "
                   f"{child.seconds - summary['seconds_capture'] - summary['seconds_merge']:.2f}"
                   f" s", changes, 0),
            at_least(f"2 binlog to silver, {path} path: rate / mariadb-binlog -vv, {label}",
                     end_to_end / child.seconds, BOUNDS[path], "x"),
        ]
    return results
