"""The long chaos run: `python -m tests.chaos [--kills 200] [--seed N] ...` (see harness.py).
Prints the report; exits 1 when a table differs from the source."""
import argparse
import dataclasses
import sys

from tests.chaos.harness import Plan, run_chaos


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    defaults = Plan(kills=200, rows=300_000, accounts=50_000, chunk_size=5000, max_wait=10.0)
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
