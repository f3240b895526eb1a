"""File statistics of the tables delta-rs writes for cdc-sql (lake/tables.py)."""
from __future__ import annotations

import json

import pyarrow as pa
from deltalake import DeltaTable

from cdc_sql.lake.tables import STATS_PREFIX, append_with_delta_rs


def test_string_bounds_are_cut_so_wide_values_stay_out_of_the_log(tmp_path):
    """A 1 MB text value once went whole into every commit's statistics (twice: as minimum and
    maximum); the bounds are still bounds after the cut, so data skipping stays right."""
    path = str(tmp_path / "changes")
    values = ["b" * 2**20 + "z", "a" * 2**20, "short"]
    schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    append_with_delta_rs(path, [pa.record_batch([pa.array([1, 2, 3]), pa.array(values)],
                                                schema=schema)], schema)
    log = (tmp_path / "changes" / "_delta_log" / "00000000000000000000.json").read_text()
    assert len(log) < 10_000
    add = next(json.loads(line)["add"] for line in log.splitlines() if '"add"' in line)
    stats = json.loads(add["stats"])
    low, high = stats["minValues"]["v"], stats["maxValues"]["v"]
    assert len(low) <= STATS_PREFIX and len(high) <= STATS_PREFIX
    assert low <= min(values) and high >= max(values)
    assert DeltaTable(path).to_pyarrow_table()["v"].to_pylist() == values
