"""Benchmarks: `python -m tests.bench [--stages snapshot,binlog] [--sizes N,4N] [--engines ...]`.

Each stage is measured against its bare baseline in the same run, at two table sizes (the second
4x the first, so cost must grow linearly), with the peak memory of the cdc-sql process.
`--engines sail,local,cluster` runs the stages on each engine in one invocation (local: a JVM
Spark with Delta; cluster: a Spark standalone master and two workers behind a Spark Connect
server, engine mode remote), each stage's name prefixed with its engine; `--sql-only` sends
every silver window through the engine's SQL. Not part of the test suite.
"""
from __future__ import annotations

import argparse
from dataclasses import replace

from contextlib import ExitStack

from cdc_sql.dev.mariadb import MariaDB
from tests.bench import binlog, common, load, objstore, scale, snapshot

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
    parser.add_argument("--engines", default="sail",
                        help="comma-separated, of sail, local, cluster (default sail)")
    parser.add_argument("--sql-only", action="store_true",
                        help="every silver window through the engine's SQL (engine.sql_only)")
    args = parser.parse_args()
    results = []
    with MariaDB(extra_flags=["--innodb-buffer-pool-size=2G"]) as db, ExitStack() as servers:
        for name in args.engines.split(","):
            common.ENGINE.clear()
            common.ENGINE.update(engine_settings(name, servers), label=name)
            if args.sql_only:
                common.ENGINE["sql_only"] = "true"
            for stage in args.stages.split(","):
                run, sizes = STAGES[stage]
                for rows in [int(s) for s in args.sizes.split(",")] if args.sizes else sizes:
                    results += [replace(r, stage=f"{common.engine_label()}: {r.stage}")
                                for r in run(db, rows)]
    print(f"\n{'stage':<64} {'rows':>10} {'seconds':>8} {'rows/s':>11} {'ratio':>7}  "
          f"{'vs':<20} {'peak MB':>8}")
    for r in results:
        ratio = f"{r.ratio:.2f}x" if r.ratio else ""
        peak = f"{r.peak_mb:.0f}" if r.peak_mb else ""
        print(f"{r.stage:<64} {r.rows:>10,} {r.seconds:>8.2f} {r.rate:>11,.0f} {ratio:>7}  "
              f"{r.baseline:<20} {peak:>8}", flush=True)


def engine_settings(name: str, servers: ExitStack) -> dict:
    """The pipelines' `engine:` settings for an engine of --engines; a cluster is started once
    and stopped when the benchmark ends."""
    if name == "cluster":
        from cdc_sql.dev.spark_cluster import StandaloneCluster

        return {"mode": "remote", "url": servers.enter_context(StandaloneCluster()).url}
    if name not in ("sail", "local"):
        raise SystemExit(f"--engines: {name} is not one of sail, local, cluster")
    return {"mode": name}


if __name__ == "__main__":
    main()
