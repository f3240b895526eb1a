"""Benchmark plumbing: a private MariaDB, sample tables and changes, child runs with their wall
time and the peak memory of their whole process tree, and the goals' verdicts."""
from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from cdc_sql.dev.mariadb import PASSWORD, USER, MariaDB

# (name, type, value from `seq`): the 7-column table (with its key) ...
NARROW_COLUMNS = [
    ("a", "INT", "seq % 1000"), ("b", "VARCHAR(40)", "CONCAT('name-', seq)"),
    ("c", "DECIMAL(12,2)", "seq / 7"), ("d", "DATETIME(6)", "'2024-01-01' + INTERVAL seq SECOND"),
    ("e", "DOUBLE", "seq * 1.5"),
    ("f", "TIMESTAMP NULL", "'2024-01-01' + INTERVAL (seq % 5000000) MINUTE"),
]
# ... and the 40-column one: mixed types (the binlog carries all of them, before and after).
WIDE_COLUMNS = [
    ("a", "INT", "seq % 1000"), ("b", "VARCHAR(40)", "CONCAT('name-', seq)"),
    ("ti", "TINYINT", "seq % 100"), ("tu", "TINYINT UNSIGNED", "seq % 200"),
    ("si", "SMALLINT", "seq % 30000"), ("mi", "MEDIUMINT", "seq % 8000000"),
    ("iu", "INT UNSIGNED", "seq"), ("bi", "BIGINT", "seq * 1000003"),
    ("bu", "BIGINT UNSIGNED", "seq * 7"), ("b1", "TINYINT(1)", "seq % 2"),
    ("de", "DECIMAL(12,2)", "seq / 7"), ("dw", "DECIMAL(30,10)", "seq / 3"),
    ("fl", "FLOAT", "seq / 9"), ("db", "DOUBLE", "seq * 1.5"),
    ("dt", "DATE", "'2020-01-01' + INTERVAL (seq % 3000) DAY"),
    ("dt6", "DATETIME(6)", "'2024-01-01' + INTERVAL seq SECOND"),
    ("ts6", "TIMESTAMP(6) NULL", "'2024-01-01' + INTERVAL (seq % 5000000) MINUTE"),
    ("tm", "TIME(3)", "SEC_TO_TIME(seq % 86400)"), ("y", "YEAR", "1901 + seq % 250"),
    ("ch", "CHAR(8)", "LEFT(MD5(seq), 8)"), ("vc", "VARCHAR(100)", "REPEAT('x', seq % 60)"),
    ("la", "VARCHAR(20) CHARACTER SET latin1", "CONCAT('café ', seq)"),
    ("tx", "TEXT", "CONCAT('some text ', seq)"),
    ("en", "ENUM('new','paid','shipped')", "1 + seq % 3"),
    ("st", "SET('a','b','c','d')", "seq % 16"), ("bt", "BIT(12)", "seq % 4096"),
    ("bn", "BINARY(4)", "UNHEX(LPAD(HEX(seq % 65536), 8, '0'))"),
    ("vb", "VARBINARY(16)", "UNHEX(MD5(seq))"), ("bl", "BLOB", "UNHEX(REPEAT('ab', seq % 20))"),
    ("js", "JSON", "JSON_OBJECT('k', seq)"), ("n1", "INT NULL", "IF(seq % 3 = 0, NULL, seq)"),
    ("n2", "VARCHAR(10) NULL", "IF(seq % 2 = 0, NULL, 'x')"),
    ("i2", "INT", "seq % 77"), ("d2", "DOUBLE", "seq / 3"),
    ("v2", "VARCHAR(30)", "CONCAT('city-', seq % 500)"),
    ("t2", "DATETIME", "'2023-06-01' + INTERVAL (seq % 100000) MINUTE"),
    ("b2", "BIGINT NULL", "IF(seq % 5 = 0, NULL, seq * 3)"),
    ("c2", "CHAR(2)", "'EU'"), ("u2", "SMALLINT UNSIGNED", "seq % 60000"),
]
MIX = (3, 1, 1)  # of every 5 changes: 3 updates, 1 delete, 1 insert
PER_TRANSACTION = 5_000


# The engine the stages run on (`--engines`): engine settings of the pipelines they write, and
# what their bare MERGE baselines run on. Set by __main__ for each engine in turn.
ENGINE: dict = {}


def engine_label() -> str:
    """The engine of --engines ('sail', 'local' or 'cluster'), and whether windows are forced
    through the engine's SQL."""
    return ENGINE.get("label", "sail") + (" sql-only" if ENGINE.get("sql_only") else "")


@dataclass
class Result:
    """One measured figure; `baseline_rate` (rows/s) makes it a ratio."""

    stage: str
    rows: int
    seconds: float
    peak_mb: float | None = None
    baseline: str = ""
    baseline_rate: float | None = None

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0

    @property
    def ratio(self) -> float | None:
        return self.rate / self.baseline_rate if self.baseline_rate else None


@dataclass
class Goal:
    """One figure of issue 39's goals beside its bound; `met` is None when not measured."""

    goal: str
    bound: str
    figure: str
    met: bool | None
    engine: str = ""  # set by __main__: the engine of --engines it was measured on


def at_most(goal: str, value: float | None, bound: float, unit: str, why: str = "") -> Goal:
    """A figure that must not pass `bound` (a time ratio, seconds, MB)."""
    if value is None:
        return Goal(goal, f"<= {bound:g}{unit}", why or "not measured", None)
    return Goal(goal, f"<= {bound:g}{unit}", f"{_number(value)}{unit}", value <= bound)


def at_least(goal: str, value: float | None, bound: float, unit: str, why: str = "") -> Goal:
    if value is None:
        return Goal(goal, f">= {bound:g}{unit}", why or "not measured", None)
    return Goal(goal, f">= {bound:g}{unit}", f"{_number(value)}{unit}", value >= bound)


def _number(value: float) -> str:
    return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"


def human(rows: int) -> str:
    """2M, 500k, 10,000."""
    for size, suffix in ((1_000_000, "M"), (1_000, "k")):
        if rows >= size and rows % (size // 10) == 0:
            return f"{rows / size:g}{suffix}"
    return f"{rows:,}"


# -- tables and changes -------------------------------------------------------------------------
def columns_of(wide: bool) -> list[tuple[str, str, str]]:
    return WIDE_COLUMNS if wide else NARROW_COLUMNS


def create_table(db: MariaDB, rows: int, stage: str, wide: bool = False) -> str:
    """bench.<stage>_[wide_]<rows>: a BIGINT key 1..rows and 6 (or 39) more columns."""
    name = f"{stage}_{'wide_' if wide else ''}{rows}"
    columns = columns_of(wide)
    db.execute("CREATE DATABASE IF NOT EXISTS bench",
               f"DROP TABLE IF EXISTS bench.{name}",
               f"CREATE TABLE bench.{name} (id BIGINT PRIMARY KEY, " +
               ", ".join(f"{c} {t}" for c, t, _ in columns) + ")")
    with db.connect("bench") as conn, conn.cursor() as cur:
        for low in range(1, rows + 1, 1_000_000):  # a statement of 10M rows needs a 4 GB undo
            cur.execute(f"INSERT INTO {name} SELECT seq, {', '.join(v for *_, v in columns)} "
                        f"FROM seq_{low}_to_{min(rows, low + 999_999)}")
    return name


def mixed_rows(changes: int) -> int:
    """The table size `make_mixed_changes` needs for `changes` changes."""
    updates, deletes, _ = _mix(changes)
    return updates + deletes


def _mix(changes: int) -> tuple[int, int, int]:
    per = changes // sum(MIX)
    return MIX[0] * per, MIX[1] * per, changes - (MIX[0] + MIX[1]) * per


def make_mixed_changes(db: MariaDB, table: str, changes: int, wide: bool = False,
                       per_transaction: int = PER_TRANSACTION) -> tuple[str, int]:
    """`changes` row changes, 3 updates : 1 delete : 1 insert, in transactions of
    `per_transaction` holding all three kinds, on a table of `mixed_rows(changes)` rows (every
    key changed once). Returns the binlog position before them."""
    updates, deletes, inserts = _mix(changes)
    rows = updates + deletes
    steps = max(1, -(-changes // per_transaction))
    values = ", ".join(v for *_, v in columns_of(wide))
    db.execute("FLUSH BINARY LOGS")
    start = db.query("SHOW MASTER STATUS")[0][:2]
    with db.connect("bench", autocommit=False) as conn, conn.cursor() as cur:
        for step in range(steps):
            for low, high, sql in (
                    (*_slice(updates, steps, step, 1), f"UPDATE {table} SET a = a + 1, "
                     f"b = CONCAT(b, 'x') WHERE id BETWEEN %s AND %s"),
                    (*_slice(deletes, steps, step, updates + 1),
                     f"DELETE FROM {table} WHERE id BETWEEN %s AND %s"),
                    (*_slice(inserts, steps, step, rows + 1), None)):
                if high < low:
                    continue
                if sql is None:
                    cur.execute(f"INSERT INTO {table} SELECT seq, {values} "
                                f"FROM seq_{low}_to_{high}")
                else:
                    cur.execute(sql, (low, high))
            conn.commit()
    return start


def _slice(total: int, steps: int, step: int, first: int) -> tuple[int, int]:
    """Keys [low, high] of step `step` of `steps` over `total` keys from `first`."""
    low = first + total * step // steps
    return low, first + total * (step + 1) // steps - 1


def binlog_start(db: MariaDB) -> tuple[str, int]:
    db.execute("FLUSH BINARY LOGS")
    return db.query("SHOW MASTER STATUS")[0][:2]


def write_pipeline(db: MariaDB, table: str | list, workdir: Path, startup: str = "initial",
                   lake: str | None = None, **tuned) -> Path:
    """A pipeline at default settings, except what `tuned` sets (source keys), on the engine
    of ENGINE; its lake in `workdir` unless `lake` names one (an object-store URL). A table is
    a name, or a dict of table keys (name, source, projection, history)."""
    path = workdir / "pipeline.yaml"
    settings = "".join(f"  {key}: {value}\n" for key, value in tuned.items())
    entries = ""
    for spec in [table] if isinstance(table, (str, dict)) else table:
        spec = {"name": spec} if isinstance(spec, str) else spec
        spec = {"source": f"bench.{spec['name']}", **spec}
        entries += "  - " + "\n    ".join(f"{k}: {json.dumps(v)}" for k, v in spec.items()) + "\n"
    engine = "".join(f"  {k}: {v}\n" for k, v in ENGINE.items() if k in ("mode", "url", "sql_only"))
    path.write_text(f"""name: bench
source:
  host: 127.0.0.1
  port: {db.port}
  user: {USER}
  password: ${{BENCH_PASSWORD}}
  server_id: {7000 + os.getpid() % 1000}
  startup: {startup}
{settings}target:
  path: {lake or workdir / 'lake'}
{"engine:" + chr(10) + engine if engine else ""}tables:
{entries}""")
    return path


# -- child processes ----------------------------------------------------------------------------
@dataclass
class Child:
    """What a finished child process gave: its output, wall time (spawn to exit) and the peak
    RSS in MB of its whole process tree (an engine's JVM included)."""

    out: str
    seconds: float
    peak_mb: float
    log: str = field(default="", repr=False)

    def last_json(self) -> dict:
        return json.loads(self.out.strip().splitlines()[-1])


class TreePeak(threading.Thread):
    """The highest sum of resident memory over a process and its descendants, sampled every
    20 ms (/proc). A sample can miss a spike of one process: the process's own VmHWM, read at
    its exit (tests/bench/peak.py), bounds it from below."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peak_kb, self.halt = pid, 0, threading.Event()

    def run(self) -> None:
        while not self.halt.wait(0.02):
            self.peak_kb = max(self.peak_kb, sum(_rss_kb(p) for p in _tree(self.pid)))

    def stop(self) -> float:
        self.halt.set()
        self.join()
        return self.peak_kb / 1024


def _tree(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as children:
                    todo += [int(c) for c in children.read().split()]
        except OSError:
            pass
    return found


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            return next((int(line.split()[1]) for line in status if line.startswith("VmRSS:")),
                        0)
    except OSError:
        return 0


def spawn(*argv: str, env: dict | None = None, **popen) -> tuple[subprocess.Popen, str]:
    """A Python child `-m MODULE ARGS...` run through tests/bench/peak.py; returns it and the
    file its own VmHWM is written to at exit."""
    assert argv[0] == "-m"
    peak = tempfile.NamedTemporaryFile(delete=False)
    atexit.register(os.unlink, peak.name)
    env = {**os.environ, "BENCH_PASSWORD": PASSWORD, "BENCH_PEAK_FILE": peak.name, **(env or {})}
    child = subprocess.Popen([sys.executable, "-m", "tests.bench.peak", *argv[1:]], env=env,
                             **popen)
    return child, peak.name


def run_child(*argv: str, env: dict | None = None) -> Child:
    """A Python child (`-m MODULE ARGS...`) run to its end; raises with its log if it fails."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as log:
        started = time.perf_counter()
        child, peak_file = spawn(*argv, env=env, stdout=out, stderr=log)
        tree = TreePeak(child.pid)
        tree.start()
        child.wait()
        seconds = time.perf_counter() - started
        tree_mb = tree.stop()
        log.seek(0)
        text = log.read().decode(errors="replace")
        if child.returncode != 0:
            raise RuntimeError(text[-3000:])
        out.seek(0)
        return Child(out.read().decode(), seconds, max(tree_mb, own_peak_mb(peak_file)), text)


def own_peak_mb(peak_file: str) -> float:
    try:
        return int(open(peak_file).read()) / 1024
    except (OSError, ValueError):
        return 0.0


def run_cli(pipeline: Path, *args: str, env: dict | None = None) -> tuple[dict, Child]:
    """`cdc-sql run --until-caught-up` in a child: its run summary (read from the pipeline's
    lake, wherever it is), and the child."""
    from cdc_sql.config.model import load_pipeline

    child = run_child("-m", "cdc_sql.cli", "run", str(pipeline), "--until-caught-up", *args,
                      env=env)
    lake = load_pipeline(pipeline, environ={"BENCH_PASSWORD": PASSWORD}).root
    return last_run(lake), child


def last_run(lake) -> dict:
    from tests.integration.helpers import state_log

    return [value for kind, _, value in state_log(lake) if kind == "run"][-1]


def merged_by(silver: Path) -> str:
    """Who wrote silver's last commit: `delta-rs` (merged in the cdc-sql process), `file
    rewrite` (lake/file_merge.py, in the process too) or the engine (from the commit's
    engineInfo)."""
    from cdc_sql.lake.tables import OWN_MERGE

    last = sorted((silver / "_delta_log").glob("*.json"))[-1]
    for line in last.read_text().splitlines():
        info = json.loads(line).get("commitInfo")
        if info is not None and info.get("userMetadata") == OWN_MERGE:
            return "file rewrite"
        if info is not None:
            who = str(info.get("clientVersion") or info.get("engineInfo") or "?").lower()
            return next((name for prefix, name in (("delta-rs", "delta-rs"), ("sail", "Sail"),
                                                   ("apache-spark", "Spark"))
                         if who.startswith(prefix)), who)
    return "?"


def timed(fn) -> tuple[object, float]:
    started = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - started


def workdir() -> Path:
    """A scratch directory, removed when the benchmark ends."""
    path = tempfile.mkdtemp(prefix="cdc-bench-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return Path(path)


def machine_load() -> str:
    """The 1-minute load average and the cores: absolute times carry over only as well as this."""
    return f"load average {os.getloadavg()[0]:.1f} on {len(os.sched_getaffinity(0))} cores"
