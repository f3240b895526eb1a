"""lake/file_merge.py: a window of wide rows MERGEd by rewriting the files it touches, a row
group at a time, in one commit of cdc-sql's own (its equality with the engine's MERGE:
tests/property/test_merge_rules.py)."""
from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from hypothesis import given, strategies as st

from cdc_sql.lake import file_merge, parquet_files
from cdc_sql.lake.delta_rs_tables import DeltaRsTables
from cdc_sql.lake.tables import OWN_MERGE, operation

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string()), ("_cdc_offset", pa.string())])


def silver(path: str, files: list[list[tuple]]) -> None:
    """A table of `files`, each of (id, value, offset) rows."""
    batches = [pa.record_batch([pa.array(c, t.type) for c, t in zip(zip(*rows), SCHEMA)],
                               schema=SCHEMA) for rows in files]
    parquet_files.create_table(path, SCHEMA, [lambda b=b: [b] for b in batches])


def changes(rows: list[tuple]) -> pa.Table:
    """The last change per key: (id, value, offset, removal)."""
    ids, values, offsets, removes = zip(*rows)
    return pa.table({"id": pa.array(ids, pa.int64()), "v": values, "_cdc_offset": offsets,
                     "_cdc_remove": removes})


def rows_of(path: str) -> dict:
    table = DeltaTable(path).to_pyarrow_table()
    return {r["id"]: (r["v"], r["_cdc_offset"]) for r in table.to_pylist()}


def test_later_changes_replace_remove_and_insert_rows_in_one_commit(tmp_path, monkeypatch):
    path = str(tmp_path / "silver")
    monkeypatch.setattr(parquet_files, "ROW_GROUP_BYTES", 200)  # a few rows a row group
    monkeypatch.setattr(file_merge, "WHOLE_ROWS", -1)  # not merged whole
    silver(path, [[(i, "x" * 50, "b") for i in range(1, 11)], [(20, "y", "b"), (21, "y", "b")]])
    read = []
    real = pq.ParquetFile.read_row_group
    monkeypatch.setattr(pq.ParquetFile, "read_row_group",
                        lambda self, i, **kw: read.append(i) or real(self, i, **kw))
    window = changes([(2, "new", "c", False), (3, "old", "a", False), (4, "", "c", True),
                      (30, "ins", "c", False), (31, "", "c", True)])
    assert file_merge.merge(DeltaRsTables(), path, window, ["id"]) == 1  # not ids 20, 21's
    assert len(set(read)) > 1  # the rewritten file, a row group at a time
    want = {i: ("x" * 50, "b") for i in range(1, 11) if i != 4} | \
        {2: ("new", "c"), 20: ("y", "b"), 21: ("y", "b"), 30: ("ins", "c")}
    assert rows_of(path) == want
    table = DeltaTable(path)
    last = table.history(1)[0]
    assert operation(last["operation"], last.get("operationParameters"),
                     last.get("userMetadata")) == OWN_MERGE  # the hand-change check's own
    version = table.version()
    assert file_merge.merge(DeltaRsTables(), path, window, ["id"]) == 0  # a replay
    assert DeltaTable(path).version() == version and rows_of(path) == want


def test_only_numbers_bounds_skip_files():
    """Text statistics may be truncated (a file's max below its real highest key): a file is
    skipped by its bounds only for keys that are numbers."""
    ints = pa.chunked_array([[5, 7]], pa.int64())
    assert not pc.any(file_merge._held(ints, 10, 20)).as_py()
    assert file_merge._held(ints, 1, 5).to_pylist() == [True, False]
    text = pa.chunked_array([["abcdefgh-long-key"]], pa.string())
    assert file_merge._held(text, "a", "abcd") is None  # a truncated max: read it anyway
    assert file_merge._held(ints, None, 20) is None


def test_files_delta_rs_wrote_are_read_in_silvers_types(tmp_path):
    """delta-rs writes text as string_view in its files' Arrow schema, which Arrow's take
    has no kernel for: the files are read in silver's own types."""
    path = str(tmp_path / "silver")
    silver(path, [[(1, "a", "b"), (2, "b", "b"), (3, "c", "b")]])
    DeltaTable(path).merge(changes([(2, "x", "c", False)]).drop_columns("_cdc_remove"),
                           "s.id = t.id", source_alias="s", target_alias="t") \
        .when_matched_update_all().execute()  # the table's only file now delta-rs's
    window = changes([(1, "n1", "d", False), (3, "", "d", True), (4, "n4", "d", False)])
    assert file_merge.merge(DeltaRsTables(), path, window, ["id"]) == 1
    assert rows_of(path) == {1: ("n1", "d"), 2: ("x", "c"), 4: ("n4", "d")}


def test_row_groups_are_chosen_by_their_key_spans():
    spans = [(0, 9), (10, 19), (None, None), (20, 29)]
    assert file_merge.groups_meeting(spans, 10, 20) == [1, 2]  # no statistics: read
    assert file_merge.groups_meeting(spans, None, 5) == [0, 2]
    assert file_merge.groups_outside(spans, [(None, 10), (20, None)]) == [1, 2]
    assert file_merge.groups_outside(spans, [(5, 25)]) == [0, 2, 3]


def test_key_ranges_cut_evenly():
    assert file_merge.key_ranges(0, 299, 3) == [(None, 100), (100, 200), (200, None)]
    assert file_merge.key_ranges(5, 5, 8) == [(None, None)]  # one key: one range
    assert file_merge.reaches_past(0, 99, None, 100) is False
    assert file_merge.reaches_past(0, 100, None, 100) and file_merge.reaches_past(5, 9, 6, None)


@given(st.integers(-1000, 1000), st.integers(0, 2000), st.integers(1, 12))
def test_key_ranges_cover_every_key_once(low, width, parts):
    ranges = file_merge.key_ranges(low, low + width, parts)
    assert ranges[0][0] is None and ranges[-1][1] is None  # every key falls in one
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))  # contiguous, in order
    assert all(low < a[1] <= low + width for a in ranges[:-1])
    assert len(ranges) <= parts


@given(st.lists(st.lists(st.integers(0, 60), min_size=1, max_size=8, unique=True),
                min_size=1, max_size=4),
       st.lists(st.tuples(st.integers(0, 70), st.sampled_from(["a", "c"]), st.booleans()),
                max_size=25, unique_by=lambda c: c[0]),
       st.integers(1, 6), st.sampled_from([2, 3, 128 * 1024]))
def test_files_across_key_ranges_are_rewritten_in_parts(tmp_path_factory, files, window, parts,
                                                        group_rows):
    """Files of any key spans (overlapping, reaching across cuts; rows in any order, row
    groups of a few rows, whose statistics say which a part reads) merged in key ranges, one
    part per range: the same rows as one MERGE of the whole window."""
    taken, spans = set(), []
    for keys in files:  # a key in one file only
        spans.append([k for k in keys if k not in taken])
        taken |= set(spans[-1])
    spans = [keys for keys in spans if keys]
    path = str(tmp_path_factory.mktemp("parts") / "silver")
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(parquet_files, "ROW_GROUP_ROWS", group_rows)
        silver(path, [[(k, f"old{k}", "b") for k in keys] for keys in spans])
    want = {k: (f"old{k}", "b") for keys in spans for k in keys}
    for k, offset, remove in window:
        if k in want and offset > want[k][1]:
            want.pop(k)
        if (k not in taken or offset > "b") and not remove:
            want[k] = (f"new{k}", offset)
    tables = DeltaRsTables()
    on_file = tables.data_files(path, "id")
    rewrite = file_merge.Rewrite(tables, path, ["id"])
    for start, stop in file_merge.key_ranges(0, 70, parts):
        part = [c for c in window if (start is None or c[0] >= start) and
                (stop is None or c[0] < stop)]
        if part:
            rewrite.add(changes([(k, "" if remove else f"new{k}", offset, remove)
                                 for k, offset, remove in part]),
                        file_merge.within_range(on_file, start, stop), (start, stop))
    rewrite.commit()
    assert rows_of(path) == want


def test_a_merge_in_parts_is_one_commit_and_an_abandoned_one_leaves_no_file(tmp_path):
    path = str(tmp_path / "silver")
    silver(path, [[(i, "a", "b") for i in range(0, 10)], [(i, "a", "b") for i in range(10, 20)]])
    tables, version = DeltaRsTables(), DeltaTable(path).version()
    files = tables.data_files(path, "id")
    on_disk = set(os.listdir(path))
    rewrite = file_merge.Rewrite(tables, path, ["id"])
    rewrite.add(changes([(3, "new", "c", False)]), file_merge.within_range(files, None, 10))
    rewrite.add(changes([(15, "", "c", True), (25, "ins", "c", False)]),
                file_merge.within_range(files, 10, None))
    rewrite.abandon()  # killed before its commit: nothing stays, nothing changed
    assert set(os.listdir(path)) == on_disk and DeltaTable(path).version() == version
    rewrite = file_merge.Rewrite(tables, path, ["id"])
    rewrite.add(changes([(3, "new", "c", False)]), file_merge.within_range(files, None, 10))
    rewrite.add(changes([(15, "", "c", True), (25, "ins", "c", False)]),
                file_merge.within_range(files, 10, None))
    assert rewrite.commit() == 2 and DeltaTable(path).version() == version + 1
    want = {i: ("a", "b") for i in range(20) if i != 15} | {3: ("new", "c"), 25: ("ins", "c")}
    assert rows_of(path) == want


def test_a_small_silver_is_merged_whole_into_one_file(tmp_path, monkeypatch):
    """Every file of a silver of a few rows read once and replaced by one file of the rows
    the MERGE leaves, in one commit of cdc-sql's own; a replay writes nothing."""
    path = str(tmp_path / "silver")
    silver(path, [[(i, "x", "b") for i in range(1, 11)], [(20, "y", "b"), (21, "y", "b")]])
    whole = []
    real = file_merge._merge_whole
    monkeypatch.setattr(file_merge, "_merge_whole", lambda *a: whole.append(real(*a)) or whole[-1])
    window = changes([(2, "new", "c", False), (3, "old", "a", False), (4, "", "c", True),
                      (30, "ins", "c", False), (31, "", "c", True)])
    assert file_merge.merge(DeltaRsTables(), path, window, ["id"]) == 2 and whole == [2]
    want = {i: ("x", "b") for i in range(1, 11) if i != 4} | \
        {2: ("new", "c"), 20: ("y", "b"), 21: ("y", "b"), 30: ("ins", "c")}
    assert rows_of(path) == want and len(DeltaTable(path).file_uris()) == 1
    last = DeltaTable(path).history(1)[0]
    assert operation(last["operation"], last.get("operationParameters"),
                     last.get("userMetadata")) == OWN_MERGE
    version = DeltaTable(path).version()
    assert file_merge.merge(DeltaRsTables(), path, window, ["id"]) == 0  # a replay
    assert DeltaTable(path).version() == version and rows_of(path) == want


def test_a_silver_not_merged_whole_is_rewritten_by_its_files(tmp_path, monkeypatch):
    """Too many rows, a key held twice: `Rewrite`'s, as ever."""
    path = str(tmp_path / "silver")
    silver(path, [[(1, "x", "b"), (2, "x", "b")], [(2, "y", "b")]])  # key 2 twice
    assert file_merge._merge_whole(DeltaRsTables(), path, changes([(2, "z", "c", False)]),
                                   ["id"]) is None
    other = str(tmp_path / "other")
    silver(other, [[(i, "x", "b") for i in range(10)]])
    monkeypatch.setattr(file_merge, "WHOLE_ROWS", 9)
    assert file_merge._merge_whole(DeltaRsTables(), other, changes([(2, "z", "c", False)]),
                                   ["id"]) is None
    assert file_merge.merge(DeltaRsTables(), other, changes([(2, "z", "c", False)]),
                            ["id"]) == 1 and rows_of(other)[2] == ("z", "c")
    monkeypatch.setattr(file_merge, "WHOLE_ROWS", 1)  # silver fits, the window does not
    monkeypatch.setattr(file_merge, "_merge_whole", lambda *_: pytest.fail("merged whole"))
    file_merge.merge(DeltaRsTables(), path, changes([(1, "z", "d", False), (9, "n", "d", False)]),
                     ["id"])


KEYED = pa.schema([("k", pa.int32()), ("s", pa.string()), ("v", pa.string()),
                   ("_cdc_offset", pa.string())])
KEYS = st.tuples(st.integers(0, 4), st.sampled_from(["a", "b", "ä", None]))
OFFSETS = st.sampled_from(["a", "b", "c", None])


@given(st.lists(st.lists(st.tuples(KEYS, OFFSETS), max_size=4), max_size=3),
       st.dictionaries(KEYS, st.tuples(OFFSETS, st.sampled_from([True, False, None])),
                       max_size=8))
def test_merged_whole_is_what_a_rewrite_of_files_leaves(tmp_path_factory, files, window):
    """Over random silvers (several files, a two-column key with NULLs, NULL offsets) and
    windows (removals, NULL flags), the rows merged whole are those `Rewrite` leaves."""
    seen: set = set()
    files = [[(k, o) for k, o in rows if k not in seen and not seen.add(k)] for rows in files]
    files = [rows for rows in files if rows]
    results = []
    for whole in (True, False):
        path = str(tmp_path_factory.mktemp("whole") / "t")
        batches = [pa.record_batch([[k[0] for k, _ in rows], [k[1] for k, _ in rows],
                                    ["old"] * len(rows), [o for _, o in rows]], schema=KEYED)
                   for rows in files]
        parquet_files.create_table(path, KEYED, [lambda b=b: [b] for b in batches])
        last = pa.table({"k": pa.array([k[0] for k in window], pa.int32()),
                         "s": pa.array([k[1] for k in window], pa.string()),
                         "v": ["new"] * len(window),
                         "_cdc_offset": pa.array([o for o, _ in window.values()], pa.string()),
                         "_cdc_remove": pa.array([r for _, r in window.values()], pa.bool_())})
        with pytest.MonkeyPatch.context() as patch:
            if not whole:
                patch.setattr(file_merge, "WHOLE_ROWS", -1)
            file_merge.merge(DeltaRsTables(), path, last, ["k", "s"])
        results.append(sorted(DeltaTable(path).to_pyarrow_table().to_pylist(),
                              key=lambda r: tuple((v is None, v) for v in r.values())))
    assert results[0] == results[1]
