"""The long chaos run: `python -m tests.chaos [--kills 100] [--seed 7] ...` (see harness.py).
Prints the report; exits 1 when a table differs from the source."""
import argparse
import dataclasses
import sys

from tests.chaos.harness import Plan, run_chaos


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    defaults = Plan(seed=7, kills=100, rows=200_000, chunk_size=10_000)
    for item in dataclasses.fields(Plan):
        parser.add_argument(f"--{item.name.replace('_', '-')}", type=type(getattr(defaults, item.name)),
                            default=getattr(defaults, item.name))
    args = parser.parse_args()
    plan = Plan(**{item.name: getattr(args, item.name) for item in dataclasses.fields(Plan)})
    print(f"chaos run: {plan}", flush=True)
    report = run_chaos(plan, log=lambda line: print(line, flush=True))
    print(report.summary())
    print(report.verify_output)
    for name, difference in report.differences.items():
        print(f"DIFFERS: {name}: {difference}")
    return 1 if report.differences else 0


if __name__ == "__main__":
    sys.exit(main())
