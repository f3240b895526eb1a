"""Worker processes of a run, for Python's work on many small tables: a light merge
(run/merge_phase.py) of a table of a few rows is a log read, a few rows' Parquet and two commit
files, all of it holding Python's lock, so threads of one process only take turns (a thousand
such merges took 5.4 s on one thread and no less on two: docs/performance.md).

A run starts its workers when a pass has at least MANY_TABLES such tables (`count`, pure: one
a core, at most `target.parallelism`), and keeps them until it ends. A worker is a Python
process started here (`python -c`, never the caller's main module, which a notebook or a
script without a `__main__` guard would run again) with the run's lake; it reads tasks from its
standard input and answers on a copy of its standard output (its own output goes to standard
error). A task is a module-level function and its arguments, called as `function(lake,
*arguments)`; the answer is its value and the log records it made, which the run logs as its
own. A task stands alone as it would in the run (one table's window), and the run records
state once it is done, as for its own: a worker killed after a commit leaves what a run killed
there leaves.

A worker has no engine: a task that reaches for one (a window the files send to the engine's
SQL after all, a TRUNCATE in it) stops with NeedsEngine where it would start it, and the run
calls it itself, as the next run would after a kill there (every step is replay-safe). A crash
point reached in a worker (faults.py) kills the run too.
"""
from __future__ import annotations

import logging
import os
import pickle
import queue
import signal
import subprocess
import sys
from dataclasses import dataclass
from typing import Callable

log = logging.getLogger("cdc_sql")

MANY_TABLES = 500  # a pass with at least this many light merges gives them to workers


def count(tables: int, cores: int, parallelism: int) -> int:
    """How many workers a pass of `tables` light merges wants: none below MANY_TABLES (a
    worker's start, its imports, takes about 0.5 s of a core), else one a core, at most
    `target.parallelism`. Pure."""
    return 0 if tables < MANY_TABLES else max(1, min(cores, parallelism))


class NeedsEngine(BaseException):
    """A task reached for the engine, which a worker has not: the run calls it itself. (A
    BaseException: no `except Exception` on the way takes it for a failure.)"""


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


class Workers:
    """The run's workers, none until `start`; `call` runs a task in a free one."""

    def __init__(self, lake):
        self.lake = lake
        self.size = 0
        self._free: queue.SimpleQueue[_Worker] = queue.SimpleQueue()

    def start(self, wanted: int) -> int:
        """At least `wanted` workers running (started side by side: each answers its first
        task once ready); how many there are."""
        for _ in range(wanted - self.size):
            self._free.put(_Worker(self.lake))
            self.size += 1
        return self.size

    def call(self, function: Callable, *arguments):
        """`function(lake, *arguments)` in a free worker (waited for), its log records logged
        here; in this process, with the run's lake, when it needs the engine. Its error is
        raised here."""
        worker = self._free.get()
        try:
            value, records = worker.call(function, arguments)
        except NeedsEngine:
            return function(self.lake, *arguments)
        finally:
            self._free.put(worker)
        for level, message in records:
            log.log(level, "%s", message)
        return value

    def close(self) -> None:
        """Every worker told to end, and waited for."""
        for _ in range(self.size):
            self._free.get().close()
        self.size = 0


class _Worker:
    """One worker process, used by one thread at a time."""

    def __init__(self, lake):
        package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [package, *filter(None, [os.environ.get("PYTHONPATH")])])}
        self._process = subprocess.Popen(
            [sys.executable, "-c", "from cdc_sql.workers import serve; serve()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        engine = lake.engine
        facts = EngineFacts(engine.mode, bool(engine.describes_history),
                            bool(getattr(engine, "clusters_liquid", False)))
        self._send((str(lake.root), facts, lake.sql_only, log.getEffectiveLevel(),
                    os.getpid()))

    def call(self, function: Callable, arguments: tuple) -> tuple[object, list]:
        try:
            self._send((function, arguments))
            outcome, value, records = pickle.load(self._process.stdout)
        except (EOFError, OSError, pickle.UnpicklingError) as exc:
            raise RuntimeError(f"a worker process ended (exit status "
                               f"{self._process.poll()}): {exc}") from None
        if outcome == "failed":
            raise value
        return value, records

    def close(self) -> None:
        try:
            self._process.stdin.close()  # the worker ends at the end of its input
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
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the run ends its workers itself
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    warnings.simplefilter("ignore")
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed goes to standard error, not into the answers
    tasks, records = sys.stdin.buffer, _Records()
    logging.getLogger("cdc_sql").addHandler(records)
    try:
        start = pickle.load(tasks)
    except (EOFError, OSError, pickle.UnpicklingError):  # the run ended (or died)
        return
    try:
        lake, failed = _started(start), None
    except BaseException as exc:  # noqa: BLE001 - each task is answered with it
        lake, failed = None, _portable(exc)
    while True:
        try:
            function, arguments = pickle.load(tasks)
        except (EOFError, OSError, pickle.UnpicklingError):  # the run ended (or died)
            return
        try:
            if failed is not None:
                raise failed
            answer = ("done", function(lake, *arguments), records.taken())
        except BaseException as exc:  # noqa: BLE001 - the run raises it (or calls it itself)
            answer = ("failed", _portable(exc), records.taken())
        try:
            pickle.dump(answer, answers, protocol=pickle.HIGHEST_PROTOCOL)
            answers.flush()
        except OSError:  # the run died: nobody to answer
            return


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


def _portable(exc: BaseException) -> BaseException:
    """The error as the run can raise it: itself if it crosses the pipe whole, else a
    RuntimeError with its type and text."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any error that does not pickle
        return RuntimeError(f"{type(exc).__name__}: {exc}")
