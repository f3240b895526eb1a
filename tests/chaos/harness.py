"""Seeded fault runs: `cdc-sql run` processes killed and disturbed while a writer goes on, then
silver compared with the source row by row.

One run of the harness:
- a private MariaDB with three tables (`items`: a random writer at a set transaction rate;
  `accounts`: large transactions, bigger than a bronze batch, and long-open ones, which also
  delete and re-key accounts; `entries`: rows those changes reach through ON DELETE/UPDATE
  CASCADE, without a binlog event) and a pipeline user whose connections can be told apart
  from the writer's;
- `cdc-sql run` in follow mode, started again and again; each time, after a random while,
  one fault: SIGKILL (at a random moment, or at a named crash point between two commits that
  belong together), MariaDB killed or shut down and started again, the pipeline's connections
  killed server-side (KILL), FLUSH BINARY LOGS; then SIGKILL or SIGTERM if it still runs;
- the first faults land mid-snapshot (each waits for splits to finish), the rest mid-binlog;
- at the end: the writer stops, one clean `run --until-caught-up`, `verify`, and a row-by-row
  comparison of every silver table (and the current rows of history) with the source.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pymysql
from deltalake import DeltaTable

from cdc_sql import faults
from cdc_sql.dev.mariadb import MariaDB
from cdc_sql.lake.lake import Lake
from tests.integration.helpers import state_log
from tests.integration.writer import RandomWriter

PIPELINE_USER, PIPELINE_PASSWORD = "pipeline", "chaos-secret"
DISTURBANCES = ("restart-crash", "restart-clean", "kill-connections", "kill-connections-binlog",
                "flush-logs")
RECOVERY_SECONDS = 60.0
TABLES = ("items", "accounts", "entries")  # the pipeline's (`_prepare`)


@dataclass
class Plan:
    seed: int = 1
    rows: int = 60_000          # items rows before the first run
    accounts: int = 20_000      # accounts rows; one large transaction touches all of them
    kills: int = 30             # SIGKILLs of `cdc-sql run` (ours and named crash points)
    rate: float = 600.0         # writer transactions per second to aim at
    chunk_size: int = 1000
    batch_rows: int = 5000      # bronze batch: the large transactions are bigger
    max_wait: float = 6.0       # longest random wait before a fault


@dataclass
class Report:
    plan: Plan
    kills: Counter = field(default_factory=Counter)      # by phase
    faults: Counter = field(default_factory=Counter)     # by kind
    exits: Counter = field(default_factory=Counter)      # exit codes of runs that ended first
    failures: list[str] = field(default_factory=list)    # last stderr line of runs that failed
    recovered: Counter = field(default_factory=Counter)  # disturbances the run got over
    stalled: list[str] = field(default_factory=list)     # ... and those it hung after
    writer_transactions: int = 0
    writer_rate: float = 0.0
    large_transactions: int = 0
    seconds: float = 0.0
    differences: dict[str, str] = field(default_factory=dict)
    verify_output: str = ""

    @property
    def total_kills(self) -> int:
        return sum(self.kills.values())

    def kills_in(self, phase: str) -> int:
        return sum(n for name, n in self.kills.items() if name.startswith(phase))

    def summary(self) -> str:
        return json.dumps({
            "seed": self.plan.seed, "kills": self.total_kills, "kills_by_phase": self.kills,
            "faults": self.faults, "recovered_by_itself": self.recovered,
            "stalled": self.stalled, "exits_before_a_kill": self.exits,
            "writer_transactions": self.writer_transactions,
            "writer_tx_per_s": round(self.writer_rate), "large_transactions":
                self.large_transactions, "seconds": round(self.seconds),
            "differing_tables": sorted(self.differences),
            "failure_messages": sorted(set(self.failures))[:10]}, indent=1, default=dict)


class Chaos:
    def __init__(self, plan: Plan, workdir: Path, log=print):
        self.plan, self.workdir, self.log = plan, Path(workdir), log
        self.rng = random.Random(plan.seed)
        self.report = Report(plan)
        self.server = MariaDB()
        self.file = self.workdir / "chaos.yaml"
        self.root = self.workdir / "lake"

    # -- the whole run ----------------------------------------------------------------------
    def run(self) -> Report:
        started = time.monotonic()
        with self.server:
            self._prepare()
            writer = RandomWriter(self.server, "chaos", "items", self.plan.rows * 5 // 4,
                                  seed=self.rng.randrange(2**32), max_transactions=10**9,
                                  rate=self.plan.rate)
            big = LargeTransactions(self.server, self.plan.accounts, self.rng.randrange(2**32))
            writer.start()
            big.start()
            try:
                self._disturb()
            finally:
                writer.stop()
                big.stop()
            self.report.writer_transactions = writer.committed
            self.report.writer_rate = writer.transactions_per_second
            self.report.large_transactions = big.committed
            self._finish()
        self.report.seconds = time.monotonic() - started
        return self.report

    def _prepare(self) -> None:
        self.server.execute("CREATE DATABASE chaos")
        self.server.execute(
            "CREATE TABLE items (id INT PRIMARY KEY, v VARCHAR(40), n INT)",
            f"INSERT INTO items SELECT seq, CONCAT('v', seq), seq FROM seq_1_to_{self.plan.rows}",
            "CREATE TABLE accounts (code VARCHAR(12) PRIMARY KEY, balance BIGINT, "
            "touched DATETIME(6))",
            f"INSERT INTO accounts SELECT CONCAT('a', seq), 0, NOW(6) "
            f"FROM seq_1_to_{self.plan.accounts}",
            # cascades InnoDB carries out without a binlog event, under every fault
            "CREATE TABLE entries (id INT PRIMARY KEY, code VARCHAR(12), amount INT, "
            "CONSTRAINT fk_entries FOREIGN KEY (code) REFERENCES accounts (code) "
            "ON DELETE CASCADE ON UPDATE CASCADE)",
            f"INSERT INTO entries SELECT seq, CONCAT('a', 1 + seq % {self.plan.accounts}), seq "
            f"FROM seq_1_to_{self.plan.accounts}", db="chaos")
        self.server.execute(
            f"CREATE USER {PIPELINE_USER}@'%' IDENTIFIED BY '{PIPELINE_PASSWORD}'",
            f"GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO {PIPELINE_USER}@'%'")
        self.file.write_text(textwrap.dedent(f"""\
            name: chaos
            source:
              host: 127.0.0.1
              port: {self.server.port}
              user: {PIPELINE_USER}
              password: ${{CHAOS_PASSWORD}}
              server_id: 9100
              chunk_size: {self.plan.chunk_size}
              binlog_batch_rows: {self.plan.batch_rows}
              binlog_batch_seconds: 1
            target:
              path: {self.root}
            tables:
              - name: items
                source: chaos.items
              - name: accounts
                source: chaos.accounts
                history: true
              - name: entries
                source: chaos.entries
            """))

    # -- faults -----------------------------------------------------------------------------
    def _disturb(self) -> None:
        scripted = ["restart-crash", "kill-connections", "kill"]  # mid-snapshot
        while self.report.total_kills < self.plan.kills or \
                self.report.kills_in("binlog") < self.plan.kills // 3:
            fault = scripted.pop(0) if scripted else self._random_fault()
            self._round(fault)

    def _random_fault(self) -> str:
        done = self.report.faults
        if not done["restart-clean"] and self._snapshot_done():
            return "restart-clean"                        # once mid-binlog
        if not done["kill-connections-binlog"] and self._snapshot_done():
            return "kill-connections-binlog"
        return self.rng.choices(["kill", "kill-at-point", "flush-logs", "kill-connections",
                                 "sigterm"], weights=[10, 6, 2, 2, 1])[0]

    def _round(self, fault: str) -> None:
        env = {**os.environ, "CHAOS_PASSWORD": PIPELINE_PASSWORD}
        if fault == "kill-at-point":
            env["CDC_SQL_KILL_AT"] = f"{self.rng.choice(self._points())}@{self.rng.randint(1, 2)}"
        process = subprocess.Popen(
            [sys.executable, "-m", "cdc_sql.cli", "run", str(self.file)], env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        stderr = _Drain(process.stderr)
        phase = self._phase()
        if phase == "snapshot" and fault != "kill-at-point":
            self._wait_for_splits(process, self.rng.randint(1, 4))
        else:
            _wait(process, self.rng.uniform(0.3, self.plan.max_wait))
        if fault == "kill-at-point":
            _wait(process, 30)  # it kills itself at its point (or reaches none in time)
        before = self._progress()
        self._inject(fault)
        self.report.faults[fault] += 1
        if fault in DISTURBANCES and process.poll() is None:
            self._wait_for_progress(process, before, fault)
        self._end(process, stderr, phase, fault)

    def _points(self) -> list[str]:
        """The fault points a run can reach now: a split's in the snapshot; after it every
        other but a re-snapshot's, silver's creation only while a silver is still to be
        made (a point no run reaches would cost a round 30 s of waiting)."""
        if self._phase() == "snapshot":
            return ["split.written"]
        lake = Lake(None, str(self.root), None)
        made = all(DeltaTable.is_deltatable(lake.silver_path(name)) for name in TABLES)
        return [p for p in faults.POINTS if p not in ("split.written", "resnapshot.reset")
                and not (made and p in ("silver.first_spliced", "silver.snapshot_written"))]

    def _inject(self, fault: str) -> None:
        phase = self._phase()
        if fault.startswith("restart"):
            self.log(f"  restart MariaDB ({'crash' if 'crash' in fault else 'clean'}) "
                     f"in {phase}")
            self.server.restart(crash="crash" in fault, down_seconds=self.rng.uniform(0, 1.5))
        elif fault.startswith("kill-connections"):
            self._kill_connections()
        elif fault == "flush-logs":
            self.server.execute("FLUSH BINARY LOGS")

    def _kill_connections(self) -> None:
        with self.server.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE USER = %s",
                        (PIPELINE_USER,))
            for (connection,) in cur.fetchall():
                try:
                    cur.execute(f"KILL CONNECTION {int(connection)}")
                except pymysql.err.OperationalError:
                    pass  # it ended meanwhile

    def _end(self, process, stderr, phase: str, fault: str) -> None:
        outcome = self._stop(process, stderr, phase, polite=fault == "sigterm")
        self.log(f"  {fault} in {phase}: {outcome} (kills so far: {self.report.total_kills})")

    def _stop(self, process, stderr, phase: str, polite: bool) -> str:
        if process.poll() is None and polite:
            process.send_signal(signal.SIGTERM)
            _wait(process, 60)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            self.report.kills[phase] += 1
            outcome = "SIGKILL"
        elif process.returncode == -signal.SIGKILL:
            self.report.kills[phase + " (crash point)"] += 1
            outcome = "killed itself at its crash point"
        else:
            self.report.exits[process.returncode] += 1
            outcome = f"exited {process.returncode}"
            if process.returncode != 0:
                self.report.failures.append(stderr.last_error())
                outcome += f": {self.report.failures[-1][:300]}"
        stderr.join(timeout=5)
        return outcome

    # -- where the pipeline is ----------------------------------------------------------------
    def _progress(self) -> tuple:
        """Splits done, capture position, applied offsets: one of them moves while the
        pipeline works (the writer never stops)."""
        entries = {(kind, name): value for kind, name, value in state_log(self.root)}
        return (sum(1 for (kind, _), v in entries.items()
                    if kind == "split" and v.get("status") == "done"),
                str(entries.get(("capture", "binlog"), {}).get("position")),
                tuple(sorted(str(v.get("applied")) for (kind, _), v in entries.items()
                             if kind == "table")))

    def _wait_for_progress(self, process, before: tuple, fault: str) -> None:
        """After a disturbance the run must get going again by itself (follow mode retries),
        or exit with a clear message; hanging is a failure."""
        deadline = time.monotonic() + RECOVERY_SECONDS
        while process.poll() is None and time.monotonic() < deadline:
            if self._progress() != before:
                self.report.recovered[fault] += 1
                self.log(f"  ... the run got going again after {fault}")
                return
            time.sleep(0.25)
        if process.poll() is None:
            self.report.stalled.append(f"{fault}: no progress {RECOVERY_SECONDS}s after it")

    def _splits(self) -> tuple[int, int]:
        splits = {name: value for kind, name, value in state_log(self.root) if kind == "split"}
        done = sum(1 for v in splits.values() if v.get("status") == "done")
        return done, len(splits)

    def _snapshot_done(self) -> bool:
        done, total = self._splits()
        return total > 0 and done == total

    def _phase(self) -> str:
        return "binlog" if self._snapshot_done() else "snapshot"

    def _wait_for_splits(self, process, more: int) -> None:
        target = self._splits()[0] + more
        deadline = time.monotonic() + 60
        while self._splits()[0] < target and process.poll() is None:
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)

    # -- the end: catch up, then compare ------------------------------------------------------
    def _finish(self) -> None:
        from cdc_sql import engine as engines
        from cdc_sql.config.model import load_pipeline
        from cdc_sql.ops.verify import compare_table

        env = {**os.environ, "CHAOS_PASSWORD": PIPELINE_PASSWORD}
        for verb in (["run", str(self.file), "--until-caught-up"], ["verify", str(self.file)]):
            done = subprocess.run([sys.executable, "-m", "cdc_sql.cli", *verb], env=env,
                                  capture_output=True, text=True, timeout=900)
            if verb[0] == "verify":
                self.report.verify_output = done.stdout
            if done.returncode != 0:
                self.report.differences[verb[0]] = (done.stdout + done.stderr)[-3000:]
        pipeline = load_pipeline(self.file, environ={"CHAOS_PASSWORD": PIPELINE_PASSWORD})
        engine = engines.start("sail")
        try:
            for table in pipeline.tables:
                difference = compare_table(engine, pipeline, table)
                if difference:
                    self.report.differences[table.name] = difference
            history = history_difference(engine, str(self.root), "accounts", "code")
            if history:
                self.report.differences["accounts_history"] = history
        finally:
            engine.stop()


def history_difference(engine, root: str, name: str, key: str) -> str:
    """The current versions of history are silver's rows: same keys, same values."""
    silver = engine.spark.read.format("delta").load(f"{root}/silver/{name}")
    history = engine.spark.read.format("delta").load(f"{root}/silver/{name}_history")
    columns = [c for c in silver.columns if not c.startswith("_cdc_")]
    current = history.where("_cdc_current").select(*columns)
    extra = current.subtract(silver.select(*columns)).count()
    missing = silver.select(*columns).subtract(current).count()
    return f"{extra} current history rows not in silver, {missing} silver rows missing" \
        if extra or missing else ""


class LargeTransactions(threading.Thread):
    """Now and then one transaction bigger than a bronze batch (every account), and one that
    stays open for seconds while other transactions commit around it, deleting and re-keying
    an account (its entries follow by cascade)."""

    def __init__(self, server: MariaDB, accounts: int, seed: int):
        super().__init__(daemon=True)
        self.server, self.accounts = server, accounts
        self.random = random.Random(seed)
        self.halt = threading.Event()
        self.committed = 0

    def run(self) -> None:
        while not self.halt.wait(self.random.uniform(2, 6)):
            try:
                with self.server.connect("chaos", autocommit=False) as conn, conn.cursor() as cur:
                    if self.random.random() < 0.5:
                        cur.execute("UPDATE accounts SET balance = balance + 1, touched = NOW(6)")
                    else:
                        for _ in range(5):
                            cur.execute("UPDATE accounts SET balance = balance - 1, touched = "
                                        "NOW(6) WHERE code = %s",
                                        (f"a{self.random.randint(1, self.accounts)}",))
                            self.halt.wait(self.random.uniform(0.2, 1.0))
                        cur.execute("DELETE FROM accounts WHERE code = %s",
                                    (f"a{self.random.randint(1, self.accounts)}",))
                        cur.execute("UPDATE accounts SET code = %s WHERE code = %s",
                                    (f"k{self.random.randint(1, 10**6)}",
                                     f"a{self.random.randint(1, self.accounts)}"))
                        cur.execute("INSERT IGNORE INTO accounts VALUES (%s, 0, NOW(6))",
                                    (f"b{self.random.randint(1, 10**6)}",))
                    conn.commit()
                    self.committed += 1
            except (pymysql.err.OperationalError, pymysql.err.InterfaceError):
                pass  # the server restarted under it

    def stop(self) -> None:
        self.halt.set()
        self.join()


class _Drain(threading.Thread):
    """Reads a process's stderr as it comes (a full pipe would block the process)."""

    def __init__(self, stream):
        super().__init__(daemon=True)
        self.stream, self.lines = stream, []
        self.start()

    def run(self) -> None:
        for line in self.stream:
            self.lines.append(line.decode(errors="replace").rstrip())
            del self.lines[:-200]

    def last_error(self) -> str:
        self.join(timeout=5)
        errors = [line for line in self.lines if line.startswith("cdc-sql: ")]
        return errors[-1] if errors else "no message; last lines: " + " / ".join(self.lines[-3:])


def _wait(process, seconds: float) -> None:
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        pass


def run_chaos(plan: Plan, log=print) -> Report:
    with tempfile.TemporaryDirectory(prefix="cdc-sql-chaos-") as workdir:
        return Chaos(plan, Path(workdir), log).run()
