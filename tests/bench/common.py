"""Benchmark plumbing: a private MariaDB, sample tables, child runs with their peak memory."""
from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from cdc_sql.dev.mariadb import PASSWORD, USER, MariaDB

TABLE_DDL = ("CREATE TABLE bench.{name} (id BIGINT PRIMARY KEY, a INT, b VARCHAR(40), "
             "c DECIMAL(12,2), d DATETIME(6), e DOUBLE, f TIMESTAMP NULL)")
# A wide table: 33 columns of mixed types (the binlog carries all of them, before and after).
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
]


# The engine the stages run on (`--engines`): engine settings of the pipelines they write, and
# what their bare MERGE baselines run on. Set by __main__ for each engine in turn.
ENGINE: dict = {}


def engine_label() -> str:
    """'sail', 'local' or 'remote' (the standalone cluster), and whether windows are forced
    through the engine's SQL."""
    return ENGINE.get("label", "sail") + (" sql-only" if ENGINE.get("sql_only") else "")


@dataclass
class Result:
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


def create_table(db: MariaDB, rows: int, stage: str, wide: bool = False) -> str:
    name = f"{stage}_{'wide_' if wide else ''}{rows}"
    if wide:
        ddl = (f"CREATE TABLE bench.{name} (id BIGINT PRIMARY KEY, " +
               ", ".join(f"{c} {t}" for c, t, _ in WIDE_COLUMNS) + ")")
        values = ", ".join(v for _, _, v in WIDE_COLUMNS)
    else:
        ddl = TABLE_DDL.format(name=name)
        values = ("seq % 1000, CONCAT('name-', seq), seq / 7, '2024-01-01' + INTERVAL seq SECOND, "
                  "seq * 1.5, '2024-01-01' + INTERVAL (seq % 5000000) MINUTE")
    db.execute("CREATE DATABASE IF NOT EXISTS bench", f"DROP TABLE IF EXISTS bench.{name}", ddl,
               f"INSERT INTO bench.{name} SELECT seq, {values} FROM bench.seq_1_to_{rows}")
    return name


def write_pipeline(db: MariaDB, table: str | list[str], workdir: Path, startup: str = "initial",
                   lake: str | None = None, **tuned) -> Path:
    """A pipeline at default settings, except what `tuned` sets (source keys); its lake in
    `workdir` unless `lake` names one (an object-store URL)."""
    path = workdir / "pipeline.yaml"
    settings = "".join(f"  {key}: {value}\n" for key, value in tuned.items())
    tables = [table] if isinstance(table, str) else table
    entries = "".join(f"  - name: {t}\n    source: bench.{t}\n" for t in tables)
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


def run_child(*argv: str) -> tuple[str, float]:
    """A Python child process (`-m MODULE ARGS...`): its standard output and its own peak RSS
    in MB (tests/bench/peak.py)."""
    assert argv[0] == "-m"
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as log, \
            tempfile.NamedTemporaryFile() as peak:
        env = {**os.environ, "BENCH_PASSWORD": PASSWORD, "BENCH_PEAK_FILE": peak.name}
        child = subprocess.run([sys.executable, "-m", "tests.bench.peak", *argv[1:]], env=env,
                               stdout=out, stderr=log)
        if child.returncode != 0:
            log.seek(0)
            raise RuntimeError(log.read().decode()[-3000:])
        out.seek(0)
        return out.read().decode(), int(open(peak.name).read()) / 1024


def run_cli(pipeline: Path, *args: str) -> tuple[dict, float]:
    """`cdc-sql run --until-caught-up` in a child: its run summary and its peak RSS in MB."""
    _, peak = run_child("-m", "cdc_sql.cli", "run", str(pipeline), "--until-caught-up", *args)
    from cdc_sql.config.model import load_pipeline

    return last_run(load_pipeline(pipeline, environ={"BENCH_PASSWORD": PASSWORD}).root), peak


def last_run(lake) -> dict:
    from tests.integration.helpers import state_log

    return [value for kind, _, value in state_log(lake) if kind == "run"][-1]


def timed(fn) -> tuple[object, float]:
    started = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - started


def workdir() -> Path:
    """A scratch directory, removed when the benchmark ends (the scale stage leaves 1.2 GB)."""
    path = tempfile.mkdtemp(prefix="cdc-bench-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return Path(path)
