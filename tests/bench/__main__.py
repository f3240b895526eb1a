"""Benchmarks: `python -m tests.bench [--sizes 500000,2000000] [--stages snapshot]`.

Each stage is measured against its bare baseline in the same run, at two table sizes (the second
4x the first, so cost must grow linearly), with the peak memory of the cdc-sql process.
Not part of the test suite.
"""
from __future__ import annotations

import argparse

from cdc_sql.devdb import MariaDB
from tests.bench import binlog, snapshot

STAGES = {"snapshot": snapshot.run, "binlog": binlog.run}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="500000,2000000")
    parser.add_argument("--stages", default=",".join(STAGES))
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    results = []
    with MariaDB(extra_flags=["--innodb-buffer-pool-size=2G"]) as db:
        for stage in args.stages.split(","):
            for rows in sizes:
                results += STAGES[stage](db, rows)
    print(f"\n{'stage':<36} {'rows':>10} {'seconds':>8} {'rows/s':>11} {'ratio':>6}  "
          f"{'vs':<16} {'peak MB':>8}")
    for r in results:
        ratio = f"{r.ratio:.2f}x" if r.ratio else ""
        peak = f"{r.peak_mb:.0f}" if r.peak_mb else ""
        print(f"{r.stage:<36} {r.rows:>10,} {r.seconds:>8.2f} {r.rate:>11,.0f} {ratio:>6}  "
              f"{r.baseline:<16} {peak:>8}")


if __name__ == "__main__":
    main()
