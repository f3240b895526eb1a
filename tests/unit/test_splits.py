from cdc_sql.source.splits import Split


def test_split_predicates_cover_open_ends():
    assert Split("d.t", 0, None, None).where(["`id`"]) == ("TRUE", [])
    assert Split("d.t", 0, None, (10,)).where(["`id`"]) == ("`id` < %s", [10])
    assert Split("d.t", 1, (10,), None).where(["`id`"]) == ("`id` >= %s", [10])
    sql, args = Split("d.t", 1, ("a", 1), ("b", 2)).where(["`s`", "`n`"])
    assert sql == "(`s`, `n`) >= (%s, %s) AND (`s`, `n`) < (%s, %s)" and args == ["a", 1, "b", 2]


def test_bounds_survive_state_json():
    import datetime as dt
    import decimal
    import json

    split = Split("d.t", 3, (decimal.Decimal("1.50"), b"\x00k", dt.datetime(2024, 1, 1, 5)),
                  ("x", 7, dt.date(2024, 2, 2)))
    assert Split.from_json(json.loads(json.dumps(split.to_json()))) == split


from hypothesis import given, strategies as st  # noqa: E402

from cdc_sql.source.splits import (GROUP_SPLITS, MAX_SPLIT_ROWS, MIN_SPLIT_ROWS,  # noqa: E402
                                   group_splits, split_rows)


@given(st.integers(0, 10**9), st.integers(1, 10**6), st.integers(1, 64))
def test_automatic_split_size_is_bounded_and_feeds_every_reader(rows, row_bytes, parallelism):
    size = split_rows(rows, row_bytes, parallelism)
    assert MIN_SPLIT_ROWS <= size <= MAX_SPLIT_ROWS
    if rows >= 2 * parallelism * MIN_SPLIT_ROWS and size < MAX_SPLIT_ROWS:
        assert -(-rows // size) >= 2 * parallelism or size == MIN_SPLIT_ROWS


@given(st.lists(st.integers(0, 2000), unique=True, max_size=300), st.integers(0, 10**8),
       st.integers(1, 8))
def test_groups_partition_the_pending_splits_into_neighbours(ids, rows, parallelism):
    splits = [Split("d.t", i, None, None) for i in ids]
    groups = group_splits(splits, rows, parallelism)
    assert sorted(s.split_id for g in groups for s in g) == sorted(ids)  # each split once
    for group in groups:
        assert 1 <= len(group) <= GROUP_SPLITS
        assert [s.split_id for s in group] == list(range(group[0].split_id,
                                                         group[0].split_id + len(group)))
    if len(ids) >= parallelism:
        assert len(groups) >= min(parallelism, len(ids))


def test_files_are_clustered_when_key_ranges_are_disjoint_and_not_too_large():
    from cdc_sql.lake.tables import clustered

    assert clustered([(1, 10, 100), (11, 20, 100)], target_bytes=100)
    assert clustered([(11, 20, 100), (1, 10, 100)], target_bytes=100)  # any order
    assert not clustered([(1, 10, 100), (5, 20, 100)], target_bytes=100)  # overlap
    edges = [(1, 1_114_112, 9), (983_041, 1_914_570, 9), (1_914_571, 3_028_682, 9)]
    assert clustered(edges, target_bytes=100)  # neighbours overlap by a batch (Sail's writes)
    assert not clustered([("a", "k", 9), ("j", "z", 9)], target_bytes=100)  # text: strictly
    assert not clustered([(1, 100, 9), (2, 99, 9)], target_bytes=100)  # hashed: every key
    assert not clustered([(1, 100, 9), (50, 150, 9)], target_bytes=100)  # half overlaps
    assert not clustered([(1, 40, 9), (30, 70, 9), (35, 100, 9)], target_bytes=100)
    assert not clustered([(1, 10, 100), (11, 20, 201)], target_bytes=100)  # one file too large
    assert not clustered(None)  # no statistics


@given(st.booleans(), st.booleans(), st.one_of(st.none(), st.integers(0, 10**9)))
def test_auto_reads_small_tables_tls_and_uncovered_types_with_pymysql(native_ok, tls, rows):
    """`snapshot_reader: auto`: connectorx only where it reads every column exactly, no TLS is
    asked for and the read is not known to be small (SMALL_READ_ROWS or fewer rows)."""
    from cdc_sql.source.snapshot import SMALL_READ_ROWS, auto_reader

    small = rows is not None and rows <= SMALL_READ_ROWS
    assert auto_reader(native_ok, tls, rows) == \
        ("native" if native_ok and not tls and not small else "pymysql")
    assert auto_reader(True, False, SMALL_READ_ROWS) == "pymysql"
    assert auto_reader(True, False, SMALL_READ_ROWS + 1) == "native"
