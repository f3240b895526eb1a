"""The CI chaos run: 30 kill points, MariaDB restarted mid-snapshot and mid-binlog, connections
killed server-side, binlog rotations, large and long transactions, a writer at 600
transactions/s; then silver equals the source row for row. The long run: `python -m
tests.chaos` (docs/operations.md, "Reliability")."""
import os

import pytest

from tests.chaos.harness import Plan, run_chaos

pytestmark = pytest.mark.integration


def test_chaos_run_loses_and_duplicates_nothing():
    plan = Plan(seed=int(os.environ.get("CDC_SQL_SEED", "1")), max_wait=4.5)
    report = run_chaos(plan)
    print(report.summary())
    assert report.differences == {}, report.summary() + str(report.differences)
    assert report.total_kills >= 30
    assert report.kills_in("snapshot") >= 1 and report.kills_in("binlog") >= 10
    assert report.faults["restart-crash"] and report.faults["restart-clean"]
    assert report.faults["kill-connections"] and report.faults["kill-connections-binlog"]
    assert report.stalled == [], report.summary()  # follow mode got over every disturbance
    assert report.recovered["restart-crash"] + report.recovered["restart-clean"] >= 1
    assert report.writer_rate >= 500, report.summary()
    assert report.large_transactions >= 3
