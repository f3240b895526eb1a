"""Worker processes of a run, for Python's work on many small tables: a light merge
(run/merge_phase.py) of a table of a few rows is a log read, a few rows' Parquet and two commit
files, all of it holding Python's lock, so threads of one process only take turns (a thousand
such merges took 5.4 s on one thread and no less on two: docs/performance.md).

A run starts its workers when a merge pass has at least MANY_TABLES light merges (`count`, pure:
one a core, at most `target.parallelism`), and keeps them until it ends. A worker is a Python
process started here (`python -c`, never the caller's main module, which a notebook or a script
without a `__main__` guard would run again) with the run's lake; it reads tasks from its
standard input and answers on a copy of its standard output (its own output goes to standard
error). A task is a module-level function called as `function(lake, *a)` for each of a chunk
of argument tuples (`chunks`: an exchange waits for Python's lock in the run); the answer is
each call's value or error, and the log records the chunk made, which the run logs as its own.
Each call stands alone as it would in the run (one table's window), and the run commits state
once it is done, as for its own: a worker killed after a commit leaves what a run killed there
leaves.

A worker has no engine: a call that reaches for one (a window the files send to the engine's
SQL after all, a TRUNCATE in it) stops with NeedsEngine where it would start it, and the run
makes it itself, as the next run would after a kill there (every step is replay-safe). A crash
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
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

log = logging.getLogger("cdc_sql")

MANY_TABLES = 500  # a merge pass of at least this many light merges gives them to workers
CHUNK = 64  # tasks sent to a worker at once (each exchange waits for Python's lock here)
PASS_TABLES = 2_000  # source tables a capture pass changes before it ends (pass_tables)


def count(tables: int, cores: int, parallelism: int) -> int:
    """How many workers a merge pass of `tables` light merges wants: none below MANY_TABLES
    (a worker's start, its imports, takes about 0.5 s of a core), else one a core, at most
    `target.parallelism`. Pure."""
    return 0 if tables < MANY_TABLES else max(1, min(cores, parallelism))


def pass_tables(here: int) -> int:
    """The source tables a capture pass may change before it ends (capture.Bound; 0: no
    bound), where `here` silver tables may be merged in this process: PASS_TABLES where there
    are more, so that the workers merge one pass's tables while the run captures the next
    (a capture pass and its merges take each about half of a change run of many small tables,
    one after the other: docs/performance.md). Pure."""
    return PASS_TABLES if here > PASS_TABLES else 0


def chunks(items: list, workers: int) -> list[list]:
    """`items` cut into the chunks `workers` workers are sent: at most CHUNK items each (an
    exchange with a worker waits for Python's lock in the run, up to its switch interval of
    5 ms, while the run's other threads work), and four chunks a worker or more where there
    are enough items (so that none waits long for the last). Pure."""
    size = max(1, min(CHUNK, len(items) // (4 * max(1, workers))))
    return [items[i:i + size] for i in range(0, len(items), size)]


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
    """The run's workers, none until `start`; `map` sends calls to them in chunks."""

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

    def map(self, function: Callable, arguments: list[tuple]) -> list[Future]:
        """`function(lake, *a)` for each `a` of `arguments`, sent to the workers in `chunks`:
        a future of each call's value or error (in this process, with the run's lake, a call
        that needs the engine). The log records of each chunk are logged here as it ends."""
        futures = [Future() for _ in arguments]
        tasks = list(zip(arguments, futures))
        sending = ThreadPoolExecutor(self.size, "workers")  # a thread a worker, waiting on it
        for chunk in chunks(tasks, self.size):
            sending.submit(self._chunk, function, chunk)
        sending.shutdown(wait=False)  # (its threads end with the last chunk)
        return futures

    def _chunk(self, function: Callable, tasks: list[tuple[tuple, Future]]) -> None:
        worker = self._free.get()
        try:
            answers, records = worker.call(_each, (function, [a for a, _ in tasks]))
        except BaseException as exc:  # noqa: BLE001 - each call fails with it
            answers, records = [("failed", exc)] * len(tasks), []
        finally:
            self._free.put(worker)
        for level, message in records:
            log.log(level, "%s", message)
        for (arguments, future), (outcome, value) in zip(tasks, answers):
            if outcome == "failed" and isinstance(value, NeedsEngine):
                try:
                    outcome, value = "done", function(self.lake, *arguments)
                except BaseException as exc:  # noqa: BLE001 - the future's
                    outcome, value = "failed", exc
            if outcome == "done":
                future.set_result(value)
            else:
                future.set_exception(value)
        for _, future in tasks:  # (none: a worker answers every call of a chunk)
            if not future.done():
                future.set_exception(RuntimeError("a worker left a call unanswered"))

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


def _each(lake, function: Callable, arguments: list[tuple]) -> list[tuple[str, object]]:
    """`function(lake, *a)` for each `a`: ("done", its value) or ("failed", its error)."""
    answers = []
    for each in arguments:
        try:
            answers.append(("done", function(lake, *each)))
        except BaseException as exc:  # noqa: BLE001 - the run's to raise (or call itself)
            answers.append(("failed", _portable(exc)))
    return answers


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
