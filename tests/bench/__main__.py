"""Benchmarks: `python -m tests.bench [--stages snapshot,binlog] [--sizes N,4N]`.

Each stage is measured against its bare baseline in the same run, at two table sizes (the second
4x the first, so cost must grow linearly), with the peak memory of the cdc-sql process.
Not part of the test suite.
"""
from __future__ import annotations

import argparse

from cdc_sql.dev.mariadb import MariaDB
from tests.bench import binlog, load, objstore, scale, snapshot

# stage -> (run, default sizes: the second 4x the first)
STAGES = {"snapshot": (snapshot.run, [2_000_000, 10_000_000]),
          "many": (snapshot.run_many, [1_000]),
          "binlog": (binlog.run, [250_000, 1_000_000]),
          "wide": (binlog.run_wide, [100_000, 400_000]),
          "bigtxn": (binlog.run_big_transaction, [1_000_000, 5_000_000]),
          "scale": (scale.run, [10_000_000]),  # not in the default stages: minutes, not seconds
          "load": (load.run, [300]),           # ... nor this: its size is seconds of writing
          "s3": (objstore.run, [250_000, 1_000_000])}  # nor this: local and s3:// targets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", help="table sizes for every stage (default: per stage)")
    parser.add_argument("--stages", default="snapshot,many,binlog,wide,bigtxn",
                        help=f"comma-separated, of {', '.join(STAGES)}")
    args = parser.parse_args()
    results = []
    with MariaDB(extra_flags=["--innodb-buffer-pool-size=2G"]) as db:
        for stage in args.stages.split(","):
            run, sizes = STAGES[stage]
            for rows in [int(s) for s in args.sizes.split(",")] if args.sizes else sizes:
                results += run(db, rows)
    print(f"\n{'stage':<52} {'rows':>10} {'seconds':>8} {'rows/s':>11} {'ratio':>7}  "
          f"{'vs':<20} {'peak MB':>8}")
    for r in results:
        ratio = f"{r.ratio:.2f}x" if r.ratio else ""
        peak = f"{r.peak_mb:.0f}" if r.peak_mb else ""
        print(f"{r.stage:<52} {r.rows:>10,} {r.seconds:>8.2f} {r.rate:>11,.0f} {ratio:>7}  "
              f"{r.baseline:<20} {peak:>8}", flush=True)


if __name__ == "__main__":
    main()
