"""Resuming capture on another server: the decisions (source/failover.py)."""
import pytest
from hypothesis import given, strategies as st

from cdc_sql.errors import SourceError
from cdc_sql.source import failover
from cdc_sql.source.offsets import Offset, Position


def test_the_same_server_with_the_same_gtid_there_resumes_by_position():
    resume = failover.decide("server_id=1", "0-1-50", "binlog.000003:400", "server_id=1",
                             "0-1-50", mariadb=True)
    assert not resume.by_gtid


def test_another_server_resumes_by_gtid_and_says_why():
    resume = failover.decide("server_id=1", "0-1-50", "binlog.000003:400", "server_id=2",
                             None, mariadb=True)
    assert resume.by_gtid and "server_id=2" in resume.reason and "server_id=1" in resume.reason


def test_the_same_server_whose_binlog_changed_at_the_position_resumes_by_gtid():
    """A binlog reset (or a server given the old one's id): file names and positions line up,
    the transactions there do not."""
    resume = failover.decide("server_id=1", "0-1-50", "binlog.000003:400", "server_id=1",
                             "0-1-12", mariadb=True)
    assert resume.by_gtid and "0-1-12" in resume.reason
    assert failover.decide("server_id=1", "0-1-50", "binlog.000003:400", "server_id=1", "",
                           mariadb=True).by_gtid  # no such place any more


def test_gtid_positions_compare_whatever_the_order_of_their_domains():
    assert not failover.decide("server_id=1", "1-1-5,0-1-50", "b.000001:4", "server_id=1",
                               "0-1-50,1-1-5", mariadb=True).by_gtid


def test_a_state_from_before_servers_were_recorded_is_checked_by_its_gtid():
    assert not failover.decide("", "0-1-50", "b.000001:4", "server_id=1", "0-1-50",
                               mariadb=True).by_gtid
    assert failover.decide("", "0-1-50", "b.000001:4", "server_id=1", "0-1-9",
                           mariadb=True).by_gtid


@pytest.mark.parametrize("gtid, mariadb, says", [
    ("", True, "No GTID position was recorded"),
    ("", False, "needs gtid_mode=ON"),
])
def test_without_a_gtid_to_resume_from_another_server_stops(gtid, mariadb, says):
    with pytest.raises(SourceError) as error:
        failover.decide("server_id=1", gtid, "binlog.000003:400", "server_id=2", None, mariadb)
    assert says in str(error.value) and "resnapshot" in str(error.value)


def test_a_server_that_lacks_captured_transactions_is_behind():
    assert failover.missing("0-1-150,1-3-7", "0-2-160,1-3-7") == []
    assert failover.missing("0-1-150,1-3-7", "0-1-120,1-3-7") == ["0-1-150"]
    assert failover.missing("0-1-150,1-3-7", "0-1-150") == ["1-3-7"]
    with pytest.raises(SourceError, match=r"captured up to 0-1-150.*reaches 0-1-120.*behind"):
        failover.check_not_behind("0-1-150", "0-1-120", "server_id=2")
    failover.check_not_behind("0-1-150", "0-2-151", "server_id=2")


@given(st.integers(1, 5000), st.integers(1, 5000), st.integers(4, 10**9))
def test_every_offset_on_the_new_server_follows_the_last_captured(old_seq, first_new, pos):
    captured = Offset(old_seq, 10**11, 999_999)
    base = failover.file_base(captured, f"mariadb-bin.{first_new:06d}")
    assert base >= 0
    for seq in (first_new, first_new + 1):
        assert Position(f"mariadb-bin.{seq:06d}", pos, base).offset > captured


def test_positions_carry_their_base_through_text():
    position = Position("binlog.000002", 1234, 9)
    assert str(position) == "binlog.000002:1234@9"
    assert Position.parse(str(position)) == position
    assert position.offset == Offset(11, 1234, 0)
    assert str(Position("binlog.000002", 1234)) == "binlog.000002:1234"
    assert Position.parse("binlog.000002:1234").base == 0


def test_validate_says_whether_failover_is_possible():
    ready = failover.readiness(True, {"log_slave_updates": "ON", "gtid_strict_mode": "ON"})
    assert ready.startswith("possible by GTID") and "OFF" not in ready
    assert "log_slave_updates=OFF" in failover.readiness(True, {"log_slave_updates": "OFF",
                                                                "gtid_strict_mode": "ON"})
    assert "gtid_strict_mode=OFF" in failover.readiness(True, {"log_slave_updates": "ON"})
    assert failover.readiness(False, {"gtid_mode": "OFF"}).startswith("not possible")
    mysql = failover.readiness(False, {"gtid_mode": "ON", "log_replica_updates": "ON"})
    assert mysql.startswith("possible by GTID") and "OFF" not in mysql
    assert "log_slave_updates=OFF" in failover.readiness(False, {"gtid_mode": "ON"})


# -- MySQL: the executed GTID set -----------------------------------------------------------------
A = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
B = "4a8f2c10-0000-11e1-9e33-c80aa9429562"


def test_mysql_resumes_by_position_where_the_set_there_is_the_recorded_one():
    recorded = f"{A}:1-50,{B}:1-7"
    assert not failover.decide("server_uuid=x", recorded, "binlog.000003:400", "server_uuid=x",
                               f"{B.upper()}:1-3:4-7,\n{A}:1-50", mariadb=False).by_gtid
    reset = failover.decide("server_uuid=x", recorded, "binlog.000003:400", "server_uuid=x",
                            f"{A}:1-12", mariadb=False)
    assert reset.by_gtid and f"{A}:1-12" in reset.reason
    moved = failover.decide("server_uuid=x", recorded, "binlog.000003:400", "server_uuid=y",
                            None, mariadb=False)
    assert moved.by_gtid and "server_uuid=y" in moved.reason


def test_a_mysql_server_lacking_captured_transactions_is_behind():
    assert failover.missing(f"{A}:1-50", f"{A}:1-60,{B}:1-3", mariadb=False) == []
    assert failover.missing(f"{A}:1-50,{B}:1-7", f"{A}:1-20:30-50,{B}:1-6",
                            mariadb=False) == [f"{A}:21-29", f"{B}:7"]
    with pytest.raises(SourceError, match=rf"missing {A}:41-50\).*behind"):
        failover.check_not_behind(f"{A}:1-50", f"{A}:1-40", "server_uuid=y", mariadb=False)
    failover.check_not_behind(f"{A}:1-50", f"{A}:1-51", "server_uuid=y", mariadb=False)
