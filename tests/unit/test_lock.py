"""The target lock: local targets (plain paths, file://) by flock; object stores by a lease
(its rules here; against the emulators in tests/integration/test_object_stores.py)."""
import datetime as dt

import pytest

from cdc_sql.errors import StateError
from cdc_sql.lock import age, holder, standing, target_lock


def test_a_local_target_is_locked_once(tmp_path):
    for root in (str(tmp_path / "a"), f"file://{tmp_path / 'b'}"):
        with target_lock(root, "run"):
            with pytest.raises(StateError, match="another cdc-sql process"):
                with target_lock(root, "maintain"):
                    pass
        assert (tmp_path / root.rsplit("/", 1)[-1] / "_lock").exists()


@pytest.mark.parametrize("root", ["dbfs:/mnt/lake", "hdfs://nn/lake"])
def test_a_target_only_the_engine_reaches_is_not_locked_here(root, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with target_lock(root, "run"):
        with target_lock(root, "run"):  # nothing to hold: scheduling keeps runs apart
            pass
    assert not list(tmp_path.iterdir())


T0 = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.timezone.utc)


def lease(renewed: dt.datetime | None = None, **more) -> dict:
    record = {"pid": 1, "host": "h", "command": "run", "since": "s", "lease_seconds": 60, **more}
    if renewed is not None:
        record["renewed"] = renewed.isoformat()
    return record


@pytest.mark.parametrize("seconds, expected", [(0, "live"), (39.9, "live"), (40, "silent"),
                                               (59.9, "silent"), (60, "expired"),
                                               (3600, "expired")])
def test_a_lease_is_live_until_two_renewals_are_missed_and_expires_after_its_time(
        seconds, expected):
    assert standing(lease(T0), T0, T0 + dt.timedelta(seconds=seconds)) == expected


def test_an_ended_lease_is_free_at_once():
    assert standing(lease(T0, ended=True), T0, T0) == "ended"


def test_the_later_of_the_stores_time_and_the_holders_counts():
    """S3 keeps last-modified in whole seconds; a holder's clock may run slow: neither makes a
    live lease look old."""
    rounded = T0.replace(second=0)
    assert age(lease(T0 + dt.timedelta(seconds=0.9)), rounded, T0 + dt.timedelta(seconds=1)) \
        == pytest.approx(0.1)
    slow_holder = lease(T0 - dt.timedelta(seconds=50))
    assert standing(slow_holder, T0, T0 + dt.timedelta(seconds=5)) == "live"
    assert age(lease(), T0, T0 + dt.timedelta(seconds=7)) == 7  # no `renewed`: the store's


def test_the_holder_is_named_or_unknown():
    assert holder(b'{"command": "run", "pid": 7, "host": "h", "since": "t"}') == \
        "`run`, pid 7 on h since t"
    assert holder(b"garbage") == holder(b"[1]") == "holder unknown"
