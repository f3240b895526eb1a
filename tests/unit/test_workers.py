"""The run's worker processes (workers.py): how many, in what chunks, what crosses the pipe."""
import os
import signal
import subprocess
import sys

import pyarrow as pa
import pytest
from hypothesis import given, strategies as st

from cdc_sql import workers
from cdc_sql.errors import StateError


def test_many_light_merges_go_to_a_worker_a_core_within_the_parallelism():
    """Below MANY_TABLES light merges a pass starts no worker (one's start costs more than it
    saves); from there one a core, at most target.parallelism."""
    from cdc_sql.workers import MANY_TABLES, count

    assert count(MANY_TABLES - 1, 8, 8) == 0 and count(0, 2, 4) == 0
    assert count(MANY_TABLES, 2, 4) == 2 and count(10 * MANY_TABLES, 8, 3) == 3
    assert count(MANY_TABLES, 1, 4) == 1 and count(MANY_TABLES, 4, 1) == 1


@given(st.integers(0, 100_000))
def test_capture_passes_end_at_a_number_of_tables_only_where_there_are_more(here):
    """Where more than PASS_TABLES tables may merge here, a capture pass ends once it has
    changed that many (a pass's merges, in workers, overlap the next pass's capture); never
    fewer than a pass that gives its merges to workers."""
    bound = workers.pass_tables(here)
    assert bound == (workers.PASS_TABLES if here > workers.PASS_TABLES else 0)
    assert bound == 0 or workers.count(bound, 2, 4) > 0


@given(st.integers(0, 5000), st.integers(1, 8))
def test_tasks_go_to_workers_in_chunks_of_every_task_once(items, count):
    """Every item once, in order, in chunks of at most CHUNK, and at least four chunks a
    worker when there are that many items."""
    cut = workers.chunks(list(range(items)), count)
    assert [i for chunk in cut for i in chunk] == list(range(items))
    assert all(0 < len(chunk) <= workers.CHUNK for chunk in cut)
    assert len(cut) >= min(items, 4 * count)


def test_engine_facts_answer_what_the_engine_can_do_and_nothing_else():
    facts = workers.EngineFacts("embedded", False, True)
    assert facts.mode == "embedded" and facts.clusters_liquid and not facts.describes_history
    with pytest.raises(workers.NeedsEngine):
        facts.spark  # noqa: B018 - the attribute is the test
    with pytest.raises(AttributeError):
        facts.__setstate__  # noqa: B018


def test_an_error_that_does_not_pickle_crosses_as_its_type_and_text():
    class Local(Exception):
        pass

    portable = workers._portable(Local("lost"))
    assert isinstance(portable, RuntimeError) and str(portable) == "Local: lost"
    kept = workers._portable(StateError("kept"))
    assert isinstance(kept, StateError) and str(kept) == "kept"
    assert isinstance(workers._portable(pa.ArrowInvalid("x")), pa.ArrowInvalid)


def test_a_crash_point_reached_in_a_worker_kills_its_run_too():
    """faults.kill_also: a process (here a stand-in for the run, sleeping) dies with the
    worker that reaches the crash point."""
    run = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    worker = subprocess.run(
        [sys.executable, "-c", f"from cdc_sql import faults; faults.kill_also({run.pid}); "
         f"faults.point('silver.merged'); print('not killed')"],
        env={**os.environ, "CDC_SQL_KILL_AT": "silver.merged"}, capture_output=True,
        timeout=60)
    assert worker.returncode == -signal.SIGKILL and b"not killed" not in worker.stdout
    assert run.wait(timeout=10) == -signal.SIGKILL
