"""When a run maintains the target itself (ops/maintain.due): target.maintain_every_hours after
the last maintenance, or after the first run that found none."""
import datetime as dt

import pytest

from cdc_sql.lake.state import MaintainEntry
from cdc_sql.ops.maintain import due

NOW = dt.datetime(2026, 11, 26, 12, tzinfo=dt.timezone.utc)


def ago(hours: float) -> MaintainEntry:
    return MaintainEntry(at=(NOW - dt.timedelta(hours=hours)).isoformat(timespec="seconds"))


@pytest.mark.parametrize("last, every_hours, expected", [
    (ago(25), 24, True), (ago(24), 24, True), (ago(23.9), 24, False),
    (ago(1000), 0, False),  # 0: only `cdc-sql maintain`
    (None, 24, False),  # a run writes the entry the time is counted from
    (MaintainEntry(at="2026-11-24T12:00:00"), 24, True),  # no zone: UTC
    (MaintainEntry(at="yesterday"), 24, True),  # not a time: a maintenance writes one
    (ago(-5), 24, False),  # another host's clock ahead of this one
])
def test_maintenance_is_due_every_maintain_every_hours(last, every_hours, expected):
    assert due(last, every_hours, NOW) is expected
