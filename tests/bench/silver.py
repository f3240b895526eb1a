"""The silver step on the engine's SQL against a bare `MERGE INTO` (issue 35: at least 0.5x on
Spark + Delta): N mixed changes (3 updates : 1 delete : 1 insert, every key changed once) into
a 7-column table's silver, through cdc-sql's silver step with every window on the engine's
`MERGE INTO` (`engine.sql_only`, the reference path), and through one hand-written MERGE of the
same bronze rows into a copy of the same silver, in the same engine session, both warm
(tests/bench/silver_child.py). The figure is the bare MERGE's time over the silver step's."""
from __future__ import annotations

import shutil

from cdc_sql.dev.mariadb import MariaDB
from tests.bench import common
from tests.bench.common import (Result, at_least, create_table, human, make_mixed_changes,
                                merged_by, mixed_rows, run_child, run_cli, workdir, write_pipeline)

BOUND = 0.5  # of the bare MERGE's rate


def run(db: MariaDB, changes: int) -> list:
    table = create_table(db, mixed_rows(changes), "silver")
    settings = dict(common.ENGINE)
    common.ENGINE["sql_only"] = "true"  # the reference path, whatever the engine
    try:
        pipeline = write_pipeline(db, table, workdir())
    finally:
        common.ENGINE.clear()
        common.ENGINE.update(settings)
    run_cli(pipeline)  # the snapshot: silver's first version
    silver = pipeline.parent / "lake" / "silver" / table
    copies = [workdir() / "warmup", workdir() / "bare"]
    for copy in copies:
        shutil.copytree(silver, copy)
    make_mixed_changes(db, table, changes)
    child = run_child("-m", "tests.bench.silver_child", str(pipeline), *map(str, copies))
    found = child.last_json()
    assert found["changes"] == changes, found
    label = f"{human(changes)} changes, 7 columns"
    by = merged_by(silver)
    def jobs(run: str) -> str:  # Spark jobs (a classic session), round trips (Spark Connect)
        return "".join(f", {found[f'{run}_{key}']} {what}" for key, what in
                       (("jobs", "Spark jobs"), ("rpcs", "round trips"))
                       if found.get(f"{run}_{key}") is not None)
    return [Result(f"bare MERGE INTO of the same bronze rows, warm session ({label}"
                   f"{jobs('bare')})", changes, found["bare"]),
            Result(f"silver step, merged by {by} ({label}{jobs('step')})",
                   changes, found["step"], child.peak_mb, "bare MERGE", changes / found["bare"]),
            *[Result(f"    {line}", changes, 0) for line in child.log.splitlines()
              if line.startswith("silver ")],  # where the step's time went
            at_least(f"silver step on the engine's SQL / a bare MERGE INTO, {label}",
                     found["bare"] / found["step"], BOUND, "x")]
