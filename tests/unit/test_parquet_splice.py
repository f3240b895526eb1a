"""lake/parquet_splice.py: a Parquet file made of other files' column chunks reads back as
the columns taken, exactly, by pyarrow and by delta-rs; parts that do not fit are refused."""
from __future__ import annotations

import datetime as dt
import decimal
import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from hypothesis import given, settings, strategies as st

from cdc_sql.lake import parquet_files, parquet_splice
from cdc_sql.lake.parquet_splice import Part, Unspliceable

UTC = dt.timezone.utc
# column types a source table's rows come in, and nested ones for the schema walk
TYPES = {
    "int8": (pa.int8(), st.integers(-128, 127)),
    "int64": (pa.int64(), st.integers(-2**63, 2**63 - 1)),
    "uint32": (pa.uint32(), st.integers(0, 2**32 - 1)),
    "float32": (pa.float32(), st.floats(width=32)),
    "float64": (pa.float64(), st.floats()),
    "bool": (pa.bool_(), st.booleans()),
    "string": (pa.string(), st.text(max_size=20)),
    "binary": (pa.binary(), st.binary(max_size=20)),
    "decimal12": (pa.decimal128(12, 2), st.decimals(-10**9, 10**9, places=2,
                                                     allow_nan=False, allow_infinity=False)),
    "decimal38": (pa.decimal128(38, 10), st.decimals(-10**27, 10**27, places=10,
                                                      allow_nan=False, allow_infinity=False)),
    "date": (pa.date32(), st.dates()),
    "timestamp": (pa.timestamp("us"), st.datetimes()),
    "timestamp_utc": (pa.timestamp("us", tz="UTC"), st.datetimes(timezones=st.just(UTC))),
    "time": (pa.time64("us"), st.times()),
    "list": (pa.list_(pa.int32()), st.lists(st.integers(-2**31, 2**31 - 1), max_size=3)),
    "struct": (pa.struct([("a", pa.int16()), ("b", pa.string())]),
               st.fixed_dictionaries({"a": st.integers(-2**15, 2**15 - 1),
                                      "b": st.text(max_size=5)})),
}
NOT_DELTA = ("_uint32", "_time", "_timestamp")  # types a Delta table has no column of


@st.composite
def tables(draw) -> tuple[pa.Table, list[int]]:
    """A table of a few columns of TYPES (nullable or not) and its row groups' sizes."""
    names = draw(st.lists(st.sampled_from(sorted(TYPES)), min_size=1, max_size=6))
    rows = draw(st.integers(0, 60))
    columns, fields = [], []
    for i, name in enumerate(names):
        type_, values = TYPES[name]
        nullable = draw(st.booleans())
        column = draw(st.lists(values if not nullable else st.none() | values,
                               min_size=rows, max_size=rows))
        fields.append(pa.field(f"c{i}_{name}", type_, nullable=nullable))
        columns.append(pa.array(column, type_))
    groups = []
    left = rows
    while left > 0:
        groups.append(draw(st.integers(1, left)))
        left -= groups[-1]
    return pa.Table.from_arrays(columns, schema=pa.schema(fields)), groups


def bits(table: pa.Table) -> pa.Table:
    """The table with its floats as their bits (NaN equals NaN, -0.0 does not equal 0.0)."""
    widths = {pa.float32(): pa.int32(), pa.float64(): pa.int64()}
    columns = []
    for column in table.columns:
        if column.type in widths:
            column = pa.chunked_array([c.view(widths[column.type]) for c in column.chunks],
                                      widths[column.type])
        columns.append(column)
    return pa.table(columns, names=table.column_names)


def write(path, table: pa.Table, groups: list[int], **options) -> None:
    with pq.ParquetWriter(path, table.schema, compression="snappy", **options) as writer:
        at = 0
        for rows in groups:
            writer.write_table(table.slice(at, rows), row_group_size=rows)
            at += rows


def own_columns(rows: int) -> pa.Table:
    return pa.table({"_cdc_offset": pa.repeat(pa.scalar("000001:000000000004:000000"), rows),
                     "_cdc_op": pa.repeat(pa.scalar("r"), rows)})


@settings(max_examples=40, deadline=None)
@given(tables(), st.data())
def test_a_spliced_file_holds_the_columns_taken_exactly(tmp_path_factory, drawn, data):
    """A file's leading columns (the rest left behind, as bronze's own are) beside another
    file's columns of the same row groups, or of a row group per size (each taken as often
    as its size comes): pyarrow and delta-rs read what was written."""
    table, groups = drawn
    tmp = tmp_path_factory.mktemp("splice")
    taken = data.draw(st.integers(1, table.num_columns))
    write(tmp / "a.parquet", table, groups,
          use_dictionary=data.draw(st.sampled_from([True, False, [table.column_names[0]]])))
    own = own_columns(table.num_rows)
    sizes, picks = groups, None
    if data.draw(st.booleans()):  # a row group per size
        sizes = list(dict.fromkeys(groups))
        picks = tuple(sizes.index(rows) for rows in groups)
    write(tmp / "b.parquet", own_columns(sum(sizes)), sizes,
          use_dictionary=["_cdc_offset", "_cdc_op"])
    schema = pa.schema([*list(table.schema)[:taken], *own.schema])
    footer = parquet_splice.splice([Part(str(tmp / "a.parquet"), taken),
                                    Part(str(tmp / "b.parquet"), 2, picks)],
                                   schema, str(tmp / "out.parquet"))
    expected = pa.Table.from_arrays([*table.columns[:taken], *own.columns], schema=schema)
    read = pq.read_table(tmp / "out.parquet")
    assert read.schema == schema and bits(read).equals(bits(expected))
    assert [footer.row_group(g).num_rows for g in range(footer.num_row_groups)] == groups
    if any(n.endswith(NOT_DELTA) for n in schema.names):
        return
    (tmp / "delta").mkdir()
    (tmp / "out.parquet").rename(tmp / "delta/part-0.parquet")
    stats = parquet_files.Stats.of_file(schema, footer)
    parquet_files.create_with(str(tmp / "delta"), schema, [_action(tmp / "delta", stats, footer)])
    assert bits(DeltaTable(str(tmp / "delta")).to_pyarrow_table()).equals(bits(expected))


def _action(path, stats, footer):
    from deltalake.transaction import AddAction

    size = (path / "part-0.parquet").stat().st_size
    return AddAction("part-0.parquet", size, {}, 0, True, stats.json(footer))


def test_a_spliced_files_statistics_are_those_of_the_same_rows_written_whole(tmp_path):
    table = pa.table({"id": pa.array(range(1000), pa.int64()),
                      "v": pa.array([None if i % 7 == 0 else f"v{i:04d}" for i in range(1000)]),
                      "d": pa.array([decimal.Decimal(i) / 100 for i in range(1000)],
                                    pa.decimal128(12, 2)),
                      "tag": pa.repeat(pa.scalar("x"), 1000)})
    write(tmp_path / "a.parquet", table, [400, 600])
    own = own_columns(1000)
    write(tmp_path / "b.parquet", own, [400, 600])
    schema = pa.schema([*list(table.schema)[:3], *own.schema])
    footer = parquet_splice.splice([Part(str(tmp_path / "a.parquet"), 3),
                                    Part(str(tmp_path / "b.parquet"), 2)],
                                   schema, str(tmp_path / "out.parquet"))
    whole = parquet_files.Files(str(tmp_path), schema)
    whole.write(pa.Table.from_arrays([*table.columns[:3], *own.columns],
                                     schema=schema).combine_chunks().to_batches()[0])
    [action] = whole.close()
    assert parquet_files.Stats.of_file(schema, footer).json(footer) == action.stats


@pytest.mark.parametrize("how", ["row groups", "nullability", "type", "too few columns"])
def test_parts_that_do_not_fit_the_schema_are_refused(tmp_path, how):
    table = pa.table({"id": pa.array(range(10), pa.int64()), "v": pa.array(["a"] * 10)})
    write(tmp_path / "a.parquet", table, [10])
    own = own_columns(10)
    write(tmp_path / "b.parquet", own, [4, 6] if how == "row groups" else [10])
    fields = list(table.schema)
    if how == "nullability":
        fields[0] = fields[0].with_nullable(False)
    elif how == "type":
        fields[0] = fields[0].with_type(pa.int32())
    taken = 3 if how == "too few columns" else 2
    schema = pa.schema([*fields, *own.schema])
    with pytest.raises(Unspliceable):
        parquet_splice.splice([Part(str(tmp_path / "a.parquet"), taken),
                               Part(str(tmp_path / "b.parquet"), 2)],
                              schema, str(tmp_path / "out.parquet"))


@settings(max_examples=40, deadline=None)
@given(tables())
def test_a_footer_read_and_written_back_is_the_same_bytes(drawn):
    """The Thrift compact reader and writer keep every field as it came."""
    table, groups = drawn
    sink = io.BytesIO()
    write(sink, table, groups)
    data = sink.getvalue()
    length = int.from_bytes(data[-8:-4], "little")
    footer = data[-8 - length:-8]
    parsed = parquet_splice._read_struct(parquet_splice._Reader(footer))
    out = io.BytesIO()
    parquet_splice._write_struct(out, parsed)
    assert out.getvalue() == footer


def test_nothing_is_left_where_a_splice_fails_half_way(tmp_path, monkeypatch):
    table = pa.table({"id": pa.array(range(10), pa.int64())})
    write(tmp_path / "a.parquet", table, [10])
    write(tmp_path / "b.parquet", own_columns(10), [10])
    real, calls = parquet_splice._copy_range, []

    def fail_second(*args):
        calls.append(1)
        if len(calls) > 1:
            raise Unspliceable("a column chunk past the end of its file")
        real(*args)

    monkeypatch.setattr(parquet_splice, "_copy_range", fail_second)
    with pytest.raises(Unspliceable):
        parquet_splice.splice([Part(str(tmp_path / "a.parquet"), 1),
                               Part(str(tmp_path / "b.parquet"), 2)],
                              pa.schema([*table.schema, *own_columns(0).schema]),
                              str(tmp_path / "out.parquet"))
    assert len(calls) == 2 and not (tmp_path / "out.parquet").exists()


def test_a_row_group_taken_more_than_once_is_copied_each_time(tmp_path):
    """Silver's own columns are one value repeated: a row group of each size is written and
    taken for every row group of that size."""
    table = pa.table({"id": pa.array(range(10), pa.int64())})
    write(tmp_path / "a.parquet", table, [3, 3, 3, 1])
    write(tmp_path / "b.parquet", own_columns(4), [3, 1], use_dictionary=["_cdc_offset"])
    schema = pa.schema([*table.schema, *own_columns(0).schema])
    parquet_splice.splice([Part(str(tmp_path / "a.parquet"), 1),
                           Part(str(tmp_path / "b.parquet"), 2, (0, 0, 0, 1))],
                          schema, str(tmp_path / "out.parquet"))
    assert pq.read_table(tmp_path / "out.parquet").equals(
        pa.Table.from_arrays([*table.columns, *own_columns(10).columns], schema=schema))
