"""Resolved GTID watermarks are committed with the capture position they were found at."""
from cdc_sql.capture import Capture, Pass
from cdc_sql.lake.state import CaptureEntry, SplitEntry
from cdc_sql.source.binlog_rows import Batch
from cdc_sql.source.gtid import GtidSet, GtidWatermarks, MariaGtidState
from cdc_sql.source.offsets import Position

U = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


class Recorder:
    def __init__(self):
        self.writes = []

    def write(self, *entries):
        self.writes.append(entries)

    def compact_if_due(self):
        return 0


class Reader:
    """What Capture.flush asks of a binlog reader, after a batch without row changes."""

    def __init__(self, position):
        self.position, self.in_transaction, self.by_gtid = position, False, False
        self.gtid_state = MariaGtidState()
        self.bypassed, self.held_state = [], {}

    def take(self):
        return Batch()


def test_flush_commits_resolved_watermarks_with_the_position():
    state = Recorder()
    capture = Capture(None, state, None, [], mariadb=False, matches=None)
    capture.committed = CaptureEntry(position="binlog.000004:4")
    pending = {"d.t#0": SplitEntry("d.t", 0, status="done", watermark_gtid=f"{U}:1-3"),
               "d.t#1": SplitEntry("d.t", 1, status="done", watermark_gtid=f"{U}:1-9")}
    marks = GtidWatermarks({n: GtidSet.parse(s.watermark_gtid) for n, s in pending.items()})
    for n in range(1, 6):
        marks.observe(f"{U}:{n}", Position("binlog.000004", 100 * n))
    capture.flush(Reader(Position("binlog.000004", 777)), None, pending, marks, Pass())
    capture.wait()
    (entries,) = state.writes
    assert entries[0] == CaptureEntry(position="binlog.000004:777", source_time=None)
    assert entries[1] == SplitEntry("d.t", 0, status="done", watermark_gtid=f"{U}:1-3",
                                    watermark=Position("binlog.000004", 400).offset.text)
    assert len(entries) == 2  # d.t#1 is not resolved yet: all five transactions are in its set
    capture.flush(Reader(Position("binlog.000004", 800)), None, pending, marks, Pass())
    capture.wait()
    assert len(state.writes[1]) == 1  # nothing resolved twice
