"""Where capture resumes (source/failover.py's `plan`), as a pure function of what state recorded
and what the server says: never before a committed offset, by GTID wherever the recorded
position may mean something else, by position only where it is the place capture stopped."""
import pytest
from hypothesis import assume, given, strategies as st

from cdc_sql.errors import SourceError
from cdc_sql.source import failover
from cdc_sql.source.offsets import Offset, Position

SERVERS = ("server_id=1", "server_id=2", "server_id=3")


def binlog(seq: int) -> str:
    return f"mariadb-bin.{seq:06d}"


gtid_positions = st.lists(st.tuples(st.integers(0, 2), st.integers(1, 3), st.integers(1, 90)),
                          max_size=3, unique_by=lambda t: t[0]).map(
    lambda parts: ",".join(f"{d}-{s}-{n}" for d, s, n in parts))
positions = st.builds(lambda seq, pos, base: Position(binlog(seq), pos, base),
                      st.integers(1, 400), st.integers(4, 10**9), st.integers(0, 400))
recorded = st.builds(failover.Recorded, positions, st.sampled_from(("", *SERVERS)),
                     gtid_positions)


def outcome(*args):
    try:
        return failover.plan(*args)
    except SourceError as exc:
        return exc


@given(recorded, st.sampled_from(SERVERS), st.integers(1, 800),
       st.one_of(st.none(), gtid_positions))
def test_capture_never_resumes_before_a_committed_offset(saved, server, first, here):
    """By position: exactly the recorded one. By GTID: every offset of the new server's binlog
    follows the recorded one, whichever file the server finds the place in."""
    plan = outcome(saved, server, binlog(first), here, frozenset(), True)
    if isinstance(plan, SourceError):
        return
    assert plan.position == saved.position
    if plan.resume.by_gtid:
        for seq in (first, first + 1, first + 50):
            assert Position(binlog(seq), 4, plan.base).offset > saved.position.offset
    else:
        assert plan.base == saved.position.base  # the recorded offsets, numbered as before


@given(recorded, st.sampled_from(SERVERS), st.integers(1, 800),
       st.one_of(st.none(), gtid_positions))
def test_another_server_always_resumes_by_gtid_or_stops(saved, server, first, here):
    assume(saved.server and saved.server != server)
    plan = outcome(saved, server, binlog(first), here, frozenset(), True)
    if saved.gtid:
        assert plan.resume.by_gtid and server in plan.resume.reason
    else:
        assert isinstance(plan, SourceError) and "No GTID position was recorded" in str(plan)


@given(recorded, st.integers(1, 800), st.one_of(st.none(), gtid_positions))
def test_the_same_server_resumes_by_position_exactly_where_its_gtid_is_unchanged(saved, first,
                                                                               here):
    server = saved.server or SERVERS[0]
    plan = outcome(saved, server, binlog(first), here, frozenset(), True)
    unchanged = here is None or not saved.gtid or \
        failover.gtids(here, True) == failover.gtids(saved.gtid, True)
    if unchanged:
        assert not plan.resume.by_gtid and plan.position == saved.position
    elif saved.gtid:
        assert plan.resume.by_gtid  # a reset binlog: the place means other transactions


@given(recorded, st.sampled_from(SERVERS), st.integers(1, 800))
def test_the_gtid_there_is_asked_only_of_the_server_that_wrote_the_position(saved, server,
                                                                            first):
    asks = failover.wants_gtid_here(saved, server, binlog(first))
    if asks:
        assert saved.server in ("", server) and saved.gtid
        assert saved.position.file >= binlog(first)  # not purged: still this server's binlog
    if saved.server not in ("", server):
        assert not asks


@given(st.sets(st.sampled_from(("", *SERVERS))), st.sampled_from(SERVERS), st.booleans())
def test_before_capture_begins_the_snapshot_must_have_been_read_on_this_server(
        read_on, server, mariadb):
    plan = outcome(failover.Recorded(), server, binlog(1), None, frozenset(read_on), mariadb)
    if read_on - {"", server}:
        assert isinstance(plan, SourceError) and "the snapshot was read on" in str(plan)
    else:
        assert plan == failover.ResumePlan() and plan.base == 0 and not plan.by_gtid(None)


@given(st.lists(st.builds(Offset, st.integers(0, 900), st.integers(0, 10**11),
                          st.integers(0, 10**5)), max_size=5), st.integers(1, 800))
def test_capture_starting_over_numbers_its_offsets_after_everything_read(read, first):
    base = failover.restart_base(read, binlog(first))
    assert base >= 0
    assert all(Position(binlog(first), 4, base).offset > offset for offset in read)
    if not read:
        assert base == 0


@pytest.mark.parametrize("now, by_gtid", [(None, False), ("mariadb-bin.000007:120", True),
                                          ("mariadb-bin.000009:4", False)])
def test_by_gtid_lasts_until_a_place_on_this_server_is_recorded(now, by_gtid):
    plan = failover.ResumePlan(failover.Resume(True, "moved"),
                               Position.parse("mariadb-bin.000007:120"), 3)
    assert plan.by_gtid(now) is by_gtid
