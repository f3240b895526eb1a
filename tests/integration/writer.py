"""A seeded random writer: inserts, updates, key changes, deletes and rolled-back transactions."""
from __future__ import annotations

import random
import threading

import pymysql


class RandomWriter(threading.Thread):
    def __init__(self, mariadb, db: str, table: str, key_space: int, seed: int,
                 max_transactions: int = 100_000):
        super().__init__(daemon=True)
        self.mariadb, self.db, self.table = mariadb, db, table
        self.key_space, self.random = key_space, random.Random(seed)
        self.max_transactions = max_transactions
        self.halt = threading.Event()
        self.committed = 0

    def run(self) -> None:
        conn = self.mariadb.connect(self.db, autocommit=False)
        with conn, conn.cursor() as cur:
            while not self.halt.is_set() and self.committed < self.max_transactions:
                try:
                    self._transaction(cur)
                    if self.random.random() < 0.1:
                        conn.rollback()
                    else:
                        conn.commit()
                        self.committed += 1
                except pymysql.err.IntegrityError:
                    conn.rollback()

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
