"""Benchmarks: `python -m tests.bench [--stages snapshot,binlog] [--sizes N,M]`.

Every stage measures one of issue 39's goals at default settings, against baselines measured
in the same invocation, with the peak RSS of each run's whole process tree (the engine
included); the last table puts each goal's figure beside its bound. Not part of the tests.

stage      goal                                         default sizes
snapshot   1 first load vs a connectorx->delta-rs copy  2M, 10M rows
binlog     2 binlog to silver vs mariadb-binlog -vv      500k, 2M changes (7 and 40 columns)
window     3 memory: one window of N changes             5M, 20M changes
bigtxn     3 memory: one transaction of N rows           2M, 10M rows
values     4 wide values (40 rows of 1-14 MB)            40 rows
many       5 table count                                 10,000 tables
load       6 lag at the highest write rate, engines      300 s of writing
big        7 (slow, not by default) a 100M-row first load 100M rows
"""
from __future__ import annotations

import argparse

from cdc_sql.dev.mariadb import MariaDB
from tests.bench import binlog, load, memory, snapshot
from tests.bench.common import Goal, Result, machine_load

STAGES = {"snapshot": (snapshot.run, [2_000_000, 10_000_000]),
          "binlog": (binlog.run, [500_000, 2_000_000]),
          "window": (memory.run_window, [5_000_000, 20_000_000]),
          "bigtxn": (memory.run_transaction, [2_000_000, 10_000_000]),
          "values": (memory.run_values, [40]),
          "many": (snapshot.run_many, [10_000]),
          "load": (load.run, [300]),
          "big": (snapshot.run_big, [100_000_000])}
SLOW = {"big"}
SERVER_FLAGS = ["--innodb-buffer-pool-size=2G", "--max-allowed-packet=1G",
                "--innodb-log-file-size=1G"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", help="comma-separated sizes for every stage chosen "
                                        "(default: per stage); 2M and 500k are understood")
    parser.add_argument("--size", action="append", default=[], metavar="STAGE=N[,N]",
                        help="sizes for one stage (repeatable), e.g. --size binlog=500k")
    parser.add_argument("--stages", default=",".join(s for s in STAGES if s not in SLOW),
                        help=f"comma-separated, of {', '.join(STAGES)} (big is slow: only "
                             f"when named)")
    args = parser.parse_args()
    chosen = {stage: sizes for stage, (_, sizes) in STAGES.items()}
    if args.sizes:
        chosen = dict.fromkeys(chosen, numbers(args.sizes))
    for item in args.size:
        stage, _, sizes = item.partition("=")
        chosen[stage] = numbers(sizes)
    results = []
    print(f"machine: {machine_load()} at start", flush=True)
    with MariaDB(extra_flags=SERVER_FLAGS) as db:
        for stage in args.stages.split(","):
            run, _ = STAGES[stage]
            for size in chosen[stage]:
                print(f"{stage} {size:,} ... ({machine_load()})", flush=True)
                found = run(db, size)
                print_results([r for r in found if isinstance(r, Result)])
                results += found
    print(f"\nmachine: {machine_load()} at the end")
    print_results([r for r in results if isinstance(r, Result)])
    print_goals([r for r in results if isinstance(r, Goal)])


def numbers(text: str) -> list[int]:
    """'2M,500k,40' -> [2000000, 500000, 40]."""
    scale = {"k": 1_000, "M": 1_000_000}
    return [int(float(t[:-1]) * scale[t[-1]]) if t[-1] in scale else int(t)
            for t in text.split(",")]


def print_results(results: list[Result]) -> None:
    print(f"\n{'figure':<72} {'rows':>11} {'seconds':>8} {'rows/s':>11} {'ratio':>7}  "
          f"{'vs':<20} {'peak MB':>8}")
    for r in results:
        if not r.seconds:  # a note on the line above
            print(f"{r.stage}")
            continue
        ratio = f"{r.ratio:.2f}x" if r.ratio else ""
        peak = f"{r.peak_mb:.0f}" if r.peak_mb else ""
        print(f"{r.stage:<72} {r.rows:>11,} {r.seconds:>8.2f} {r.rate:>11,.0f} {ratio:>7}  "
              f"{r.baseline:<20} {peak:>8}", flush=True)


def print_goals(goals: list[Goal]) -> None:
    print(f"\n{'goal':<72} {'bound':>10} {'figure':>14}  met")
    for g in goals:
        met = {True: "yes", False: "NO", None: "-"}[g.met]
        print(f"{g.goal:<72} {g.bound:>10} {g.figure:>14}  {met}", flush=True)


if __name__ == "__main__":
    main()
