"""Bronze's change commits (lake/bronze.py): a large batch of the table's own columns is written
by pyarrow (lake/parquet_files.py), one that changes bronze's columns by delta-rs."""
from __future__ import annotations

import pyarrow as pa
from deltalake import DeltaTable

from cdc_sql import engine as engines
from cdc_sql.lake import bronze
from cdc_sql.lake.lake import Lake
from cdc_sql.source.schema import Column, SourceTable

SOURCE = SourceTable("db", "t", (Column("id", "int", "int", 10, 0, None, None),
                                 Column("v", "varchar", "varchar(100)", None, None, None, 100)),
                     ("id",))


def changes(schema: pa.Schema, low: int, rows: int, **extra) -> pa.RecordBatch:
    values = {"id": pa.array(range(low, low + rows), pa.int32()),
              "v": pa.array(["x" * 90] * rows),
              "_cdc_offset": pa.array([f"000001:{i:012d}:000000" for i in range(low, low + rows)]),
              "_cdc_op": pa.array(["u"] * rows),
              "_cdc_ts": pa.array([0] * rows, pa.timestamp("us", tz="UTC")),
              **extra}
    return pa.record_batch([values.get(f.name, pa.nulls(rows, f.type)) for f in schema],
                           schema=schema)


def test_large_change_commits_are_written_here_and_new_columns_by_delta_rs(tmp_path):
    lake = Lake.open(engines.start("sail"), str(tmp_path))  # the engine is never started
    bronze.ensure_changes_table(lake, SOURCE)
    path = lake.changes_path("db", "t")
    schema = bronze.changes_schema(SOURCE)
    bronze.append_changes(lake, SOURCE, [changes(schema, 0, 10_000)])  # over 1 MB

    def timestamp_bounds() -> list:  # lake/parquet_files.py writes none of them
        actions = pa.RecordBatchReader.from_stream(
            DeltaTable(path).get_add_actions(flatten=True)).read_all()
        return actions["min._cdc_ts"].to_pylist()

    assert timestamp_bounds() == [None]  # written here
    wider = SourceTable("db", "t", (*SOURCE.columns,
                                    Column("n", "int", "int", 10, 0, None, None)), ("id",))
    schema = bronze.changes_schema(wider)
    bronze.append_changes(lake, wider, [changes(schema, 10_000, 10_000)])
    assert sum(bound is not None for bound in timestamp_bounds()) == 1  # delta-rs's file
    rows = DeltaTable(path).to_pyarrow_table()
    assert rows.num_rows == 20_000 and "n" in rows.column_names
