"""The planner's rules (planner.py) and the re-snapshot decisions (resnapshot.py): pure
functions of the checkpoint."""
from hypothesis import given, strategies as st

from cdc_sql import resnapshot
from cdc_sql.lake.state import (CaptureEntry, Checkpoint, ResnapshotEntry, SplitEntry,
                                TableEntry)
from cdc_sql.planner import chain_merge, next_window
from cdc_sql.source.offsets import Offset
from cdc_sql.source.splits import Split
from cdc_sql.window import SplitRef, Window


def at(n: int) -> str:
    return Offset(1, n, 0).text


def split(i: int, watermark: int | None, table: str = "db.t", status: str = "done") -> SplitEntry:
    return SplitEntry(table, i, status=status, attempt=f"a{i}",
                      watermark=at(watermark) if watermark is not None else "")


def capture(n: int) -> CaptureEntry:
    return CaptureEntry(position=f"binlog.000001:{n}")


marks = st.lists(st.integers(10, 500), min_size=1, max_size=5)


@given(marks=marks, captured=st.integers(0, 600))
def test_the_first_window_waits_for_every_watermark(marks, captured):
    splits = [split(i, m) for i, m in enumerate(marks)]
    window = next_window(None, splits, capture(captured))
    if captured < max(marks):
        assert window is None
    else:
        assert window.first and window.after == "" and window.upto == at(captured)
        assert [s.watermark for s in window.splits["db.t"]] == [at(m) for m in marks]


@given(marks=marks, captured=st.integers(0, 600), start=st.integers(1, 9),
       unfinished=st.booleans())
def test_a_resnapshot_waits_then_replaces_from_its_start(marks, captured, start, unfinished):
    entry = TableEntry("t", applied=at(5), snapshot_merged=True, resnapshot=at(start))
    splits = [split(i, m) for i, m in enumerate(marks)]
    if unfinished:
        splits.append(split(len(marks), None, status="planned"))
    window = next_window(entry, splits, capture(captured), idle=True)
    if unfinished or captured < max(marks):
        assert window is None  # silver stays as it stood meanwhile
    else:
        assert window.replace and not window.first and not window.idle
        assert (window.after, window.upto) == (at(start), at(captured))
        assert len(window.splits["db.t"]) == len(marks)


def test_later_windows_take_new_splits_once_capture_passed_them():
    entry = TableEntry("t", applied=at(100), snapshot_merged=True)
    old, new = split(0, 50), split(0, 300, table="db.t2")
    assert next_window(entry, [old, new], capture(200)) is None
    window = next_window(entry, [old, new], capture(400))
    assert window.splits == {"db.t2": (SplitRef(0, "a0", at(300)),)} and window.after == at(100)
    assert next_window(entry, [old], capture(400), idle=True).idle


def checkpoint(*entries) -> Checkpoint:
    found = Checkpoint()
    for entry in entries:
        found.add(entry)
    return found


def test_closure_takes_every_silver_table_sharing_a_source():
    sources = {"a": ["db.x"], "b": ["db.x", "db.y"], "c": ["db.y"], "d": ["db.z"]}
    assert resnapshot.closure(["a"], sources) == (["a", "b", "c"], ["db.x", "db.y"])
    assert resnapshot.closure(["d"], sources) == (["d"], ["db.z"])


def test_closure_takes_the_children_a_parent_cascades_into_but_not_the_other_way():
    sources = {"parent": ["db.p"], "child": ["db.c"], "other": ["db.o"]}
    parents = {"child": ["db.p"]}
    assert resnapshot.closure(["parent"], sources, parents) == \
        (["child", "parent"], ["db.c", "db.p"])
    assert resnapshot.closure(["child"], sources, parents) == (["child"], ["db.c"])


def test_a_child_needs_its_parents_changes_from_its_own_applied_offset():
    state = checkpoint(TableEntry("parent", applied=at(50), snapshot_merged=True),
                       TableEntry("child", applied=at(20), snapshot_merged=True))
    sources = {"parent": ["db.p"], "child": ["db.c"]}
    parents = {"child": ["db.p"]}
    assert resnapshot.needed_from(state, sources, parents) == {"db.p": at(20), "db.c": at(20)}
    assert resnapshot.affected_by_purge(state, sources, at(30), parents) == ["db.c", "db.p"]
    assert resnapshot.affected_by_purge(state, sources, at(30)) == ["db.c"]


def test_prepared_plans_retires_marks_and_starts():
    state = checkpoint(split(0, 10), split(1, 20), split(2, 30),
                       TableEntry("t", applied=at(40), snapshot_merged=True),
                       TableEntry("fresh"),  # not merged yet: its first batch reads the splits
                       ResnapshotEntry("db.t", reason="asked"))
    new = [Split("db.t", 0, None, [5]), Split("db.t", 1, [5], None)]
    entries = resnapshot.prepared(state, {"db.t": new}, at(90), ["t", "fresh"])
    for entry in entries:
        state.add(entry)
    assert [(s.split_id, s.status) for s in state.splits("db.t")] == [(0, "planned"),
                                                                      (1, "planned")]
    assert state.table("t").resnapshot == at(90) and not state.table("fresh").resnapshot
    assert [e.start for e in state.resnapshots()] == [at(90)]
    assert not resnapshot.pending(state)


def test_a_purge_rereads_only_tables_that_needed_the_purged_part():
    sources = {"merged": ["db.m"], "behind": ["db.b"], "again": ["db.r"], "new": ["db.n"],
               "unread": ["db.u"], "unresolved": ["db.g"], "asked": ["db.q"],
               "shards": ["db.s1", "db.s2"]}
    state = checkpoint(
        TableEntry("merged", applied=at(100), snapshot_merged=True),
        TableEntry("behind", applied=at(10), snapshot_merged=True),
        TableEntry("again", applied=at(10), snapshot_merged=True, resnapshot=at(300)),
        split(0, 400, table="db.n"),                      # first snapshot read past the purge
        split(0, None, table="db.u", status="planned"),   # not read yet: read after it
        split(0, None, table="db.g"),                     # a GTID watermark not resolved yet
        ResnapshotEntry("db.q"),                          # already asked for
        split(0, 100, table="db.s1"), split(0, 400, table="db.s2"))  # one shard needs it
    oldest = at(200)
    assert resnapshot.affected_by_purge(state, sources, oldest) == [  # its silver as a whole
        "db.b", "db.g", "db.m", "db.s1", "db.s2"]
    assert resnapshot.purged("binlog.000003", "binlog.000004")
    assert not resnapshot.purged("binlog.000004", "binlog.000004")


def test_a_chain_merges_together_waits_together_or_apart_when_a_window_starts_too_early():
    def member(source, parents, window=None, applied=None):
        return (source, parents, window, applied)

    both = [member("db.c", ("db.a",), Window(at(10), at(20))),
            member("db.g", ("db.c",), Window(at(10), at(20)))]
    assert chain_merge(both) == "together"
    # a grandchild re-snapshotted since S: its parent's moves from P on cover it
    assert chain_merge([both[0], member("db.g", ("db.c",), Window(at(15), at(20)))]) == \
        "together"
    # a grandchild waiting for its snapshot: its parent waits with it
    assert chain_merge([both[0], member("db.g", ("db.c",))]) == "wait"
    assert chain_merge([member("db.c", ("db.a",), applied=at(20)),
                        member("db.g", ("db.c",), applied=at(20))]) == "wait"  # nothing to do
    # the parent merged past where the grandchild starts (it was added later): apart
    assert chain_merge([member("db.c", ("db.a",), applied=at(20)),
                        member("db.g", ("db.c",), Window(at(5), at(20)))]) == "apart"
    assert chain_merge([member("db.c", ("db.a",), Window(at(12), at(20))),
                        member("db.g", ("db.c",), Window(at(10), at(20)))]) == "apart"
    # a grandchild caught up while its parent has changes: the parent goes on
    assert chain_merge([member("db.c", ("db.a",), Window(at(10), at(20))),
                        member("db.g", ("db.c",), applied=at(20))]) == "together"


def ranged(i: int, watermark: int | None, status: str = "done") -> SplitEntry:
    return SplitEntry("db.t", i, status=status, attempt=f"r{i}", predicate="id < 10",
                      watermark=at(watermark) if watermark is not None else "",
                      read_at="2026-11-26T05:00:00+00:00")


@given(read=st.integers(100, 300), captured=st.integers(100, 400),
       merged=st.integers(-1, 3), unfinished=st.booleans())
def test_a_range_reread_waits_then_joins_one_window_even_at_the_applied_offset(
        read, captured, merged, unfinished):
    """A range re-read (resnapshot --where) is read after it is asked for, so its watermark
    is at or past the applied offset: the table waits while it is unread, then merges it once
    capture passed it, even when nothing changed since (watermark = applied = capture); the
    `ranged` mark, not the offsets, says it is merged."""
    entry = TableEntry("t", applied=at(100), snapshot_merged=True, ranged=merged)
    regular = [split(i, 50) for i in range(3)]
    split_ = ranged(3, None, status="planned") if unfinished else ranged(3, read)
    window = next_window(entry, [*regular, split_], capture(captured), idle=True)
    if merged >= 3:  # merged already: an ordinary window, or none
        assert window is None or not window.ranges
    elif unfinished or captured < read:
        assert window is None
    else:
        after = Offset(1, read, 1).text  # just after W: over silver's rows at W itself
        assert window.ranges == (("db.t", "id < 10", after, "2026-11-26T05:00:00+00:00"),) \
            and window.ranged == 3
        assert window.splits == {"db.t": (SplitRef(3, "r3", after),)} and not window.idle
        assert (window.after, window.upto) == (at(100), at(captured))


def test_a_range_reread_stays_out_of_first_windows_and_of_tables_past_it():
    splits = [split(0, 50), ranged(1, 80)]
    first = next_window(None, splits, capture(90))
    assert first.first and first.splits == {"db.t": (SplitRef(0, "a0", at(50)),)} and not first.ranges
    later = TableEntry("t", applied=at(90), snapshot_merged=True)  # a table created after it
    assert next_window(later, splits, capture(95)).ranges == ()


def test_a_range_request_is_refused_while_another_is_unmerged():
    from cdc_sql.config.model import Table
    from cdc_sql.lake.silver.plan import plan_silver
    from cdc_sql.source.schema import Column, SourceTable

    source = SourceTable("db", "t", (Column("id", "int", "int", 10, 0, None, None),
                                     Column("v", "int", "int", 10, 0, None, None)), ("id",))
    plain = plan_silver(Table(name="t", source="db.t"), [source], "p.yaml", 0)
    renamed = plan_silver(Table(name="r", source="db.t", projection="SELECT id AS order_id, v "
                                                                    "FROM t"), [source], "p.yaml", 1)
    merged = TableEntry("t", applied=at(100), snapshot_merged=True)
    state = checkpoint(merged, split(0, 50))
    assert resnapshot.range_refusal(state, "db.t", [plain], {"id"}) == ""
    assert "does not hold the key column `id` as it is" in \
        resnapshot.range_refusal(state, "db.t", [plain, renamed], {"id"})
    assert "not merged yet" in resnapshot.range_refusal(
        checkpoint(TableEntry("t"), split(0, 50)), "db.t", [plain], {"id"})
    request = resnapshot.range_request(state, "db.t", "id < 10")
    assert (request.split_id, request.status, request.predicate) == (1, "planned", "id < 10")
    state.add(request)
    assert "is not merged yet: run the pipeline first" in \
        resnapshot.range_refusal(state, "db.t", [plain], {"id"})
    state.add(ranged(1, 120))
    assert "is not merged yet" in resnapshot.range_refusal(state, "db.t", [plain], {"id"})
    state.add(TableEntry("t", applied=at(130), snapshot_merged=True, ranged=1))
    assert resnapshot.range_refusal(state, "db.t", [plain], {"id"}) == ""
    assert resnapshot.range_request(state, "db.t", "id = 3").split_id == 2
