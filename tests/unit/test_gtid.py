import struct

import pytest
from hypothesis import given, strategies as st

from cdc_sql.source import binlog_events as ev
from cdc_sql.source.binlog import gtid_state_of, gtids_before
from cdc_sql.source.binlog_events import Gtid
from cdc_sql.source.binlog_protocol import GtidStart, RawEvent, dump_command, encode_gtid_set
from cdc_sql.source.gtid import GtidSet, GtidWatermarks
from cdc_sql.source.offsets import Position

A = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
B = "4f22ab58-82db-22f2-af44-d91bb0530673"


def test_parse_and_membership():
    executed = GtidSet.parse(f"{A}:1-5:7,\n{B.upper()}:1-3")
    assert f"{A}:1" in executed and f"{A}:5" in executed and f"{A}:7" in executed
    assert f"{A}:6" not in executed and f"{A}:8" not in executed
    assert f"{B}:3" in executed and f"{B}:4" not in executed
    assert "00000000-0000-0000-0000-000000000000:1" not in executed
    assert f"{A}:1" not in GtidSet.parse("")


def test_malformed_set():
    with pytest.raises(ValueError):
        GtidSet.parse(A)


def test_resolution_is_the_first_transaction_outside_each_set():
    marks = GtidWatermarks({"s0": GtidSet.parse(f"{A}:1-3"), "s1": GtidSet.parse(f"{A}:1-5")})
    for n in range(1, 8):
        marks.observe(f"{A}:{n}", Position("binlog.000002", 100 * n))
    assert marks.resolved == {"s0": Position("binlog.000002", 400),
                              "s1": Position("binlog.000002", 600)}
    assert not marks.pending


def test_sets_covering_everything_read_resolve_at_the_end():
    marks = GtidWatermarks({"s0": GtidSet.parse(f"{A}:1-9")})
    marks.observe(f"{A}:1", Position("binlog.000001", 100))
    marks.finish(Position("binlog.000001", 900))
    assert marks.resolved == {"s0": Position("binlog.000001", 900)}


# -- set arithmetic, against Python sets of (uuid, n) ---------------------------------------------
members = st.sets(st.tuples(st.sampled_from([A, B]), st.integers(1, 40)), max_size=30)


def as_set(found: set[tuple[str, int]]) -> GtidSet:
    return GtidSet.of({u: [(n, n) for v, n in found if v == u] for u, _ in found})


def elements(gtids: GtidSet) -> set[tuple[str, int]]:
    return {(u, n) for u, ranges in gtids.intervals.items() for lo, hi in ranges
            for n in range(lo, hi + 1)}


@given(members, members)
def test_union_difference_and_subset_agree_with_sets(left, right):
    a, b = as_set(left), as_set(right)
    assert elements(a | b) == left | right
    assert elements(a - b) == left - right
    assert (a <= b) == (left <= right)
    assert bool(a) == bool(left)
    assert GtidSet.parse(str(a)) == a  # printed merged, read back equal
    assert all(hi + 1 < nxt for ranges in a.intervals.values()
               for (_, hi), (nxt, _) in zip(ranges, ranges[1:]))  # no touching intervals


@given(members, st.sampled_from([A, B]), st.integers(1, 50))
def test_a_committed_transaction_joins_the_set(found, uuid, n):
    after = as_set(found).advanced(Gtid(f"{uuid.upper()}:{n}", False, seq=n))
    assert elements(after) == found | {(uuid, n)}


# -- the set at a binlog position (MySQL has no BINLOG_GTID_POS) -----------------------------------
def raw(type_: int, log_pos: int, body: bytes = b"") -> RawEvent:
    return RawEvent(type_, 0, 1, log_pos, 0, memoryview(body))


def gtid_event(uuid: str, n: int, log_pos: int) -> RawEvent:
    return raw(ev.MYSQL_GTID, log_pos, b"\x01" + bytes.fromhex(uuid.replace("-", "")) +
               struct.pack("<q", n) + b"\x00" * 8)


@given(members)
def test_previous_gtids_read_back_what_the_dump_command_encodes(found):
    gtids = as_set(found)
    assert GtidSet.of(ev.parse_previous_gtids(memoryview(encode_gtid_set(str(gtids))))) == gtids


def test_the_set_at_a_position_is_the_file_head_and_the_transactions_before_it():
    head = raw(ev.MYSQL_PREVIOUS_GTIDS, 197, encode_gtid_set(f"{A}:1-10,{B}:1-3"))
    events = [raw(ev.ROTATE, 0, struct.pack("<Q", 4) + b"binlog.000007"),
              raw(ev.FORMAT_DESCRIPTION, 126), head,
              gtid_event(A, 11, 300), raw(ev.XID, 600),
              gtid_event(B, 4, 700), raw(ev.XID, 900),
              gtid_event(A, 12, 1000), raw(ev.XID, 1300),
              raw(ev.ROTATE, 1350, struct.pack("<Q", 4) + b"binlog.000008"),
              gtid_event(A, 13, 300)]
    at = lambda pos: str(gtids_before(iter(events), Position("binlog.000007", pos)))  # noqa: E731
    assert at(4) == at(197) == f"{A}:1-10,{B}:1-3"  # a GTID watermark's place: the file head
    assert at(600) == f"{A}:1-11,{B}:1-3"
    assert at(900) == f"{A}:1-11,{B}:1-4"
    assert at(1300) == at(1350) == f"{A}:1-12,{B}:1-4"  # the next file is not this one


def test_a_mysql_reader_tracks_the_set_only_from_a_recorded_one():
    assert str(gtid_state_of("", mariadb=False)) == ""
    assert str(gtid_state_of("", mariadb=False).advanced(Gtid(f"{A}:5", False, seq=5))) == ""
    state = gtid_state_of(f"{A}:1-4", mariadb=False).advanced(Gtid(f"{A}:5", False, seq=5))
    assert str(state) == f"{A}:1-5"


def test_mysql_is_asked_for_its_binlog_by_gtid_set():
    """COM_BINLOG_DUMP_GTID: flags, server_id, file name length 0, position 4, the set's size,
    the set (a count of UUIDs; per UUID its 16 bytes, a count of intervals, each half-open)."""
    command = dump_command(GtidStart(f"{A}:1-5:7", mariadb=False), 1, 6001)
    assert command[0] == 0x1E
    flags, server_id, name_length, pos, size = struct.unpack_from("<HIIQI", command, 1)
    assert (flags, server_id, name_length, pos) == (1 | 0x04, 6001, 0, 4)
    data = command[1 + 22:]
    assert size == len(data) == 8 + 16 + 8 + 2 * 16
    assert struct.unpack_from("<Q", data, 0) == (1,)
    assert data[8:24] == bytes.fromhex(A.replace("-", ""))
    assert struct.unpack_from("<Qqqqq", data, 24) == (2, 1, 6, 7, 8)
    by_position = dump_command(Position("binlog.000003", 400), 0, 6001)
    assert by_position == b"\x12" + struct.pack("<IHI", 400, 0, 6001) + b"binlog.000003"


class FakeStream:
    def __init__(self, events):
        self.events = events

    def __iter__(self):
        return iter(self.events)

    def close(self):
        pass


def test_a_mysql_reader_resuming_by_gtid_anchors_where_the_server_starts(monkeypatch):
    """After a failover: the stream starts at a file the new server picks; the reader's first
    place there is the end of that file's PREVIOUS_GTIDS event (numbered with `base`), and
    every transaction it reads joins the captured set."""
    from types import SimpleNamespace

    from cdc_sql.source import binlog

    events = [raw(ev.ROTATE, 0, struct.pack("<Q", 4) + b"binlog.000002"),
              raw(ev.FORMAT_DESCRIPTION, 126),
              raw(ev.MYSQL_PREVIOUS_GTIDS, 197, encode_gtid_set(f"{A}:1-50")),
              gtid_event(A, 51, 300), raw(ev.XID, 600)]
    monkeypatch.setattr(binlog, "BinlogStream", lambda *args, **kwargs: FakeStream(events[:3]))
    source = SimpleNamespace(server_id=6001)
    monkeypatch.setattr(binlog, "stream_settings", lambda source: {})
    old = Position("binlog.000009", 5000)
    reader = binlog.BinlogReader(source, [], old, None, mariadb=False, gtid_state=f"{A}:1-50",
                                 by_gtid=True, base=8)
    assert list(reader.read()) == []
    assert reader.position == Position("binlog.000002", 197, 8)  # no transaction yet
    monkeypatch.setattr(binlog, "BinlogStream", lambda *args, **kwargs: FakeStream(events))
    reader = binlog.BinlogReader(source, [], old, None, mariadb=False, gtid_state=f"{A}:1-50",
                                 by_gtid=True, base=8)
    assert list(reader.read()) == ["txn"]
    assert reader.position == Position("binlog.000002", 600, 8)
    assert reader.position.offset > old.offset
    assert str(reader.gtid_state) == f"{A}:1-51"
