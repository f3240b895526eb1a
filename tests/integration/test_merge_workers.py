"""Light merges in worker processes (run/merge_workers.py): silver exact, state as in process,
a worker's error the run's own, and a window that needs the engine merged by the run."""
import pyarrow as pa
import pytest

from cdc_sql.errors import StateError
from cdc_sql.run import merge_workers
from tests.integration.helpers import assert_silver_equals, checkpoint, run, silver_path

pytestmark = [pytest.mark.integration, pytest.mark.local_lake]
TABLES = [f"tenant_{i}" for i in range(3)]
SELECT = "SELECT * FROM {db}.{name}"


@pytest.fixture
def tenants(mariadb, database, make_pipeline, engine, monkeypatch):
    """Three small tables of a few rows, first run done; every later pass with at least two
    light tables merges them in workers, whose tasks are counted."""
    for name in TABLES:
        mariadb.execute(f"CREATE TABLE {database}.{name} (id INT PRIMARY KEY, v VARCHAR(20), "
                        f"f FLOAT, d DOUBLE, m DECIMAL(12, 4), at DATETIME(6))",
                        f"INSERT INTO {database}.{name} VALUES (1, 'a', 0.1, 0.1, 1.5, "
                        f"'2024-01-01 00:00:00.5'), (2, 'b', 3.4028e38, -0.0, -2.25, NULL), "
                        f"(3, NULL, NULL, 1e-300, NULL, '1999-12-31 23:59:59.999999')")
    pipeline = make_pipeline("\n".join(f"- name: {n}\n  source: {database}.{n}" for n in TABLES))
    run(pipeline, engine)
    monkeypatch.setattr(merge_workers, "WORKER_TABLES", 2)
    tasks = []
    merge = merge_workers.Worker.merge
    monkeypatch.setattr(merge_workers.Worker, "merge",
                        lambda self, plan, *rest, **kw: tasks.append(plan.spec.name) or
                        merge(self, plan, *rest, **kw))
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
    assert sorted(tasks) == TABLES
    assert_exact(engine, pipeline, mariadb, database)
    state = checkpoint(engine, pipeline)
    for name in TABLES:  # state records silver's version as the worker left it
        from deltalake import DeltaTable

        assert state.table(name).silver_version == DeltaTable(
            silver_path(pipeline, name)).version()
        assert state.table(name).applied == state.capture.offset
    run(pipeline, engine)  # nothing new: no window, no task
    assert sorted(tasks) == TABLES
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
    assert TABLES[0] in tasks  # found by the worker, raised by the run


def test_a_window_that_needs_the_engine_is_merged_by_the_run(mariadb, database, engine,
                                                              tenants, monkeypatch):
    pipeline, tasks = tenants
    back = []
    merge = merge_workers.Worker.merge

    def merged(self, plan, *rest, **kw):
        try:
            return merge(self, plan, *rest, **kw)
        except merge_workers.NeedsEngine:
            back.append(plan.spec.name)
            raise

    monkeypatch.setattr(merge_workers.Worker, "merge", merged)
    for name in TABLES:
        mariadb.execute(f"UPDATE {database}.{name} SET v = 'before' WHERE id = 1")
    mariadb.execute(f"TRUNCATE TABLE {database}.{TABLES[0]}",  # the engine's SQL applies it
                    f"INSERT INTO {database}.{TABLES[0]} (id, v) VALUES (7, 'after')")
    run(pipeline, engine)
    assert back == [TABLES[0]]
    assert_exact(engine, pipeline, mariadb, database)


def test_engine_facts_answer_what_the_engine_can_do_and_nothing_else():
    facts = merge_workers.EngineFacts("embedded", False, True)
    assert facts.mode == "embedded" and facts.clusters_liquid and not facts.describes_history
    with pytest.raises(merge_workers.NeedsEngine):
        facts.spark  # noqa: B018 - the attribute is the test
    with pytest.raises(AttributeError):
        facts.__setstate__  # noqa: B018


def test_an_error_that_does_not_pickle_crosses_as_its_type_and_text():
    class Local(Exception):
        pass

    portable = merge_workers._portable(Local("lost"))
    assert isinstance(portable, RuntimeError) and str(portable) == "Local: lost"
    kept = merge_workers._portable(StateError("kept"))
    assert isinstance(kept, StateError) and str(kept) == "kept"
    assert isinstance(merge_workers._portable(pa.ArrowInvalid("x")), pa.ArrowInvalid)
