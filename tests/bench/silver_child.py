"""Child process for the silver stage: in one engine session, cdc-sql's silver step of the
captured changes beside a hand-written `MERGE INTO` of the same bronze rows into a copy of the
same silver table. `silver_child PIPELINE WARMUP_COPY BARE_COPY`.

Both are timed in a session already warm: the engine started, then a bare MERGE into a first
copy of silver (not timed) paid its JIT and Delta's first reads; then the silver step (window,
last change per key, MERGE, state), then the bare MERGE into a second copy. On a classic
session the Spark jobs each ran are counted too; through Spark Connect, the round trips each
made (the step's own listed in its log, with their times and the lines that made them)."""
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


class RoundTrips:
    """How many Spark Connect round trips a session has made (None on a classic session):
    ExecutePlan (a query's rows or a command), AnalyzePlan (a schema, a plan's analysis) and
    Config calls, counted at the client, each with its time and, with `log`, the cdc_sql line
    that made it (the profile silver.py prints)."""

    KINDS = {"_execute_and_fetch_as_iterator": "execute", "_execute": "execute",
             "_analyze": "analyze", "config": "config"}

    def __init__(self, engine):
        client = getattr(engine.spark, "client", None) if engine.mode != "local" else None
        self.calls: list[tuple[str, str, float]] | None = None if client is None else []
        self.log = False
        for name, kind in self.KINDS.items() if client is not None else ():
            setattr(client, name, self._counted(getattr(client, name), kind, name))

    def _counted(self, call, kind: str, name: str):
        generator = name == "_execute_and_fetch_as_iterator"

        def counted(*args, **kwargs):
            started, where = time.perf_counter(), _caller()
            if not generator:
                try:
                    return call(*args, **kwargs)
                finally:
                    self._add(kind, where, started)
            return self._drained(call(*args, **kwargs), kind, where, started)
        return counted

    def _drained(self, rows, kind: str, where: str, started: float):
        try:
            yield from rows
        finally:
            self._add(kind, where, started)

    def _add(self, kind: str, where: str, started: float) -> None:
        seconds = time.perf_counter() - started
        self.calls.append((kind, where, seconds))
        if self.log:
            logging.getLogger("cdc_sql").debug("silver rpc %s %.3fs %s", kind, seconds, where)

    def start(self) -> int | None:
        return None if self.calls is None else len(self.calls)

    def count(self, started: int | None) -> int | None:
        return None if started is None else len(self.calls) - started


def _caller(depth: int = 3) -> str:
    """The innermost cdc_sql frames of the stack (`depth` of them), as file:line < ..."""
    frame, found = sys._getframe(2), []
    while frame is not None and len(found) < depth:
        name = frame.f_code.co_filename
        if "/cdc_sql/" in name:
            found.append(f"{name.split('/cdc_sql/')[-1]}:{frame.f_lineno}")
        frame = frame.f_back
    return " < ".join(found) or "?"


def timed_merge(engine, counters: tuple, sql: str) -> tuple[float, list]:
    before = [c.start() for c in counters]
    started = time.perf_counter()
    engine.spark.sql(sql).collect()
    return time.perf_counter() - started, [c.count(b) for c, b in zip(counters, before)]


def main(path: str, warmup_copy: str, bare_copy: str) -> None:
    handler = logging.StreamHandler(sys.stderr)  # each step's time (execute.run_batch), for
    handler.setFormatter(logging.Formatter("%(message)s"))  # the profile silver.py prints
    logging.getLogger("cdc_sql").addHandler(handler)
    with prepared(path) as (runner, view):
        engine = runner.lake.engine
        changes = runner.capture(view, runner.state.load(), view.end)
        (table,) = view.source_tables
        bronze = runner.lake.changes_path(table.db, table.name)
        counters = trips, _ = RoundTrips(engine), Jobs(engine)
        timed_merge(engine, counters, bare_merge(engine, warmup_copy, bronze, "id"))  # warm-up
        plans = runner._silver_plans(view)
        before = [c.start() for c in counters]
        logging.getLogger("cdc_sql").setLevel(logging.DEBUG)
        trips.log = True
        started = time.perf_counter()
        moved = MergePhase(runner.phases).merge(plans, runner.state.load(), Seen(), [])
        step = time.perf_counter() - started
        trips.log = False
        logging.getLogger("cdc_sql").setLevel(logging.WARNING)
        assert moved == [plans[0].spec.name], moved
        step_rpcs, step_jobs = [c.count(b) for c, b in zip(counters, before)]
        bare, (bare_rpcs, bare_jobs) = timed_merge(
            engine, counters, bare_merge(engine, bare_copy, bronze, "id"))
        silver = runner.lake.silver_path(plans[0].spec.name)
        columns = engine.read(bare_copy).columns  # the same rows, after the timing
        assert engine.read(silver).select(*columns).exceptAll(engine.read(bare_copy)).count() \
            == 0 == engine.read(bare_copy).exceptAll(engine.read(silver).select(*columns)).count()
        print(json.dumps({"changes": changes, "step": step, "step_jobs": step_jobs,
                          "step_rpcs": step_rpcs, "bare": bare, "bare_jobs": bare_jobs,
                          "bare_rpcs": bare_rpcs}))

if __name__ == "__main__":
    main(*sys.argv[1:])
