"""Light merges (merge_phase.light: a small local table merged in process) in worker processes
of the run's own, when a pass has many of them.

A light merge spends its time in Python (a few rows read, compared, written; two commit
files): threads of one process only take turns at its lock, so a pass of a thousand such
tables merged in 5.4 s on one thread and no quicker on two (docs/performance.md). A worker
is a Python process started here (`python -c`, never the caller's main module, which a
notebook or a script without a `__main__` guard would run again), reading tasks from its
standard input and answering on a copy of its standard output (its own output goes to
standard error). A task is one table's window: the worker checks silver is untouched, lays it
out if asked, merges the window (lake/silver/merge.py, as in process) and answers with
silver's versions, its seconds and its log records, which the run logs as its own. State is
recorded by the run, as for any merge: a worker killed after its commit leaves a window whose
replay finds nothing to do.

A worker has no engine: anything that would use one (a window the files send to the engine's
SQL after all, a TRUNCATE in it) stops the task with NeedsEngine where it would start it, and
the run merges that table itself, as the next run would after a kill there (every step of a
window is replay-safe). A crash point reached in a worker (faults.py) kills the run too.
"""
from __future__ import annotations

import logging
import os
import pickle
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

log = logging.getLogger("cdc_sql")

WORKER_TABLES = 500  # a pass with at least this many light tables merges them in workers


def workers(light_tables: int, cores: int, parallelism: int) -> int:
    """How many worker processes merge a pass's light tables: none below WORKER_TABLES (a
    worker's start, its imports, takes about 0.5 s of a core), else one a core, at most
    `target.parallelism`. Pure."""
    return 0 if light_tables < WORKER_TABLES else max(1, min(cores, parallelism))


class NeedsEngine(BaseException):
    """A task reached for the engine, which a worker has not: the run merges the table
    itself. (A BaseException: no `except Exception` on the way takes it for a failure.)"""


@dataclass(frozen=True)
class EngineFacts:
    """What a worker knows of the run's engine: what it is and can do, never a session."""

    mode: str
    describes_history: bool
    clusters_liquid: bool

    def __getattr__(self, name: str):
        if name.startswith("__"):  # (pickle's and copy's questions)
            raise AttributeError(name)
        raise NeedsEngine(name)


@dataclass(frozen=True)
class Merged:
    """A worker's answer: silver's (and history's) versions after the window, the seconds
    it took, and the log records it made (level, message)."""

    versions: dict
    seconds: float
    records: list


class Worker:
    """One worker process, used by one thread at a time."""

    def __init__(self, root: str, engine, sql_only: bool):
        package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [package, *filter(None, [os.environ.get("PYTHONPATH")])])}
        self._process = subprocess.Popen(
            [sys.executable, "-c", "from cdc_sql.run.merge_workers import serve; serve()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        facts = EngineFacts(engine.mode, bool(engine.describes_history),
                            bool(getattr(engine, "clusters_liquid", False)))
        self._send((str(root), facts, sql_only, log.getEffectiveLevel(), os.getpid()))

    def merge(self, plan, entry, window, statements, silver_version, lay: bool) -> Merged:
        """One table's window merged by the worker; its error raised here (NeedsEngine: the
        run merges it itself)."""
        self._send((plan, entry, window, statements, silver_version, lay))
        try:
            outcome, value = pickle.load(self._process.stdout)
        except (EOFError, OSError, pickle.UnpicklingError) as exc:
            raise RuntimeError(f"a merge worker ended (exit status "
                               f"{self._process.poll()}): {exc}") from None
        if outcome == "merged":
            return value
        raise value

    def close(self) -> None:
        """The worker told to end (its input closed), and waited for."""
        try:
            self._process.stdin.close()
        except OSError:
            pass
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process.stdout.close()

    def _send(self, message) -> None:
        pickle.dump(message, self._process.stdin, protocol=pickle.HIGHEST_PROTOCOL)
        self._process.stdin.flush()


def start(count: int, root: str, engine, sql_only: bool) -> list[Worker]:
    """`count` workers, started side by side (each answers its first task once ready)."""
    return [Worker(root, engine, sql_only) for _ in range(count)]


# -- in the worker ----------------------------------------------------------------------------
class _Records(logging.Handler):
    """The worker's log records, kept for the task's answer."""

    def __init__(self):
        super().__init__()
        self.records: list[tuple[int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.levelno, record.getMessage()))

    def taken(self) -> list[tuple[int, str]]:
        records, self.records = self.records, []
        return records


def serve() -> None:
    """A worker's life: the run's lake, then tasks until its input ends."""
    import warnings

    from cdc_sql import pandas_probe

    pandas_probe.defer()  # (before any thread, as the run's own process does)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the run stops its workers itself
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    warnings.simplefilter("ignore")
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed goes to standard error, not into the answers
    tasks = sys.stdin.buffer
    try:
        lake, records = _started(pickle.load(tasks)), _Records()
    except EOFError:
        return
    except BaseException as exc:  # noqa: BLE001 - each task is answered with it
        lake, records, failed = None, _Records(), _portable(exc)
    logging.getLogger("cdc_sql").addHandler(records)
    while True:
        try:
            task = pickle.load(tasks)
        except EOFError:
            return
        try:
            answer = ("merged", _merge(lake, *task, records)) if lake is not None else \
                ("failed", failed)
        except BaseException as exc:  # noqa: BLE001 - the run raises it (or merges itself)
            records.taken()
            answer = ("failed", _portable(exc))
        pickle.dump(answer, answers, protocol=pickle.HIGHEST_PROTOCOL)
        answers.flush()


def _started(start: tuple):
    """The worker set up as the run asks (`start`: the lake's root, the engine's facts,
    engine.sql_only, the log level, the run's process): its lake."""
    from cdc_sql import faults
    from cdc_sql.lake.lake import Lake

    root, facts, sql_only, level, run = start
    faults.kill_also(run)
    logger = logging.getLogger("cdc_sql")
    logger.setLevel(level)
    logger.propagate = False
    return Lake.open(facts, root, sql_only)


def _merge(lake, plan, entry, window, statements, silver_version, lay: bool,
           records: _Records) -> Merged:
    from cdc_sql.lake.silver.merge import lay_out, merge_window
    from cdc_sql.lake.silver.ownership import check_untouched, owned_versions

    started = time.monotonic()
    if entry is not None:
        check_untouched(lake, plan.spec, entry)
    if lay:
        lay_out(lake, plan)
    merge_window(lake, plan, window, statements, silver_version)
    return Merged(owned_versions(lake, plan.spec), round(time.monotonic() - started, 3),
                  records.taken())


def _portable(exc: BaseException) -> BaseException:
    """The error as the run can raise it: itself if it crosses the pipe whole, else a
    RuntimeError with its type and text."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any error that does not pickle
        return RuntimeError(f"{type(exc).__name__}: {exc}")
