"""Child process for the silver stage: in one engine session, cdc-sql's silver step of the
captured changes beside a hand-written `MERGE INTO` of the same bronze rows into a copy of the
same silver table. `silver_child PIPELINE WARMUP_COPY BARE_COPY`.

Both are timed in a session already warm: the engine started, then a bare MERGE into a first
copy of silver (not timed) paid its JIT and Delta's first reads; then the silver step (window,
last change per key, MERGE, state), then the bare MERGE into a second copy. On a classic
session the Spark jobs each ran are counted too."""
import json
import logging
import sys
import time

from cdc_sql.lake.tables import table_ref
from cdc_sql.run.merge_phase import MergePhase, Seen
from cdc_sql.sql import quote
from tests.bench.capture_child import prepared


def bare_merge(engine, silver: str, bronze: str, key: str) -> str:
    """Every key changed once (tests/bench/common.make_mixed_changes): bronze's rows, as they
    are, upsert or delete silver's."""
    columns, op = [quote(c) for c in engine.read(silver).columns], quote("_cdc_op")
    return (f"MERGE INTO {table_ref(silver)} AS t USING {table_ref(bronze)} AS s "
            f"ON t.{quote(key)} = s.{quote(key)} "
            f"WHEN MATCHED AND s.{op} = 'd' THEN DELETE "
            f"WHEN MATCHED THEN UPDATE SET {', '.join(f't.{c} = s.{c}' for c in columns)} "
            f"WHEN NOT MATCHED AND s.{op} <> 'd' THEN INSERT ({', '.join(columns)}) "
            f"VALUES ({', '.join(f's.{c}' for c in columns)})")


class Jobs:
    """How many Spark jobs a classic session has started (None through Spark Connect): the
    scheduler's next job id, whichever thread started them (the silver step runs on the
    merge phase's threads)."""

    def __init__(self, engine):
        context = getattr(engine.spark, "sparkContext", None) if engine.mode == "local" else None
        self.scheduler = context._jsc.sc().dagScheduler() if context is not None else None

    def start(self) -> int | None:
        if self.scheduler is None:
            return None
        next_id = self.scheduler.nextJobId()  # an AtomicInteger, or its value through py4j
        return next_id if isinstance(next_id, int) else next_id.get()

    def count(self, started: int | None) -> int | None:
        return None if started is None else self.start() - started


def timed_merge(engine, jobs: Jobs, sql: str) -> tuple[float, int | None]:
    before = jobs.start()
    started = time.perf_counter()
    engine.spark.sql(sql).collect()
    return time.perf_counter() - started, jobs.count(before)


def main(path: str, warmup_copy: str, bare_copy: str) -> None:
    handler = logging.StreamHandler(sys.stderr)  # each step's time (execute.run_batch), for
    handler.setFormatter(logging.Formatter("%(message)s"))  # the profile silver.py prints
    logging.getLogger("cdc_sql").addHandler(handler)
    with prepared(path) as (runner, view):
        engine = runner.lake.engine
        changes = runner.capture(view, runner.state.load(), view.end)
        (table,) = view.source_tables
        bronze, jobs = runner.lake.changes_path(table.db, table.name), Jobs(engine)
        timed_merge(engine, jobs, bare_merge(engine, warmup_copy, bronze, "id"))  # warm-up
        plans = runner._silver_plans(view)
        before = jobs.start()
        logging.getLogger("cdc_sql").setLevel(logging.DEBUG)
        started = time.perf_counter()
        moved = MergePhase(runner.phases).merge(plans, runner.state.load(), Seen(), [])
        step = time.perf_counter() - started
        logging.getLogger("cdc_sql").setLevel(logging.WARNING)
        assert moved == [plans[0].spec.name], moved
        step_jobs = jobs.count(before)
        bare, bare_jobs = timed_merge(engine, jobs, bare_merge(engine, bare_copy, bronze, "id"))
        silver = runner.lake.silver_path(plans[0].spec.name)
        columns = engine.read(bare_copy).columns  # the same rows, after the timing
        assert engine.read(silver).select(*columns).exceptAll(engine.read(bare_copy)).count() \
            == 0 == engine.read(bare_copy).exceptAll(engine.read(silver).select(*columns)).count()
        print(json.dumps({"changes": changes, "step": step, "step_jobs": step_jobs,
                          "bare": bare, "bare_jobs": bare_jobs}))


if __name__ == "__main__":
    main(*sys.argv[1:])
