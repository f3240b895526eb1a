"""The demo: a throwaway MariaDB with the `shop` sample, pipelines/shop.yaml, Sail, local Delta.

    python -m cdc_sql.dev.demo [--target DIR]

It snapshots the sample, changes it (inserts, updates, a key change, deletes), runs again to
capture the binlog, prints each silver table, and checks it against the source row by row.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from cdc_sql import engine as engines
from cdc_sql.cli import main as cli
from cdc_sql.config.model import load_pipeline
from cdc_sql.dev.mariadb import PASSWORD, USER, MariaDB
from cdc_sql.ops.verify import compare_table

PIPELINE = Path(__file__).resolve().parents[2] / "pipelines" / "shop.yaml"

SCHEMA = [
    "CREATE DATABASE shop",
    """CREATE TABLE shop.customers (
         id INT PRIMARY KEY, name VARCHAR(100) NOT NULL, email VARCHAR(200),
         city VARCHAR(50), created_at DATETIME(3) NOT NULL)""",
    """CREATE TABLE shop.orders (
         id BIGINT PRIMARY KEY, customer_id INT NOT NULL, status ENUM('new','paid','shipped'),
         amount DECIMAL(10,2) NOT NULL, note TEXT, created_at TIMESTAMP(6) NOT NULL)""",
]


def load_sample(db: MariaDB, customers: int = 200, orders: int = 3000) -> None:
    db.execute(*SCHEMA)
    with db.connect("shop") as conn, conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO customers VALUES (%s, %s, %s, %s, '2024-01-01 10:00:00.250')",
            [(i, f"customer {i}", f"c{i}@example.com" if i % 7 else None,
              ["Berlin", "Lyon", "Porto", "Graz"][i % 4]) for i in range(1, customers + 1)])
        cur.executemany(
            "INSERT INTO orders VALUES (%s, %s, %s, %s, %s, '2024-02-01 12:00:00.123456')",
            [(i, 1 + i % customers, ["new", "paid", "shipped"][i % 3], (i * 37) % 250 + 0.99,
              None if i % 5 else f"note {i}") for i in range(1, orders + 1)])


def change_sample(db: MariaDB) -> None:
    db.execute(
        "INSERT INTO orders VALUES (100001, 3, 'new', 420.00, 'late order', NOW(6))",
        "UPDATE orders SET status = 'shipped', amount = amount + 100 WHERE id % 97 = 0",
        "UPDATE orders SET id = 200002 WHERE id = 2",          # a primary-key change
        "DELETE FROM orders WHERE id % 101 = 0",
        "UPDATE customers SET city = 'Wien' WHERE city = 'Graz'",
        "DELETE FROM customers WHERE id = 200",
        db="shop")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", help="lakehouse directory (default: a new temp dir)")
    args = parser.parse_args(argv)
    target = args.target or tempfile.mkdtemp(prefix="cdc-sql-demo-")

    with MariaDB() as db:
        os.environ.update(MYSQL_HOST="127.0.0.1", MYSQL_PORT=str(db.port), MYSQL_USER=USER,
                          MYSQL_PASSWORD=PASSWORD, CDC_TARGET=target)
        print(f"== MariaDB on 127.0.0.1:{db.port}, lakehouse in {target}")
        load_sample(db)
        for step, argv_ in (("validate", ["validate", str(PIPELINE)]),
                            ("snapshot + binlog", ["run", str(PIPELINE), "--until-caught-up"])):
            print(f"== cdc-sql {argv_[0]}  ({step})")
            if cli(argv_) != 0:
                return 1
        print("== changing the source: inserts, updates, a key change, deletes")
        change_sample(db)
        print("== cdc-sql run --until-caught-up  (picks up only the changes)")
        if cli(["run", str(PIPELINE), "--until-caught-up"]) != 0:
            return 1
        cli(["status", str(PIPELINE)])
        engine = engines.start("sail")
        try:
            return _show_and_compare(engine, target)
        finally:
            engine.stop()


def _show_and_compare(engine, target: str) -> int:
    pipeline = load_pipeline(PIPELINE)
    failures = 0
    for table in pipeline.tables:
        silver = engine.read(f"{target}/silver/{table.name}").orderBy("id")
        print(f"\n== silver.{table.name}: {silver.count()} rows (first 5)")
        silver.show(5, truncate=False)
        diff = compare_table(engine, pipeline, table)
        print(f"   compared with the source row by row: {diff or 'equal'}")
        failures += bool(diff)
        if table.history:
            _show_history(engine, f"{target}/silver/{table.name}_history", table.name)
    return 1 if failures else 0


def _show_history(engine, path: str, name: str) -> None:
    history = engine.read(path)
    changed = history.where("NOT _cdc_current").select("id").distinct()
    versions = history.join(changed, "id").orderBy("id", "_cdc_valid_from")
    print(f"\n== silver.{name}_history: {history.count()} versions; keys changed since the "
          f"snapshot, every version:")
    versions.select("id", "status", "amount", "_cdc_op", "_cdc_valid_from", "_cdc_valid_to",
                    "_cdc_current").show(12, truncate=False)


if __name__ == "__main__":
    sys.exit(main())
