"""A damaged or newer checkpoint is a StateError naming the table, the entry and what to do;
never `unexpected JSONDecodeError/TypeError/DeltaError` (lake/state.py)."""
import glob
import json
import types

import pytest

from cdc_sql.cli import main
from cdc_sql.errors import StateError
from cdc_sql.lake.lake import Lake
from cdc_sql.lake.state import (FORMAT, CaptureEntry, Checkpoint, FormatEntry, SplitEntry,
                                State, decode_rows)


def row(kind: str, name: str, value, seq: int = 1) -> dict:
    return {"kind": kind, "name": name, "seq": seq,
            "value": value if isinstance(value, str) else json.dumps(value)}


@pytest.mark.parametrize("rows, fragment", [
    ([row("split", "shop.o#0", '{"source_table": "shop.o", "split_id": 0, "status": "do')],
     "damaged `split` entry `shop.o#0` (Unterminated string"),
    ([row("capture", "binlog", [1, 2])], "damaged `capture` entry `binlog` (a JSON list where "
                                         "a record belongs)"),
    ([row("split", "shop.o#0", {"source_table": "shop.o"})],
     "damaged `split` entry `shop.o#0` (missing 1 required positional argument: 'split_id')"),
    ([row("split", "shop.o#0", {"source_table": "shop.o", "split_id": "zero"})],
     "(`split_id` is \"zero\")"),
    ([row("table", "orders", {"applied": 17})], "damaged `table` entry `orders` (`applied`"),
    ([row("table", "orders", {"key": "id"})], "(`key` is \"id\")"),
    ([row("capture", "binlog", {"landing": [["a", 1]]})], "(`landing` is"),
    ([row("run", "last", "")], "damaged `run` entry `last` (Expecting value"),
    ([{"kind": None, "name": "x", "seq": 1, "value": "{}"}], "a row without its kind"),
    ([{"kind": "split", "name": "x", "seq": None, "value": "{}"}], "a row without its kind"),
])
def test_a_damaged_entry_is_named(rows, fragment):
    with pytest.raises(StateError) as info:
        decode_rows(rows, "/lake/_state/checkpoint")
    message = str(info.value)
    assert message.startswith("the checkpoint /lake/_state/checkpoint ")
    assert fragment in message and "RESTORE" in message and "\n" not in message, message


def test_good_entries_still_decode():
    split = SplitEntry("shop.o", 0, [1], None, "done", "a1", 3, "000001:000000000004:000000")
    checkpoint = decode_rows([row("split", split.name, split.to_json(), 1),
                              row("capture", "binlog", CaptureEntry("binlog.000001:4").to_json(),
                                  2),
                              row("someday", "x", {"new": "kind"}, 3)])  # a newer cdc-sql's
    assert checkpoint.splits("shop.o") == [split]
    assert checkpoint.capture.position == "binlog.000001:4"


def test_a_checkpoint_of_a_newer_format_is_refused():
    with pytest.raises(StateError, match=rf"written by a newer cdc-sql \(state format "
                                         rf"{FORMAT + 1}; this one reads format {FORMAT}"):
        decode_rows([row("format", "state", {"version": FORMAT + 1})])
    # an older cdc-sql writing after a newer one does not lower the format
    with pytest.raises(StateError, match="newer cdc-sql"):
        decode_rows([row("format", "state", {"version": FORMAT + 1}, 1),
                     row("format", "state", {"version": FORMAT}, 2)])
    assert decode_rows([row("format", "state", {"version": FORMAT})]).format == FORMAT
    assert Checkpoint().format == FORMAT


def local_state(root) -> State:
    return State(Lake.open(types.SimpleNamespace(mode="sail"), str(root)))


def test_every_run_records_the_state_format(tmp_path):
    state = local_state(tmp_path)
    state.write(CaptureEntry("binlog.000001:4"))
    state.write(CaptureEntry("binlog.000001:8"))
    checkpoint = local_state(tmp_path).load()
    assert checkpoint.entries[("format", "state")] == FormatEntry(FORMAT)
    assert checkpoint.capture.position == "binlog.000001:8"


def damage(root, how: str) -> None:
    logs = sorted(glob.glob(f"{root}/_state/checkpoint/_delta_log/*.json"))
    if how == "truncated log":
        text = open(logs[-1]).read()
        open(logs[-1], "w").write(text[: len(text) // 2])
    elif how == "reader feature":  # a commit by a newer Delta writer
        with open(logs[-1][:-25] + f"{len(logs):020d}.json", "w") as log:
            log.write(json.dumps({"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                                               "readerFeatures": ["fromTheFuture"],
                                               "writerFeatures": ["fromTheFuture"]}}) + "\n")
    elif how == "truncated file":
        (data,) = glob.glob(f"{root}/_state/checkpoint/*.parquet")[:1]
        content = open(data, "rb").read()
        open(data, "wb").write(content[: len(content) // 2])


@pytest.mark.parametrize("how, fragment", [
    ("truncated log", "Truncated record"),
    ("reader feature", "fromTheFuture"),
    ("truncated file", "Parquet magic bytes not found"),
])
def test_a_damaged_delta_log_or_file_is_a_state_error(tmp_path, capsys, how, fragment):
    local_state(tmp_path / "lake").write(CaptureEntry("binlog.000001:4"))
    damage(tmp_path / "lake", how)
    with pytest.raises(StateError) as info:
        local_state(tmp_path / "lake").load()
    assert fragment in str(info.value) and "RESTORE" in str(info.value)
    # through the command line: one line
    (tmp_path / "p.yaml").write_text(
        "name: p\nsource: {host: 127.0.0.1, port: 1, user: u}\ntarget: {path: lake}\n"
        "tables: [{name: o, source: shop.o}]\n")
    assert main(["status", str(tmp_path / "p.yaml")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"cdc-sql: the checkpoint {tmp_path}/lake/")
    assert "unexpected" not in err


def test_state_files_are_read_once_and_loads_follow_every_commit(tmp_path, monkeypatch):
    """A load reads only the data files it has not read before (Delta never changes one), and
    still sees every commit, another process's too, and a rewrite (compact) of the log."""
    import pyarrow.parquet as pq

    opened = []
    real = pq.ParquetFile
    monkeypatch.setattr(pq, "ParquetFile", lambda path, *a, **k: opened.append(path) or
                        real(path, *a, **k))
    tmp_path = tmp_path / "a lake"  # its files' URIs are escaped: read by their log paths
    state = local_state(tmp_path)
    state.write(CaptureEntry("binlog.000001:4"))
    assert state.load().capture.position == "binlog.000001:4"
    first = len(opened)
    assert first > 0  # read here, not by delta-rs
    assert state.load().capture.position == "binlog.000001:4" and len(opened) == first
    local_state(tmp_path).write(CaptureEntry("binlog.000001:8"))  # another writer's commit
    assert state.load().capture.position == "binlog.000001:8"
    assert len(opened) == first + 1  # the new file only
    state.compact()
    checkpoint = state.load()
    assert checkpoint.capture.position == "binlog.000001:8"
    assert checkpoint.entries == local_state(tmp_path).load().entries  # read afresh


def test_compaction_keeps_an_entry_another_command_appends_meanwhile(tmp_path, monkeypatch):
    """`maintain` rewrites the log to its newest entries while `cdc-sql resnapshot` (which
    takes no lease) may append a request: an entry committed between the compaction's read
    and its commit stays."""
    state = local_state(tmp_path)
    for position in ("binlog.000001:4", "binlog.000001:8"):
        state.write(CaptureEntry(position))
    from cdc_sql.lake.delta_rs_tables import DeltaRsTables

    real = DeltaRsTables.read_arrow

    def read_then_another_writes(self, *args, **kwargs):
        rows = real(self, *args, **kwargs)
        local_state(tmp_path).write(SplitEntry(source_table="db.t", split_id=0))  # another
        return rows

    monkeypatch.setattr(DeltaRsTables, "read_arrow", read_then_another_writes)
    assert state.compact() == 1  # the older capture entry
    monkeypatch.undo()
    checkpoint = local_state(tmp_path).load()
    assert checkpoint.capture.position == "binlog.000001:8"
    assert [(s.source_table, s.split_id) for s in checkpoint.all_splits()] == [("db.t", 0)]


def test_a_run_compacts_the_log_once_enough_rows_are_superseded(tmp_path, monkeypatch):
    """Every state commit adds rows each load reads, and a file: a run compacts the log
    once COMPACT_AT rows are superseded, counted from its load and
    kept by every write (new names supersede nothing)."""
    from cdc_sql.lake import state as state_module

    monkeypatch.setattr(state_module, "COMPACT_AT", 3)
    state = local_state(tmp_path)
    assert state.compact_if_due() == 0  # not loaded: nothing known, nothing done
    state.load()
    state.write(CaptureEntry("binlog.000001:4"), SplitEntry(source_table="db.t", split_id=0))
    state.write(SplitEntry(source_table="db.t", split_id=1))
    for position in (8, 12):
        state.write(CaptureEntry(f"binlog.000001:{position}"))
    assert state.superseded == 2 and state.compact_if_due() == 0
    state.write(CaptureEntry("binlog.000001:16"))
    assert state.compact_if_due() == 3  # the three older capture entries
    assert state.superseded == 0 and state.compact_if_due() == 0
    checkpoint = state.load()
    assert checkpoint.capture.position == "binlog.000001:16"
    assert len(checkpoint.all_splits()) == 2

    state.write(CaptureEntry("binlog.000001:20"))
    again = local_state(tmp_path)  # the next run counts what the log holds
    again.load()
    assert again.superseded == 1


@pytest.mark.parametrize("superseded, due", [(0, False), (1, False), (399, False),
                                             (400, True), (10**6, True)])
def test_compaction_is_due_from_COMPACT_AT_superseded_rows(superseded, due):
    from cdc_sql.lake.state import compaction_due

    assert compaction_due(superseded) is due


def test_resnapshot_requests_are_the_newest_of_each_table():
    """Every table's window asks for the pending re-snapshot requests (indexed as entries come:
    a scan of every entry per table was quadratic in the table count): the newest entry of
    each table, whether it came with the checkpoint or was added later."""
    from cdc_sql import resnapshot
    from cdc_sql.lake.state import ResnapshotEntry

    asked = ResnapshotEntry(source_table="db.a", reason="asked")
    checkpoint = Checkpoint({(e.kind, e.name): e for e in
                             (asked, ResnapshotEntry(source_table="db.b", start="x"),
                              SplitEntry(source_table="db.a", split_id=0))})
    assert sorted(e.name for e in checkpoint.resnapshots()) == ["db.a", "db.b"]
    assert resnapshot.requested(checkpoint) == {"db.a"}
    checkpoint.add(ResnapshotEntry(source_table="db.a", start="y"))  # prepared now
    assert resnapshot.requested(checkpoint) == set()
    assert [e.start for e in checkpoint.resnapshots() if e.name == "db.a"] == ["y"]
