"""lake/first_version.py: which files written during the snapshot silver may be created with."""
from __future__ import annotations

import datetime as dt
import types

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, strategies as st

from cdc_sql.lake import first_version
from cdc_sql.planner import SplitRef

COLUMNS = "id: int64\n_cdc_offset: string"

# state's (split id, attempt, watermark) of a window: consecutive splits read together
reads = st.lists(st.tuples(st.integers(1, 4), st.sampled_from(["w1", "w2", "w3"])),
                 min_size=1, max_size=6)


def window_splits(groups: list[tuple[int, str]]) -> list[SplitRef]:
    splits, next_id = [], 0
    for n, (size, watermark) in enumerate(groups):
        splits += [SplitRef(next_id + i, f"a{n}", watermark) for i in range(size)]
        next_id += size
    return splits


def manifests_of(splits) -> dict[str, dict]:
    found: dict[str, dict] = {}
    for split in splits:
        entry = found.setdefault(split.attempt, {"splits": [], "watermark": split.watermark,
                                                 "columns": COLUMNS, "files": []})
        entry["splits"].append(split.split_id)
    return found


@given(reads)
def test_every_attempt_with_its_manifest_gives_the_attempts_in_split_order(groups):
    splits = window_splits(groups)
    assert first_version.agreeing(manifests_of(splits), reversed(splits), COLUMNS) == \
        [f"a{n}" for n in range(len(groups))]


@given(reads, st.data())
def test_any_disagreement_with_state_means_silver_is_created_from_bronze(groups, data):
    splits = window_splits(groups)
    manifests = manifests_of(splits)
    attempt = data.draw(st.sampled_from(sorted(manifests)))
    how = data.draw(st.sampled_from(["missing", "splits", "watermark", "columns", "stale"]))
    if how == "missing":  # killed before the manifest was written
        manifests[attempt] = None
    elif how == "splits":
        manifests[attempt]["splits"] = manifests[attempt]["splits"][1:] + [99]
    elif how == "watermark":
        manifests[attempt]["watermark"] = "w9"
    elif how == "columns":  # silver's columns are not those written
        manifests[attempt]["columns"] = COLUMNS + "\nextra: string"
    else:  # state records another attempt of those splits than the one written
        manifests[f"old-{attempt}"] = manifests.pop(attempt)
    assert first_version.agreeing(manifests, splits, COLUMNS) is None


def test_no_splits_means_nothing_to_take():
    assert first_version.agreeing({}, [], COLUMNS) is None


def test_snapshot_rows_in_silver_columns():
    schema = pa.schema([("id", pa.int64()), ("v", pa.string()), ("_cdc_offset", pa.string()),
                        ("_cdc_op", pa.string()),
                        ("_cdc_ts", pa.timestamp("us", tz="UTC"))])
    batch = pa.record_batch({"id": [1, 2], "v": ["a", None], "_cdc_split_id": [0, 0]})
    at = dt.datetime(2026, 1, 2, tzinfo=dt.timezone.utc)
    image = first_version.snapshot_image(
        schema, batch, pa.array(["000001:000000000004:000000"] * 2),
        pa.array([at, at], pa.timestamp("us", tz="UTC")))
    assert image.schema == schema
    assert image.to_pylist()[1] == {"id": 2, "v": None, "_cdc_offset": "000001:000000000004:000000",
                                    "_cdc_op": "r", "_cdc_ts": at}


def test_written_files_are_taken_whole_or_a_failed_read_leaves_none(tmp_path):
    lake = types.SimpleNamespace(first_version_path=lambda name: f"{tmp_path}/_first/{name}")
    schema = pa.schema([("id", pa.int64()), ("_cdc_offset", pa.string()),
                        ("_cdc_op", pa.string()), ("_cdc_ts", pa.timestamp("us", tz="UTC"))])
    target = first_version.Target(lake.first_version_path("t"), schema)
    at = dt.datetime(2026, 1, 2, tzinfo=dt.timezone.utc)
    rows = [pa.record_batch({"id": [i], "_cdc_split_id": [i]}) for i in range(3)]
    with first_version.Writer([target], "good", [0, 1, 2], "w1", at) as writer:
        assert [b["id"][0].as_py() for b in writer.tee(iter(rows))] == [0, 1, 2]
    with pytest.raises(RuntimeError):  # the read broke off
        with first_version.Writer([target], "bad", [3], "w1", at) as writer:
            for _ in writer.tee(iter(rows)):
                raise RuntimeError("connection lost")
    assert not (tmp_path / "_first/t/bad").exists()
    assert not (tmp_path / "_first/t/bad.json").exists()
    with first_version.Writer([target], "gtid", [4], "", at) as writer:  # no watermark yet
        list(writer.tee(iter(rows)))
    assert not (tmp_path / "_first/t/gtid.json").exists()

    silver = str(tmp_path / "silver")
    assert first_version.take(lake, "t", [SplitRef(0, "good", "w1"), SplitRef(3, "bad", "w1")], schema,
                              silver) is None
    actions = first_version.take(lake, "t", [SplitRef(i, "good", "w1") for i in range(3)], schema,
                                 silver)
    assert len(actions) == 1 and '"numRecords": 3' in actions[0].stats
    assert pq.read_table(f"{silver}/{actions[0].path}").to_pylist()[2] == {
        "id": 2, "_cdc_offset": "w1", "_cdc_op": "r", "_cdc_ts": at}


def test_a_failure_to_write_ahead_leaves_the_read_going_and_nothing_to_take(tmp_path, caplog):
    lake = types.SimpleNamespace(first_version_path=lambda name: f"{tmp_path}/_first/{name}")
    wrong = pa.schema([("id", pa.struct([("x", pa.int64())])),  # no cast from the rows' type
                       ("_cdc_offset", pa.string()),
                       ("_cdc_op", pa.string()), ("_cdc_ts", pa.timestamp("us", tz="UTC"))])
    target = first_version.Target(lake.first_version_path("t"), wrong)
    rows = [pa.record_batch({"id": [i], "_cdc_split_id": [0]}) for i in range(3)]
    with first_version.Writer([target], "a", [0], "w1", dt.datetime.now(dt.timezone.utc)) as w:
        assert len(list(w.tee(iter(rows)))) == 3  # bronze gets every batch
    assert "will be read from bronze" in caplog.text
    assert not (tmp_path / "_first/t/a").exists() and not (tmp_path / "_first/t/a.json").exists()
    assert first_version.take(lake, "t", [SplitRef(0, "a", "w1")], wrong, str(tmp_path / "s")) is None
