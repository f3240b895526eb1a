"""Resolved GTID watermarks are committed with the capture position they were found at."""
from cdc_sql.config.model import Engine, Pipeline, Source, Table, Target
from cdc_sql.pipeline import Runner
from cdc_sql.source.gtid import GtidSet, GtidWatermarks
from cdc_sql.source.offsets import Position

U = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


class Recorder:
    def __init__(self):
        self.writes = []

    def write(self, *entries):
        self.writes.append(entries)


def test_flush_commits_resolved_watermarks_with_the_position():
    pipeline = Pipeline(name="p", source=Source(host="h", user="u"), target=Target(path="/tmp/x"),
                        tables=[Table(name="t", source="d.t")], engine=Engine())
    runner = Runner(pipeline, engine=None)
    runner.state = Recorder()
    pending = {"d.t#0": {"split_id": 0, "status": "done", "watermark": None,
                         "watermark_gtid": f"{U}:1-3"},
               "d.t#1": {"split_id": 1, "status": "done", "watermark": None,
                         "watermark_gtid": f"{U}:1-9"}}
    marks = GtidWatermarks({n: GtidSet.parse(s["watermark_gtid"]) for n, s in pending.items()})
    for n in range(1, 6):
        marks.observe(f"{U}:{n}", Position("binlog.000004", 100 * n))
    runner._flush([], Position("binlog.000004", 777), None, pending, marks)
    (entries,) = runner.state.writes
    assert entries[0] == ("capture", "binlog", {"position": "binlog.000004:777", "source_time": None})
    assert entries[1] == ("split", "d.t#0", {**pending["d.t#0"],
                                             "watermark": Position("binlog.000004", 400).offset.text})
    assert len(entries) == 2  # d.t#1 is not resolved yet: all five transactions are in its set
    runner._flush([], Position("binlog.000004", 800), None, pending, marks)
    assert len(runner.state.writes[1]) == 1  # nothing resolved twice
