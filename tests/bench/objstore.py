"""The first load and capture-to-silver with an `s3://` target (moto's S3 server on loopback,
tests/objstores.py) beside the same runs with a local target, in one invocation: the cost of an
object store's round trips, with everything else the same (source, table, settings)."""
from __future__ import annotations

import os
import statistics

from cdc_sql.dev.mariadb import MariaDB
from tests.bench.common import (Result, create_table, make_mixed_changes, mixed_rows, run_cli,
                                workdir, write_pipeline)
from tests.objstores import start_moto

ROUNDS = 3


def run(db: MariaDB, rows: int, rounds: int = ROUNDS) -> list[Result]:
    """Medians of `rounds` rounds; in each, a new lake on each target in turn (local, then
    S3): the first run (snapshot and silver), then `rows` changes (common.make_mixed_changes),
    then the run that captures and merges them."""
    moto = start_moto()
    os.environ.update(moto.env)  # this process reads state; the children inherit it
    try:
        measured = {"local": [], "s3": []}
        for _ in range(rounds):
            table = create_table(db, mixed_rows(rows), "objstore")  # afresh: changes delete keys
            lakes = {"local": None, "s3": moto.url(moto.bucket())}
            pipelines = {kind: write_pipeline(db, table, workdir(), lake=lake)
                         for kind, lake in lakes.items()}
            first = {kind: _timed_run(p) for kind, p in pipelines.items()}
            make_mixed_changes(db, table, rows)
            later = {kind: _timed_run(p) for kind, p in pipelines.items()}
            for kind in pipelines:
                (one, wall1, peak1), (two, wall2, peak2) = first[kind], later[kind]
                assert one["snapshot_rows"] == mixed_rows(rows) and \
                    two["captured_changes"] == rows, (one, two)
                measured[kind].append((wall1, one["seconds_snapshot"], one["seconds_merge"],
                                       wall2, two["seconds_capture"], two["seconds_merge"],
                                       max(peak1, peak2)))
    finally:
        moto.stop()
    results = []
    names = ("first run (wall)", "first run: snapshot phase", "first run: silver",
             "capture-to-silver run (wall)", "capture -> bronze", "silver step")
    medians = {kind: [statistics.median(m[i] for m in runs) for i in range(6)]
               for kind, runs in measured.items()}
    for i, name in enumerate(names):
        local = medians["local"][i]
        results.append(Result(f"{name}, local target", rows, local,
                              max(m[6] for m in measured["local"])))
        results.append(Result(f"{name}, s3:// (moto)", rows, medians["s3"][i],
                              max(m[6] for m in measured["s3"]), "local target", rows / local))
    return results


def _timed_run(pipeline) -> tuple[dict, float, float]:
    summary, child = run_cli(pipeline)
    return summary, child.seconds, child.peak_mb
