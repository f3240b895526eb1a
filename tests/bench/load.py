"""Sustained load: a writer at a fixed rate of row changes (transactions of 400) for a while,
`cdc-sql run` following in its default follow mode, and the lag sampled every 10 s: how far
silver's applied offset trails the source, in binlog bytes and in seconds (how long ago the
source was where silver is now). Then the writer stops and the time to catch up is measured.
Loopback only, bounded in time; `python -m tests.bench --stages load --sizes SECONDS`."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

from cdc_sql.dev.mariadb import PASSWORD, MariaDB
from cdc_sql.source.offsets import Offset, Position, file_sequence
from tests.bench.common import Result, create_table, run_cli, workdir, write_pipeline

RATE = 20_000          # row changes per second the writer aims at
PER_TRANSACTION = 400  # row changes per transaction
ROWS = 200_000


class Writer(threading.Thread):
    """UPDATEs of 400 consecutive rows, one transaction each, paced to RATE changes/s."""

    def __init__(self, db: MariaDB, table: str):
        super().__init__(daemon=True)
        self.db, self.table, self.halt, self.changes = db, table, threading.Event(), 0

    def run(self) -> None:
        started, n = time.monotonic(), 0
        with self.db.connect("bench") as conn, conn.cursor() as cur:
            while not self.halt.is_set():
                ahead = started + self.changes / RATE - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
                low = (n * PER_TRANSACTION) % (ROWS - PER_TRANSACTION) + 1
                cur.execute(f"UPDATE {self.table} SET a = a + 1 WHERE id BETWEEN %s AND %s",
                            (low, low + PER_TRANSACTION - 1))
                self.changes += cur.rowcount
                n += 1


def source_offset(db: MariaDB) -> str:
    file, pos = db.query("SHOW MASTER STATUS")[0][:2]
    return Offset(file_sequence(file), int(pos), 0).text


def applied_offset(lake) -> str:
    from tests.integration.helpers import state_log

    try:
        tables = [v for kind, _, v in state_log(lake) if kind == "table"]
    except Exception:  # noqa: BLE001 - read while the run commits: try at the next sample
        return ""
    return tables[-1]["applied"] if tables else ""


def lag_bytes(db: MariaDB, applied: str) -> int:
    from cdc_sql.ops.status import lag_bytes as measure

    logs = [(name, int(size)) for name, size, *_ in db.query("SHOW BINARY LOGS")]
    file, pos = db.query("SHOW MASTER STATUS")[0][:2]
    return measure(applied, Position(file, int(pos)), logs) if applied else 0


def run(db: MariaDB, seconds: int) -> list[Result]:
    table = create_table(db, ROWS, "load")
    home = workdir()
    pipeline = write_pipeline(db, table, home)
    run_cli(pipeline)  # the snapshot, so the follower only captures
    lake = home / "lake"
    follower = subprocess.Popen([sys.executable, "-m", "cdc_sql.cli", "run", str(pipeline)],
                                env={**os.environ, "BENCH_PASSWORD": PASSWORD},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen: list[tuple[float, str]] = []  # (time, source offset then)
    samples = []

    def sample(written: int) -> None:
        """Lag in seconds: since the last moment the source was at or before silver's
        applied offset (the source's offset is noted every second)."""
        now = time.monotonic()
        applied = applied_offset(lake)
        if applied and applied >= seen[-1][1]:
            lag_s = 0.0
        else:
            at_or_before = [t for t, offset in seen if applied and offset <= applied]
            lag_s = now - (at_or_before[-1] if at_or_before else started)
        samples.append((now - started, written, lag_bytes(db, applied), lag_s))
        print(f"  load t={now - started:6.0f}s written={written:>10,} "
              f"lag={samples[-1][2] / 2**20:8.1f} MB {lag_s:6.1f} s", flush=True)

    writer = Writer(db, f"bench.{table}")
    started = time.monotonic()
    writer.start()
    while time.monotonic() - started < seconds:
        for _ in range(10):
            time.sleep(1)
            seen.append((time.monotonic(), source_offset(db)))
        sample(writer.changes)
    writer.halt.set()
    writer.join()
    written, writing = writer.changes, time.monotonic() - started
    target = source_offset(db)
    stopped = time.monotonic()
    while applied_offset(lake) < target and time.monotonic() - stopped < 600:
        time.sleep(1)
    catch_up = time.monotonic() - stopped
    follower.send_signal(signal.SIGTERM)
    _, status, usage = os.wait4(follower.pid, 0)
    peak = usage.ru_maxrss / 1024
    max_lag = max(s for *_, s in samples) if samples else 0.0
    last_half = [s for t, _, _, s in samples if t > seconds / 2]
    print(f"  load: {written:,} row changes in {writing:.0f} s; max lag {max_lag:.1f} s; "
          f"lag in the second half {min(last_half, default=0):.1f}-{max(last_half, default=0):.1f}"
          f" s; caught up {catch_up:.1f} s after the writer stopped", flush=True)
    return [
        Result(f"load: writer ({RATE:,}/s aimed)", written, writing),
        Result("load: max lag (s) while writing", written, max_lag, peak),
        Result("load: catch-up after the writer stopped (s)", written, catch_up, peak),
    ]
