"""A seeded random writer: inserts, updates, key changes, deletes and rolled-back transactions."""
from __future__ import annotations

import random
import threading
import time

import pymysql


class RandomWriter(threading.Thread):
    """`rate`: transactions per second to aim at (None: as fast as the server goes). The
    connection is opened again when the server drops it (restarts, KILL): a transaction cut
    off that way may or may not have committed, which is fine, since tests compare silver
    with the database itself, never with what the writer meant to do."""

    def __init__(self, mariadb, db: str, table: str, key_space: int, seed: int,
                 max_transactions: int = 100_000, rate: float | None = None):
        super().__init__(daemon=True)
        self.mariadb, self.db, self.table = mariadb, db, table
        self.key_space, self.random = key_space, random.Random(seed)
        self.max_transactions, self.rate = max_transactions, rate
        self.halt = threading.Event()
        self.committed = self.reconnects = 0
        self.started = self.stopped = 0.0

    def run(self) -> None:
        self.started = time.monotonic()
        while not self.halt.is_set() and self.committed < self.max_transactions:
            try:
                conn = self.mariadb.connect(self.db, autocommit=False)
            except pymysql.err.OperationalError:
                self.halt.wait(0.2)  # the server is down: try again
                continue
            try:
                with conn, conn.cursor() as cur:
                    self._write(conn, cur)
            except (pymysql.err.OperationalError, pymysql.err.InterfaceError):
                self.reconnects += 1
        self.stopped = time.monotonic()

    def _write(self, conn, cur) -> None:
        while not self.halt.is_set() and self.committed < self.max_transactions:
            if self.rate:
                ahead = self.started + self.committed / self.rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
            try:
                self._transaction(cur)
                if self.random.random() < 0.1:
                    conn.rollback()
                else:
                    conn.commit()
                    self.committed += 1
            except pymysql.err.IntegrityError:
                conn.rollback()

    @property
    def transactions_per_second(self) -> float:
        return self.committed / max((self.stopped or time.monotonic()) - self.started, 1e-9)

    def _transaction(self, cur) -> None:
        r, t = self.random, self.table
        for _ in range(r.randint(1, 4)):
            k = r.randint(1, self.key_space)
            op = r.random()
            if op < 0.35:
                cur.execute(f"INSERT INTO {t} (id, v, n) VALUES (%s, %s, %s) "
                            f"ON DUPLICATE KEY UPDATE v = VALUES(v)", (k, f"i{r.random():.6f}", k))
            elif op < 0.7:
                cur.execute(f"UPDATE {t} SET v = %s, n = n + 1 WHERE id = %s",
                            (f"u{r.random():.6f}", k))
            elif op < 0.8:
                cur.execute(f"UPDATE {t} SET id = %s WHERE id = %s",
                            (r.randint(1, self.key_space), k))
            else:
                cur.execute(f"DELETE FROM {t} WHERE id = %s", (k,))

    def stop(self) -> None:
        self.halt.set()
        self.join()

    def __enter__(self) -> "RandomWriter":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
