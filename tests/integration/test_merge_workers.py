"""A run's worker processes (workers.py) merging light tables: silver exact, state as in
process, a worker's error the run's own, a window that needs the engine merged by the run, a
crash point in a worker the run's."""
import os
import signal
import subprocess
import sys
import time

import pytest

from cdc_sql import workers
from cdc_sql.errors import StateError
from tests.integration.helpers import assert_silver_equals, checkpoint, run, silver_path

pytestmark = [pytest.mark.integration, pytest.mark.local_lake]
TABLES = [f"tenant_{i}" for i in range(3)]
SELECT = "SELECT * FROM {db}.{name}"


@pytest.fixture
def tenants(mariadb, database, make_pipeline, engine, monkeypatch):
    """Three small tables of a few rows, first run done; every later pass of at least two
    light merges gives them to workers, whose tasks are counted (function, table)."""
    return _tenants(mariadb, database, make_pipeline, engine, monkeypatch)


@pytest.fixture
def tenants_in_passes(mariadb, database, make_pipeline, engine, monkeypatch):
    """`tenants`, with a capture pass that ends once it changed a table (workers.PASS_TABLES
    1), whose light merges, one or more, go to the workers (MANY_TABLES 1): they merge a
    pass's tables while the run captures the next."""
    tenants = _tenants(mariadb, database, make_pipeline, engine, monkeypatch)
    monkeypatch.setattr(workers, "PASS_TABLES", 1)
    monkeypatch.setattr(workers, "MANY_TABLES", 1)
    return tenants


def _tenants(mariadb, database, make_pipeline, engine, monkeypatch):
    for name in TABLES:
        mariadb.execute(f"CREATE TABLE {database}.{name} (id INT PRIMARY KEY, v VARCHAR(20), "
                        f"f FLOAT, d DOUBLE, m DECIMAL(12, 4), at DATETIME(6))",
                        f"INSERT INTO {database}.{name} VALUES (1, 'a', 0.1, 0.1, 1.5, "
                        f"'2024-01-01 00:00:00.5'), (2, 'b', 3.4028e38, -0.0, -2.25, NULL), "
                        f"(3, NULL, NULL, 1e-300, NULL, '1999-12-31 23:59:59.999999')")
    pipeline = make_pipeline("\n".join(f"- name: {n}\n  source: {database}.{n}" for n in TABLES))
    run(pipeline, engine)
    monkeypatch.setattr(workers, "MANY_TABLES", 2)
    tasks = []
    call = workers._Worker.call

    def counted(self, each, arguments):
        function, calls = arguments
        tasks.extend((function.__name__, plan.spec.name) for plan, *_ in calls)
        return call(self, each, arguments)

    monkeypatch.setattr(workers._Worker, "call", counted)
    return pipeline, tasks


def assert_exact(engine, pipeline, mariadb, database):
    for name in TABLES:
        assert_silver_equals(engine, pipeline, name, mariadb,
                             SELECT.format(db=database, name=name))


def test_workers_merge_light_tables_exactly(mariadb, database, engine, tenants):
    pipeline, tasks = tenants
    for name in TABLES:
        mariadb.execute(f"INSERT INTO {database}.{name} VALUES (4, 'new', 1.5e-38, "
                        f"2.2250738585072014e-308, 99999999.9999, '2038-01-19 03:14:08')",
                        f"UPDATE {database}.{name} SET v = CONCAT(v, '!'), f = f * 3 WHERE id = 1",
                        f"UPDATE {database}.{name} SET id = 10 WHERE id = 2",  # key moves
                        f"DELETE FROM {database}.{name} WHERE id = 3")
    run(pipeline, engine)
    assert sorted(tasks) == [("merged_alone", n) for n in TABLES]
    assert_exact(engine, pipeline, mariadb, database)
    state = checkpoint(engine, pipeline)
    for name in TABLES:  # state records silver's version as the worker left it
        from deltalake import DeltaTable

        assert state.table(name).silver_version == DeltaTable(
            silver_path(pipeline, name)).version()
        assert state.table(name).applied == state.capture.offset
    tasks.clear()
    run(pipeline, engine)  # nothing new: no window, no task
    assert tasks == []
    assert_exact(engine, pipeline, mariadb, database)


def test_a_pass_merged_by_workers_while_the_next_captures_is_exact(mariadb, database, engine,
                                                                    tenants_in_passes):
    """Capture in passes of a transaction each: each pass's light merges are left to
    the workers while the next pass reads; idle tables advance by the end. A transaction
    over two tables lands whole in one pass."""
    pipeline, tasks = tenants_in_passes
    for step in range(3):
        for name in TABLES:
            mariadb.execute(f"UPDATE {database}.{name} SET v = CONCAT(v, '{step}'), "
                            f"d = d * 3 WHERE id = 1",
                            f"INSERT INTO {database}.{name} (id, v) VALUES ({30 + step}, 'n')")
        mariadb.execute("START TRANSACTION",
                        f"DELETE FROM {database}.{TABLES[0]} WHERE id = {30 + step}",
                        f"UPDATE {database}.{TABLES[1]} SET id = {40 + step} "
                        f"WHERE id = {30 + step}", "COMMIT")
    run(pipeline, engine)
    merged = [name for function, name in tasks if function == "merged_alone"]
    assert sorted(merged) == sorted(TABLES * 6 + TABLES[:2] * 3)  # a pass a transaction
    assert_exact(engine, pipeline, mariadb, database)
    state = checkpoint(engine, pipeline)
    for name in TABLES:
        from deltalake import DeltaTable

        assert state.table(name).applied == state.capture.offset
        assert state.table(name).silver_version == DeltaTable(
            silver_path(pipeline, name)).version()


def test_a_run_failing_while_workers_merge_records_what_they_did_and_raises_its_error(
        mariadb, database, engine, tenants_in_passes, monkeypatch):
    """The second capture pass fails while the workers merge the first pass's table: the run
    raises its own error, the first pass's merge is recorded, the next run is exact."""
    pipeline, tasks = tenants_in_passes
    from cdc_sql.errors import SourceError
    from cdc_sql.run import capture_phase

    for name in TABLES:
        mariadb.execute(f"UPDATE {database}.{name} SET v = 'again' WHERE id = 1")
    capture, calls = capture_phase.capture, []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise SourceError("the source went away")
        return capture(*args, **kwargs)

    monkeypatch.setattr(capture_phase, "capture", failing)
    with pytest.raises(SourceError, match="went away"):
        run(pipeline, engine)
    state = checkpoint(engine, pipeline)
    first = TABLES[0]
    assert ("merged_alone", first) in tasks
    assert state.table(first).applied == state.capture.offset  # recorded after the failure
    monkeypatch.setattr(capture_phase, "capture", capture)
    run(pipeline, engine)
    assert_exact(engine, pipeline, mariadb, database)


def test_a_workers_error_is_the_runs_own(mariadb, database, engine, tenants):
    pipeline, tasks = tenants
    from deltalake import write_deltalake

    silver = silver_path(pipeline, TABLES[0])
    from deltalake import DeltaTable

    write_deltalake(silver, DeltaTable(silver).to_pyarrow_table().slice(0, 1),
                    mode="append")  # a hand change
    for name in TABLES:
        mariadb.execute(f"UPDATE {database}.{name} SET v = 'x' WHERE id = 1")
    with pytest.raises(StateError, match="changed outside cdc-sql"):
        run(pipeline, engine)
    assert ("merged_alone", TABLES[0]) in tasks  # found by a worker, raised by the run


def test_a_window_that_needs_the_engine_is_merged_by_the_run(mariadb, database, engine,
                                                              tenants, monkeypatch):
    pipeline, tasks = tenants
    back = []
    call = workers._Worker.call

    def needs_engine(self, each, arguments):
        answers, records = call(self, each, arguments)
        back.extend(plan.spec.name for (plan, *_), (_, value) in zip(arguments[1], answers)
                    if isinstance(value, workers.NeedsEngine))
        return answers, records

    monkeypatch.setattr(workers._Worker, "call", needs_engine)
    for name in TABLES:
        mariadb.execute(f"UPDATE {database}.{name} SET v = 'before' WHERE id = 1")
    mariadb.execute(f"TRUNCATE TABLE {database}.{TABLES[0]}",  # the engine's SQL applies it
                    f"INSERT INTO {database}.{TABLES[0]} (id, v) VALUES (7, 'after')")
    run(pipeline, engine)
    assert back == [TABLES[0]]
    assert_exact(engine, pipeline, mariadb, database)


@pytest.mark.parametrize("point, passes", [
    ("bronze.appended", False), ("silver.merged", False), ("silver.merged@2", False),
    ("silver.merged@2", True), ("bronze.appended@4", True)])
def test_a_crash_point_in_a_worker_kills_the_run_and_the_next_run_is_exact(
        mariadb, database, engine, request, point, passes):
    """`cdc-sql run` with workers for two or more tables, killed before any worker starts
    (bronze.appended), or where a worker has merged its first table (the other may have
    merged one too) or its second (a point in a worker kills the run); in passes (`passes`:
    a transaction each), also where a pass captures while the workers merge the
    last one's tables; no worker outlives the run; the next run finishes the work exactly."""
    pipeline, tasks = request.getfixturevalue("tenants_in_passes" if passes else "tenants")
    for name in TABLES:
        mariadb.execute(f"UPDATE {database}.{name} SET v = 'killed', d = d * 7 WHERE id <= 2",
                        f"INSERT INTO {database}.{name} (id, v) VALUES (20, 'z')")
    process = subprocess.Popen(
        [sys.executable, "-c", "import sys, cdc_sql.workers as w; "
         f"w.MANY_TABLES, w.PASS_TABLES = {(1, 1) if passes else (2, workers.PASS_TABLES)}; "
         "from cdc_sql.cli import main; sys.exit(main(sys.argv[1:]))", "run", pipeline.file,
         "--until-caught-up"],
        env={**os.environ, "TEST_MYSQL_PASSWORD": "cdc-secret", "CDC_SQL_KILL_AT": point},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    code = process.wait(timeout=300)
    stderr = process.stderr.read().decode()
    assert code == -signal.SIGKILL, stderr[-3000:]
    assert "Traceback" not in stderr
    assert _ended(process.pid), "a worker outlived its run"  # it ends with its input
    run(pipeline, engine)
    assert_exact(engine, pipeline, mariadb, database)


def _ended(group: int, seconds: float = 10.0) -> bool:
    """Whether every process of the process group has ended, within `seconds` (else they are
    killed)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    os.killpg(group, signal.SIGKILL)
    return False
