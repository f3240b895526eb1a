"""Benchmarks, a stage per goal of issue 39: `python -m tests.bench [options]` (`--help`).

`python -m tests.bench [--stages S,...] [--sizes N,M] [--size STAGE=N,M]
[--engines sail,local,cluster] [--sql-only]`

Every stage measures one of issue 39's goals at default settings, against baselines measured
in the same invocation, with the peak RSS of each run's whole process tree (the engine
included); the last table puts each goal's figure beside its bound. Not part of the tests.

stage      goal                                          default sizes           engines
snapshot   1 first load vs a connectorx->delta-rs copy   2M, 10M rows            sail
binlog     2 binlog to silver vs mariadb-binlog -vv      500k, 2M changes        sail
                                                         (7 and 40 columns)
window     3 memory: one window of N changes             5M, 20M changes         sail
spread     3 memory: N/8 updates over an N-row silver    4M rows                 sail
bigtxn     3 memory: one transaction of N rows           2M, 10M rows            sail
values     4 wide values (40 rows of 1-14 MB)            40 rows                 sail
many       5 table count                                 10,000 tables           sail
follow     commits flat through a long run: capture      4,000 batches           sail
           seconds per batch, N vs N/4 batches
load       6 lag at the highest write rate               300 s of writing        sail, local
sustain    6 the highest paced rate the follower keeps   60 s a step             sail, local
           under 10 s of lag
big        7 a 100M-row first load (slow: only named)    100M rows               sail
s3         local vs s3:// targets (moto; only named)     250k, 1M rows           sail
silver     silver step on the engine's SQL vs a bare     50k changes             sail, local
           MERGE INTO in the same session (issue 35)

`--sizes` sets the rows or changes of every stage chosen but values, many, follow, load and
sustain (rows of 1-14 MB, tables, batches, seconds of writing): `--size STAGE=N,M` sets any one
stage's.
`--engines` runs every chosen stage on each engine given instead (sail: the embedded Sail;
local: a JVM Spark with Delta; cluster: a Spark standalone master and two workers behind a
Spark Connect server, engine mode remote, started once), each figure named with its engine;
`--sql-only` sends every silver window through the engine's SQL (engine.sql_only).
"""
from __future__ import annotations

import argparse
import os
from contextlib import ExitStack
from dataclasses import replace

from cdc_sql.dev.mariadb import MariaDB
from tests.bench import binlog, common, follow, load, memory, objstore, silver, snapshot
from tests.bench.common import Goal, Result, machine_load

SAIL, BOTH = ("sail",), ("sail", "local")
# stage -> (run, default sizes, default engines)
STAGES = {"snapshot": (snapshot.run, [2_000_000, 10_000_000], SAIL),
          "binlog": (binlog.run, [500_000, 2_000_000], SAIL),
          "window": (memory.run_window, [5_000_000, 20_000_000], SAIL),
          "spread": (memory.run_spread, [4_000_000], SAIL),
          "bigtxn": (memory.run_transaction, [2_000_000, 10_000_000], SAIL),
          "values": (memory.run_values, [40], SAIL),
          "many": (snapshot.run_many, [10_000], SAIL),
          "follow": (follow.run, [4_000], SAIL),
          "load": (load.run, [300], BOTH),  # goal 6 names Sail and Spark + Delta
          "sustain": (load.run_sustained, [60], BOTH),
          "big": (snapshot.run_big, [100_000_000], SAIL),
          "s3": (objstore.run, [250_000, 1_000_000], SAIL),
          "silver": (silver.run, [50_000], BOTH)}  # issue 35: Spark + Delta vs a bare MERGE
ONLY_NAMED = {"big", "s3"}  # big: slow; s3: no goal of its own
NOT_ROWS = {"values", "many", "load", "sustain", "follow"}  # 1-14 MB rows, tables, seconds,
# batches
ENGINES = ("sail", "local", "cluster")
SERVER_FLAGS = ["--innodb-buffer-pool-size=2G", "--max-allowed-packet=1G",
                "--innodb-log-file-size=1G"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", default=",".join(s for s in STAGES if s not in ONLY_NAMED),
                        help=f"comma-separated, of {', '.join(STAGES)} (big and s3 only when "
                             f"named)")
    parser.add_argument("--sizes", help="comma-separated rows or changes for every stage "
                                        f"chosen but {', '.join(sorted(NOT_ROWS))} (default: "
                                        "per stage); 2M and 500k are understood")
    parser.add_argument("--size", action="append", default=[], metavar="STAGE=N[,N]",
                        help="sizes for one stage (repeatable), e.g. --size binlog=500k")
    parser.add_argument("--engines", help=f"comma-separated, of {', '.join(ENGINES)}: every "
                                          f"stage on each (default: per stage)")
    parser.add_argument("--sql-only", action="store_true",
                        help="every silver window through the engine's SQL (engine.sql_only)")
    args = parser.parse_args()
    plan = choose(args, parser)
    results = []
    compiled()
    print(f"machine: {machine_load()} at start", flush=True)
    with MariaDB(extra_flags=SERVER_FLAGS) as db, ExitStack() as servers:
        for engine in dict.fromkeys(e for _, _, engines in plan for e in engines):
            common.ENGINE.clear()
            common.ENGINE.update(engine_settings(engine, servers), label=engine)
            if args.sql_only:
                common.ENGINE["sql_only"] = "true"
            label = common.engine_label()
            for stage, sizes, engines in plan:
                if engine not in engines:
                    continue
                for size in sizes:
                    print(f"{label}: {stage} {size:,} ... ({machine_load()})", flush=True)
                    found = [replace(r, stage=f"{label}: {r.stage}") if isinstance(r, Result)
                             else replace(r, engine=label) for r in STAGES[stage][0](db, size)]
                    print_results([r for r in found if isinstance(r, Result)])
                    results += found
    print(f"\nmachine: {machine_load()} at the end")
    print_results([r for r in results if isinstance(r, Result)])
    print_goals([r for r in results if isinstance(r, Goal)])


def choose(args, parser) -> list[tuple[str, list[int], tuple[str, ...]]]:
    """(stage, sizes, engines) for each stage chosen, in the order given."""
    stages = args.stages.split(",")
    engines = tuple(args.engines.split(",")) if args.engines else None
    sizes = {stage: numbers(args.sizes) if args.sizes and stage not in NOT_ROWS else default
             for stage, (_, default, _) in STAGES.items()}
    for item in args.size:
        stage, _, text = item.partition("=")
        sizes[stage] = numbers(text)
    for name in [*stages, *(i.partition("=")[0] for i in args.size)]:
        if name not in STAGES:
            parser.error(f"no stage {name!r}: one of {', '.join(STAGES)}")
    for name in engines or ():
        if name not in ENGINES:
            parser.error(f"--engines: {name} is not one of {', '.join(ENGINES)}")
    return [(stage, sizes[stage], engines or STAGES[stage][2]) for stage in stages]


def numbers(text: str) -> list[int]:
    """'2M,500k,40' -> [2000000, 500000, 40]."""
    scale = {"k": 1_000, "M": 1_000_000}
    return [int(float(t[:-1]) * scale[t[-1]]) if t[-1] in scale else int(t)
            for t in text.split(",")]


def compiled() -> None:
    """cdc_sql's bytecode written now: where PYTHONDONTWRITEBYTECODE is set, each run would
    otherwise compile every module edited since its bytecode was last written (tens of
    milliseconds), which a user's installed package never does."""
    import compileall

    import cdc_sql

    compileall.compile_dir(os.path.dirname(cdc_sql.__file__), quiet=1)


def engine_settings(name: str, servers: ExitStack) -> dict:
    """The pipelines' `engine:` settings for an engine of --engines; a cluster is started once
    and stopped when the benchmark ends."""
    if name == "cluster":
        from cdc_sql.dev.spark_cluster import StandaloneCluster

        return {"mode": "remote", "url": servers.enter_context(StandaloneCluster()).url}
    return {"mode": name}


def print_results(results: list[Result]) -> None:
    print(f"\n{'figure':<80} {'rows':>11} {'seconds':>8} {'rows/s':>11} {'ratio':>7}  "
          f"{'vs':<20} {'peak MB':>8}")
    for r in results:
        if not r.seconds:  # a note on the line above
            print(f"{r.stage}")
            continue
        ratio = f"{r.ratio:.2f}x" if r.ratio else ""
        peak = f"{r.peak_mb:.0f}" if r.peak_mb else ""
        print(f"{r.stage:<80} {r.rows:>11,} {r.seconds:>8.2f} {r.rate:>11,.0f} {ratio:>7}  "
              f"{r.baseline:<20} {peak:>8}", flush=True)


def print_goals(goals: list[Goal]) -> None:
    """Each goal's figures, by goal number, then engine."""
    print(f"\n{'goal':<80} {'engine':<16} {'bound':>10} {'figure':>14}  met")
    for g in sorted(goals, key=lambda g: g.goal.split(" ", 1)[0]):
        met = {True: "yes", False: "NO", None: "-"}[g.met]
        print(f"{g.goal:<80} {g.engine:<16} {g.bound:>10} {g.figure:>14}  {met}", flush=True)


if __name__ == "__main__":
    main()
