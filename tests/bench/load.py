"""Headroom under load on the engine path (goal 6).

Four tables the engine merges: one with a projection (a WHERE and fewer columns), one with
history, and a parent and its child whose foreign key cascades deletes (silver applies the
cascades). Writers (two connections, transactions of about 420 row changes touching all four
tables) first run alone for PROBE seconds, as fast as they can: the highest write rate this
machine's MariaDB sustains. Then, on the benchmark's engine (`--engines`: by default this
stage runs on Sail and on JVM Spark with Delta, `local`), a pipeline is snapshotted and
`cdc-sql run` follows in its default follow mode while the writers again write as fast as they
can for N seconds (`--size load=N`): the lag is sampled every 5 s (how long ago the source
was where the slowest silver table is now), then the time to catch up once the writers stop.
The follower's peak is that of its process tree (the JVM's too).

Both sides' CPU a row change is shown too (the server's and the writers' while they write
alone; the follower's whole process tree, writing and catching up): where the two compete
for the same cores, the lag stays bounded only if the follower spends less CPU a change
than the source side.

`sustain` (`run_sustained`) finds instead the highest rate the follower keeps up with:
the writers paced at a rate for N seconds (`--size sustain=N`) while the follower follows,
the lag sampled as above; a rate is kept if the lag stayed under BOUND and the writers
reached it. From an eighth of the writers' rate alone, the rate doubles while it is kept,
then is halved towards the last kept one twice; between steps the follower catches up."""
from __future__ import annotations

import os
import resource
import signal
import threading
import time
from typing import Callable

from cdc_sql.dev.mariadb import MariaDB
from cdc_sql.source.offsets import Offset, file_sequence
from tests.bench.common import (Goal, Result, TreePeak, at_most, create_table, engine_label,
                                own_peak_mb, run_cli, spawn, workdir, write_pipeline)

ROWS = 200_000
PARENTS = 20_000
CHILDREN = 5  # per parent
PROBE = 20
WRITERS = 2
BOUND = 10.0  # seconds of lag


def create_tables(db: MariaDB) -> dict[str, str]:
    proj, hist = create_table(db, ROWS, "load_proj"), create_table(db, ROWS, "load_hist")
    db.execute("DROP TABLE IF EXISTS bench.load_child", "DROP TABLE IF EXISTS bench.load_parent",
               "CREATE TABLE bench.load_parent (id BIGINT PRIMARY KEY, n INT)",
               "CREATE TABLE bench.load_child (id BIGINT PRIMARY KEY, parent_id BIGINT, v INT, "
               "FOREIGN KEY (parent_id) REFERENCES load_parent (id) ON DELETE CASCADE)",
               f"INSERT INTO bench.load_parent SELECT seq, 0 FROM bench.seq_1_to_{PARENTS}",
               f"INSERT INTO bench.load_child SELECT seq, (seq + {CHILDREN - 1}) DIV {CHILDREN},"
               f" 0 FROM bench.seq_1_to_{PARENTS * CHILDREN}")
    return {"proj": proj, "hist": hist}


def pipeline_tables(names: dict[str, str]) -> list[dict]:
    return [{"name": names["proj"],
             "projection": f"SELECT id, a, b, c FROM {names['proj']} WHERE a >= 0"},
            {"name": names["hist"], "history": True},
            {"name": "load_parent"}, {"name": "load_child"}]


class Writers:
    """WRITERS connections, each on its own key ranges, as fast as they can: a transaction
    updates 200 rows of each of the two tables, deletes 2 parents (InnoDB cascades their
    children, without a binlog event) and inserts them back with their children."""

    def __init__(self, db: MariaDB, names: dict[str, str], rate: float = 0.0):
        self.db, self.names = db, names
        self.rate = rate / WRITERS  # row changes a second each (0: as fast as they can)
        self.halt, self.changes, self.lock = threading.Event(), 0, threading.Lock()
        self.threads = [threading.Thread(target=self._write, args=(w,), daemon=True)
                        for w in range(WRITERS)]

    def __enter__(self) -> "Writers":
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.halt.set()
        for thread in self.threads:
            thread.join()

    def _write(self, writer: int) -> None:
        rows_each, parents_each = ROWS // WRITERS, PARENTS // WRITERS
        n, mine, started = 0, 0, time.monotonic()
        with self.db.connect("bench", autocommit=False) as conn, conn.cursor() as cur:
            while not self.halt.is_set():
                low = writer * rows_each + (n * 200) % (rows_each - 200) + 1
                parent = writer * parents_each + (n * 2) % (parents_each - 2) + 1
                done = 0
                for table in self.names.values():
                    cur.execute(f"UPDATE {table} SET a = a + 1 WHERE id BETWEEN %s AND %s",
                                (low, low + 199))
                    done += cur.rowcount
                cur.execute("DELETE FROM load_parent WHERE id BETWEEN %s AND %s",
                            (parent, parent + 1))
                done += cur.rowcount
                cur.execute("INSERT INTO load_parent VALUES (%s, %s), (%s, %s)",
                            (parent, n, parent + 1, n))
                children = [(c, p, n) for p in (parent, parent + 1)
                            for c in range((p - 1) * CHILDREN + 1, p * CHILDREN + 1)]
                cur.executemany("INSERT INTO load_child VALUES (%s, %s, %s)", children)
                conn.commit()
                with self.lock:
                    self.changes += done + 2 + len(children)
                n, mine = n + 1, mine + done + 2 + len(children)
                if self.rate:  # paced: wait until this writer's changes are due
                    self.halt.wait(max(0.0, started + mine / self.rate - time.monotonic()))


def probe(db: MariaDB, names: dict[str, str], seconds: float) -> tuple[int, float]:
    """Row changes the writers make alone in `seconds`, and the CPU seconds the server and
    the writers (this process's threads) spent on them."""
    before = server_cpu(db) + own_cpu()
    with Writers(db, names) as writers:
        time.sleep(seconds)
        written = writers.changes
    return written, server_cpu(db) + own_cpu() - before


def server_cpu(db: MariaDB) -> float:
    """CPU seconds (user and system) the MariaDB server has used so far."""
    with open(f"/proc/{db.process.pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu() -> float:
    times = os.times()
    return times.user + times.system


def children_cpu() -> float:
    """CPU seconds of this process's children that have ended (and of theirs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def source_offset(db: MariaDB) -> str:
    file, pos = db.query("SHOW MASTER STATUS")[0][:2]
    return Offset(file_sequence(file), int(pos), 0).text


def slowest_applied(lake, tables: int) -> str:
    """The lowest applied offset of silver's tables ('' until every one has merged)."""
    from tests.integration.helpers import state_log

    try:
        latest = {name: v["applied"] for kind, name, v in state_log(lake) if kind == "table"}
    except Exception:  # noqa: BLE001 - read while the run commits: try at the next sample
        return ""
    return min(latest.values()) if len(latest) == tables else ""


class Follower:
    """`cdc-sql run` following a snapshotted pipeline in its default follow mode, its process
    tree's peak and CPU; `sample` says how long ago the source stood where the slowest silver
    table stands now."""

    def __init__(self, db: MariaDB, home, pipeline, tables: int):
        self.db, self.lake, self.tables = db, home / "lake", tables
        self.log = open(home / "follower.log", "ab")
        self.cpu_before = children_cpu()
        self.process, self.peak_file = spawn("-m", "cdc_sql.cli", "run", str(pipeline),
                                             stdout=self.log, stderr=self.log)
        self.tree = TreePeak(self.process.pid)
        self.tree.start()
        self.seen: list[tuple[float, str]] = []  # (time, the source's offset then)
        self.since = time.monotonic()

    def sample(self, seconds: int = 5) -> float:
        """After `seconds` (the source's offset noted each one), the lag in seconds."""
        for _ in range(seconds):
            time.sleep(1)
            self.seen.append((time.monotonic(), source_offset(self.db)))
        applied = slowest_applied(self.lake, self.tables)
        before = [t for t, offset in self.seen if applied and offset <= applied]
        return time.monotonic() - (before[-1] if before else self.since)

    def catch_up(self, limit: float = 600) -> float:
        """Seconds until every table applied where the source stands now, nothing written
        meanwhile (`limit` at most)."""
        target, stopped = source_offset(self.db), time.monotonic()
        while slowest_applied(self.lake, self.tables) < target and \
                time.monotonic() - stopped < limit:
            time.sleep(0.5)
        if slowest_applied(self.lake, self.tables) >= target:
            self.seen.append((time.monotonic(), target))  # where the source still stands
        return time.monotonic() - stopped

    def stop(self) -> tuple[float, float]:
        """The follower ended: its peak RSS (MB) and CPU seconds."""
        self.process.send_signal(signal.SIGTERM)
        self.process.wait()
        cpu = children_cpu() - self.cpu_before
        self.log.close()
        return max(self.tree.stop(), own_peak_mb(self.peak_file)), cpu


def snapshotted(db: MariaDB, names: dict[str, str]):
    """The stage's pipeline, snapshotted (so a follower only captures and merges): its home
    and file, or why it could not run."""
    home = workdir()
    pipeline = write_pipeline(db, pipeline_tables(names), home)
    try:
        run_cli(pipeline)
    except RuntimeError as exc:
        why = (str(exc).strip().splitlines() or ["?"])[-1][:120]
        print(f"  load, engine {engine_label()}: could not run: {why}", flush=True)
        return home, None, why
    return home, pipeline, ""


def follow(db: MariaDB, names: dict[str, str], seconds: float) -> list:
    home, pipeline, why = snapshotted(db, names)
    if pipeline is None:
        return [Goal("6 load: max lag", f"<= {BOUND:g} s", f"not measured: {why}", None)]
    follower, lags = Follower(db, home, pipeline, len(pipeline_tables(names))), []
    started = time.monotonic()
    with Writers(db, names) as writers:
        while time.monotonic() - started < seconds:
            lag = follower.sample()
            lags.append((time.monotonic() - started, lag))
            print(f"  load {engine_label()} t={lags[-1][0]:5.0f}s written={writers.changes:>10,} "
                  f"lag={lags[-1][1]:5.1f} s", flush=True)
        written, writing = writers.changes, time.monotonic() - started
    catch_up = follower.catch_up()
    peak, cpu = follower.stop()
    max_lag = max(lag for _, lag in lags)
    late = [lag for t, lag in lags if t > seconds / 2]
    return [
        Result("load: writers beside the follower", written, writing, peak),
        Result(f"  max lag {max_lag:.1f} s, second half {min(late, default=0):.1f}-"
               f"{max(late, default=0):.1f} s, caught up {catch_up:.1f} s after", written, 0),
        Result("  the follower: every change applied, writing and catching up", written,
               writing + catch_up),
        Result(f"  the follower's CPU: {cpu:.1f} s, {cpu / max(written, 1) * 1e6:.2f} us a "
               f"change", written, 0),
        at_most(f"6 load: max lag at {written / writing:,.0f} changes/s",
                max_lag, BOUND, " s"),
    ]


def rates(alone: float, kept: Callable[[float], bool]) -> float:
    """The highest rate `kept` (tried in order) says yes to: from alone / 8, doubling while
    kept, then halving the step towards the last kept rate twice; 0 if the first is not."""
    rate, best, failed = alone / 8, 0.0, None
    while failed is None and rate <= alone:
        if kept(rate):
            best, rate = rate, rate * 2
        else:
            failed = rate
    if failed is None:
        return best
    for _ in range(2):
        middle = (best + failed) / 2
        if kept(middle):
            best = middle
        else:
            failed = middle
    return best


def sustained(db: MariaDB, names: dict[str, str], seconds: float) -> list:
    """The highest paced rate the follower keeps under BOUND of lag (`rates`), from a
    snapshot taken after the writers' rate alone was measured."""
    written, cpu = probe(db, names, PROBE)
    alone = written / PROBE
    home, pipeline, why = snapshotted(db, names)
    if pipeline is None:
        return [Result(f"load: highest rate with lag under {BOUND:g} s: not measured: {why}",
                       0, 0)]
    follower, tried = Follower(db, home, pipeline, len(pipeline_tables(names))), []

    def kept(rate: float) -> bool:
        follower.catch_up()
        started, lags = time.monotonic(), []
        with Writers(db, names, rate) as writers:
            while time.monotonic() - started < seconds:
                lags.append(follower.sample())
            reached = writers.changes / (time.monotonic() - started)
        ok = max(lags) <= BOUND and reached >= 0.95 * rate
        tried.append((rate, reached, max(lags), ok))
        print(f"  sustain {engine_label()}: paced at {rate:,.0f}/s, written {reached:,.0f}/s, "
              f"max lag {max(lags):.1f} s: {'kept' if ok else 'not kept'}", flush=True)
        return ok

    best = rates(alone, kept)
    peak, follower_cpu = follower.stop()
    return [Result(f"load: writers alone, as fast as they can ({PROBE} s)", written, PROBE),
            Result(f"  the server's and the writers' CPU: {cpu / max(written, 1) * 1e6:.2f} "
                   f"us a change", written, 0),
            *(Result(f"  paced at {rate:,.0f}/s: written {reached:,.0f}/s, max lag {lag:.1f} s"
                     f" ({'kept' if ok else 'not kept'})", 0, 0)
              for rate, reached, lag, ok in tried),
            Result(f"load: highest rate with lag under {BOUND:g} s ({seconds:g} s a step)",
                   int(best * seconds), seconds, peak),
            Result(f"  that is {best / alone:.2f}x the writers' rate alone; the follower's "
                   f"CPU {follower_cpu:.1f} s", 0, 0),
            Goal(f"6 load, paced: the highest rate kept under {BOUND:g} s of lag", "-",
                 f"{best:,.0f}/s", None)]


def run_sustained(db: MariaDB, seconds: int) -> list:
    return sustained(db, create_tables(db), seconds)


def run(db: MariaDB, seconds: int) -> list:
    names = create_tables(db)
    written, cpu = probe(db, names, PROBE)
    return [Result(f"load: writers alone, as fast as they can ({PROBE} s)", written, PROBE),
            Result(f"  the server's and the writers' CPU: {cpu:.1f} s, "
                   f"{cpu / max(written, 1) * 1e6:.2f} us a change", written, 0),
            *follow(db, names, seconds)]
