"""Checks of silver against the source database itself."""
from __future__ import annotations

from chispa import assert_df_equality

from cdc_sql.lake.lake import Lake
from cdc_sql.run.runner import Runner


def state_log(root) -> list[tuple[str, str, dict]]:
    """The checkpoint's entries (kind, name, value), oldest first, read with delta-rs: no Spark,
    so it also works while another process runs the pipeline."""
    import json

    from deltalake import DeltaTable

    try:
        rows = DeltaTable(f"{root}/_state/checkpoint").to_pyarrow_table().to_pylist()
    except Exception:  # noqa: BLE001 - not created yet
        return []
    return [(r["kind"], r["name"], json.loads(r["value"]))
            for r in sorted(rows, key=lambda r: r["seq"])]


def run(pipeline, engine) -> dict:
    return Runner(pipeline, engine).run(until_caught_up=True).to_json()


class Crash(Exception):
    """A run stopped at a fault point, in this process (`run_crashing_at`)."""


def run_crashing_at(pipeline, engine, monkeypatch, point: str, nth: int = 1) -> None:
    """A run stopped where it reaches fault point `point` (cdc_sql/faults.py) the `nth` time,
    as a kill there would stop it, in this process (the engine goes on for the next run)."""
    import pytest

    from cdc_sql import faults

    reached = []

    def crash(name):
        reached.extend([name] if name == point else [])
        if len(reached) == nth:
            raise Crash(name)

    with monkeypatch.context() as patched:
        patched.setattr(faults, "point", crash)
        with pytest.raises(Crash):
            run(pipeline, engine)


def silver_path(pipeline, name: str) -> str:
    return Lake(None, str(pipeline.root), None).silver_path(name)


def history_path(pipeline, name: str) -> str:
    return Lake(None, str(pipeline.root), None).history_path(name)


def checkpoint(engine, pipeline):
    """The pipeline's checkpoint, typed (lake/state.py)."""
    from cdc_sql.lake.state import State

    return State(Lake.open(engine, str(pipeline.root))).load()


def source_rows(mariadb, sql: str) -> list[tuple]:
    return mariadb.query(sql)


def assert_silver_equals(engine, pipeline, name: str, mariadb, source_sql: str, key: str = "id",
                         where: str = ""):
    """Silver (engine columns dropped; `where` it holds, when given) equals the rows
    `source_sql` returns from MariaDB."""
    silver = engine.read(silver_path(pipeline, name))
    if where:
        silver = silver.where(where)
    columns = [c for c in silver.columns if not c.startswith("_cdc_")]
    keys = [k.strip() for k in key.split(",")]  # "a, b": a composite key
    silver = silver.select(*columns).orderBy(*keys)
    schema = silver.schema
    expected = engine.spark.createDataFrame(source_rows(mariadb, source_sql), schema) \
        .orderBy(*keys)
    try:
        assert_df_equality(silver, expected, ignore_nullable=True)
    except AssertionError:
        differences = row_differences(silver.collect(), expected.collect())
        if not differences:
            raise  # the schemas differ: chispa's own words
        raise AssertionError(f"silver {name} differs from the source:\n{differences}") from None


def row_differences(silver: list, source: list, shown: int = 20) -> str:
    """The rows only silver holds and those only the source holds, `shown` of each at most
    (chispa prints every row of both); "" when the rows are the same."""
    from collections import Counter

    have, want = Counter(map(repr, silver)), Counter(map(repr, source))
    if have == want:
        return ""
    lines = []
    for label, rows in (("only in silver", have - want), ("only in the source", want - have)):
        found = sorted(rows.elements())
        lines += [f"{label}: {len(found)} rows"] + [f"  {row}" for row in found[:shown]]
    return "\n".join(lines)


def resnapshot_and_run(engine, pipeline, name: str, mariadb, source_sql: str) -> None:
    """`cdc-sql resnapshot` of one silver table, then a run: silver equals `source_sql`."""
    import os
    import subprocess
    import sys

    subprocess.run([sys.executable, "-m", "cdc_sql.cli", "resnapshot", pipeline.file, "--tables",
                    name], env={**os.environ, "TEST_MYSQL_PASSWORD": "cdc-secret"}, check=True,
                   capture_output=True, timeout=120)
    run(pipeline, engine)
    assert_silver_equals(engine, pipeline, name, mariadb, source_sql)


def runs_killed_at(pipeline, points: list[str]) -> list[tuple[str, int]]:
    """`cdc-sql run --until-caught-up` once per fault point (cdc_sql/faults.py), each killed
    there or let finish when the point is not reached: (point, exit code) of each."""
    import os
    import signal
    import subprocess
    import sys

    env = {**os.environ, "TEST_MYSQL_PASSWORD": "cdc-secret"}
    outcomes = []
    for point in points:
        process = subprocess.Popen(
            [sys.executable, "-m", "cdc_sql.cli", "run", pipeline.file, "--until-caught-up"],
            env={**env, "CDC_SQL_KILL_AT": point}, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, start_new_session=True)
        code = process.wait(timeout=300)
        try:
            os.killpg(process.pid, signal.SIGKILL)  # the binlog parser child, if left
        except ProcessLookupError:
            pass
        assert code in (0, -signal.SIGKILL), process.stderr.read().decode()[-3000:]
        outcomes.append((point, code))
    return outcomes
