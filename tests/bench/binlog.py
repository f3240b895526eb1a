"""Binlog to silver (goal 2): a run that captures and merges N changes (3 updates : 1 delete :
1 insert, in transactions of 5,000 holding all three), on a 7-column and a 40-column table, on
the in-process path (a plain table, merged by delta-rs in the cdc-sql process when its window
fits) and on the engine path (the same table through a projection renaming a column, so the
engine's SQL merges it), against MariaDB's C decoder in the same invocation:
`mariadb-binlog --read-from-remote-server --base64-output=DECODE-ROWS -vv` over the same
events, end to end (fetched from the server and decoded to text, into /dev/null); the decode
alone, of the same files fetched raw beforehand, is shown too. The plain table is held to the
in-process path's bound whoever merged it (named beside it), except with --sql-only, which
sends its windows through the engine too. The silver step is also set beside one bare
`MERGE INTO` of the same changes, deduplicated and typed beforehand, on the same engine
(tests/bench/merge_child.py).

Each run is a whole `cdc-sql run --until-caught-up` process (start to exit), its peak RSS that
of its process tree; the pipelines were snapshotted before the changes were made."""
from __future__ import annotations

import glob
import shutil
import subprocess

from cdc_sql.dev.mariadb import PASSWORD, USER, MariaDB
from tests.bench.common import (ENGINE, Result, at_least, columns_of, create_table,
                                engine_label, human, make_mixed_changes, merged_by, mixed_rows,
                                run_child, run_cli, timed, workdir, write_pipeline)

BOUNDS = {"in-process": 1.0, "engine": 0.5}  # of the rate of mariadb-binlog -vv


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
    specs = {"plain table": table,
             "projection": {"name": table, "projection": engine_projection(table, wide)}}
    pipelines = {}
    for name, spec in specs.items():
        pipelines[name] = write_pipeline(db, spec, workdir())
        run_cli(pipelines[name])  # the snapshot, so the measured runs capture and merge only
    silver_copy = workdir() / "silver"
    shutil.copytree(pipelines["plain table"].parent / "lake" / "silver" / table, silver_copy)
    start = make_mixed_changes(db, table, changes, wide)
    end_to_end, decode = c_decoder(db, start)
    merge = bare_merge(db, table, changes, silver_copy)
    label = f"{human(changes)} changes, {kind}"
    results = [Result(f"mariadb-binlog -vv, remote, end to end ({label})", changes, end_to_end),
               Result(f"  its decode alone, of local files ({label})", changes, decode),
               Result(f"bare {engine_label().split()[0]} MERGE of the deduplicated changes "
                      f"({label})", changes, merge)]
    for name, pipeline in pipelines.items():
        summary, child = run_cli(pipeline)
        assert summary["captured_changes"] == changes, summary
        by = merged_by(pipeline.parent / "lake" / "silver" / table)
        path = "engine" if name == "projection" or ENGINE.get("sql_only") else "in-process"
        results += [
            Result(f"run, {name}, merged by {by} ({label})", changes, child.seconds,
                   child.peak_mb, "mariadb-binlog -vv", changes / end_to_end),
            Result(f"  capture {summary['seconds_capture']:.2f} s, merge "
                   f"{summary['seconds_merge']:.2f} s, the rest "
                   f"{child.seconds - summary['seconds_capture'] - summary['seconds_merge']:.2f}"
                   f" s", changes, 0),
            Result(f"  silver step (window, last change per key, MERGE, state), {name}",
                   changes, summary["seconds_merge"], None, "bare MERGE", changes / merge),
            at_least(f"2 binlog to silver, {path} path ({name}): rate / mariadb-binlog -vv, "
                     f"{label}", end_to_end / child.seconds, BOUNDS[path], "x"),
        ]
    return results


def bare_merge(db: MariaDB, table: str, changes: int, silver_copy) -> float:
    """Seconds of one MERGE INTO of the same changes on the benchmark's engine, deduplicated and
    typed beforehand (every key changed once: the rows the table holds now, and the keys it no
    longer holds as deletes), into a copy of silver taken before the changes."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import write_deltalake

    from cdc_sql.config.model import Source
    from cdc_sql.source import mysql
    from cdc_sql.source.schema import read_table
    from cdc_sql.source.snapshot import read_split
    from cdc_sql.source.splits import Split

    source = Source(host="127.0.0.1", port=db.port, user=USER, password=PASSWORD)
    with mysql.cursor(source) as cur:
        source_table = read_table(cur, "bench", table)
    now = pa.Table.from_batches(list(read_split(source, source_table, Split(
        f"bench.{table}", 0, None, None), mariadb=True).batches))
    keys = pa.array(range(1, mixed_rows(changes) + 1), now.schema.field("id").type)
    gone = keys.filter(pc.invert(pc.is_in(keys, value_set=now["id"])))
    deletes = pa.table({f.name: gone if f.name == "id" else pa.nulls(len(gone), f.type)
                        for f in now.schema})
    rows = pa.concat_tables([now, deletes])
    ops = ["u"] * now.num_rows + ["d"] * len(gone)
    rows = rows.append_column("_cdc_offset", pa.repeat(pa.scalar("999999:000000000000:000000"),
                                                       rows.num_rows))
    rows = rows.append_column("_cdc_op", pa.array(ops))
    rows = rows.append_column("_cdc_ts", pa.repeat(pa.scalar(0, pa.timestamp("us", tz="UTC")),
                                                   rows.num_rows))
    bare = workdir() / "bare_changes"
    write_deltalake(str(bare), rows)
    child = run_child("-m", "tests.bench.merge_child", str(silver_copy), str(bare), "id",
                      ENGINE.get("mode", "sail"), ENGINE.get("url", ""))
    return child.last_json()["seconds"]
