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


from hypothesis import example, given, strategies as st  # noqa: E402

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
@example(ids=[0, 1, 2, 3, 4], rows=0, parallelism=4)  # groups of 2 left a reader idle
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


@given(st.lists(st.tuples(st.sampled_from("abcd"), st.integers(1, 3)), max_size=4,
                unique_by=lambda t: t[0]), st.sets(st.sampled_from("abcde")))
def test_a_tables_only_group_creates_its_bronze_snapshot_table_when_not_there(counts, present):
    """splits.creating_groups: a group creates bronze's snapshot table exactly when it is its
    table's only group and the table is not there; nothing else about the groups changes."""
    from types import SimpleNamespace

    from cdc_sql.source.splits import SplitGroup, creating_groups

    groups = [SplitGroup(SimpleNamespace(qualified=name), [Split(name, i, None, None)])
              for name, n in counts for i in range(n)]
    marked = creating_groups(groups, present)
    assert [(g.table, g.splits) for g in marked] == [(g.table, g.splits) for g in groups]
    assert [g.creates for g in marked] == \
        [dict(counts)[g.table.qualified] == 1 and g.table.qualified not in present
         for g in groups]


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


@given(st.booleans(), st.booleans(), st.booleans(), st.booleans(),
       st.one_of(st.none(), st.integers(0, 10**9)))
def test_auto_reads_small_tables_and_uncovered_types_with_pymysql(columns_ok, connectorx,
                                                                 compiled, tls, rows):
    """`snapshot_reader: auto`: pymysql for a read known to be small (SMALL_READ_ROWS or fewer
    rows) or a column the others cannot read exactly; the binary reader where the C decoders
    are built (TLS or not); else connectorx where it is installed and no TLS is asked for."""
    from cdc_sql.source.snapshot import SMALL_READ_ROWS, auto_reader

    small = rows is not None and rows <= SMALL_READ_ROWS
    chosen = auto_reader(columns_ok, connectorx, compiled, tls, rows)
    if not columns_ok or small:
        assert chosen == "pymysql"
    elif compiled:
        assert chosen == "binary"
    else:
        assert chosen == ("native" if connectorx and not tls else "pymysql")
    assert auto_reader(True, True, True, False, SMALL_READ_ROWS) == "pymysql"
    assert auto_reader(True, True, True, True, SMALL_READ_ROWS + 1) == "binary"
    assert auto_reader(True, True, False, False, SMALL_READ_ROWS + 1) == "native"


def _column(name, data_type, length=None):
    from cdc_sql.source.schema import Column

    return Column(name, data_type, data_type, None, None, None, length)


def test_wide_columns_are_those_whose_values_can_fill_a_batch():
    """pymysql's batches are bounded in bytes by the columns that can hold long values: long
    strings and LOBs, and JSON or spatial values (no declared length); not numbers, times,
    ENUM or SET, nor strings too short for `batch_rows` of them to reach BATCH_BYTES."""
    from cdc_sql.source.schema import SourceTable
    from cdc_sql.source.snapshot import BATCH_BYTES, wide_columns

    columns = [_column("id", "bigint"), _column("at", "datetime"), _column("e", "enum", 5),
               _column("name", "varchar", 255), _column("doc", "longtext", 2**32 - 1),
               _column("geo", "geometry"), _column("bin", "varbinary", 3000)]
    table = SourceTable("d", "t", tuple(columns), ("id",))
    assert wide_columns(table, 65_536) == [3, 4, 5, 6]
    assert wide_columns(table, BATCH_BYTES // (4 * 255)) == [4, 5, 6]  # fewer rows a batch
    assert wide_columns(table, 1) == [4, 5]


class _Rows:
    """A streaming cursor over rows given up front (fetchone, fetchmany)."""

    def __init__(self, rows):
        self.rows = list(rows)

    def fetchone(self):
        return self.rows.pop(0) if self.rows else None

    def fetchmany(self, n):
        taken, self.rows = self.rows[:n], self.rows[n:]
        return taken


@given(st.lists(st.one_of(st.none(), st.integers(0, 3), st.integers(50, 400)), max_size=40),
       st.integers(1, 8))
def test_pymysql_batches_keep_every_row_in_order_and_end_near_batch_bytes(sizes, batch_rows):
    """Every row once, in order; a batch holds at most `batch_rows`, and its wide values pass
    its bytes (here 100) only by its last row's."""
    from cdc_sql.source.snapshot import _fetch

    rows = [(n, None if size is None else b"x" * size, 7) for n, size in enumerate(sizes)]
    cursor, batches = _Rows(rows), []
    while batch := _fetch(cursor, batch_rows, [1], 100):
        batches.append(batch)
    assert [row for batch in batches for row in batch] == rows
    for batch in batches:
        wide = [len(row[1] or b"") for row in batch]
        assert len(batch) <= batch_rows and sum(wide[:-1]) < 100
    assert _fetch(_Rows(rows), batch_rows, [], 100) == rows[:batch_rows]  # no wide column


@given(st.one_of(st.none(), st.integers(0, 2**40)))
def test_a_batch_holds_fewer_rows_the_more_bytes_a_row_holds(row_bytes):
    """BATCH_ROWS rows a batch, fewer when the catalog's bytes a row would take BATCH_ROWS of
    them past BATCH_BYTES; never none."""
    from cdc_sql.source.snapshot import BATCH_BYTES, BATCH_ROWS, rows_a_batch

    rows = rows_a_batch(row_bytes)
    assert 1 <= rows <= BATCH_ROWS
    if row_bytes and rows > 1:
        assert rows * row_bytes <= BATCH_BYTES
    if not row_bytes or row_bytes * BATCH_ROWS <= BATCH_BYTES:
        assert rows == BATCH_ROWS
    assert rows_a_batch(3 * 2**20) == 10  # rows of 3 MB: ten a batch
