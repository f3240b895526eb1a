"""FLOAT reaches silver bit-exact on every path: both snapshot readers, the binlog, a
re-snapshot, snapshot splits as Spark tasks, and `verify` agrees. The extremes: FLT_MAX,
FLT_MIN, denormals, -0.0 and values that need nine digits (the text protocol prints six)."""
import struct

import pyarrow as pa
import pytest

from cdc_sql import resnapshot
from cdc_sql.lake.lake import Lake
from cdc_sql.lake.state import State
from cdc_sql.lake.tables import RESNAPSHOT_MARK
from cdc_sql.ops.verify import compare_table, verify_table
from cdc_sql.source import mysql
from cdc_sql.source.schema import read_table
from cdc_sql.source.snapshot import read_split
from cdc_sql.source.splits import Split
from tests.integration.helpers import checkpoint, run, silver_path

pytestmark = pytest.mark.integration


def f32(value: float) -> float:
    return struct.unpack("<f", struct.pack("<f", value))[0]


FLT_MAX = f32(3.4028234663852886e38)
EXTREMES = [FLT_MAX, -FLT_MAX, 1.1754943508222875e-38,  # FLT_MIN, the least normal
            -1.1754943508222875e-38, 1.401298464324817e-45,  # the least denormal
            1.1754942106924411e-38, -1.401298464324817e-45,  # the greatest denormal
            -0.0, 0.0, f32(0.1), f32(123456.789), f32(1.0000001), f32(16777217.0),
            f32(-9.8765432e-12), f32(3.4028233e38), f32(2.7182817)]


def bits(value) -> bytes | None:
    return None if value is None else struct.pack("<f", value)


@pytest.fixture
def floats(mariadb, database):
    mariadb.execute("CREATE TABLE fl (id INT PRIMARY KEY, v FLOAT, w FLOAT NULL)", db=database)
    insert(mariadb, database, 1)
    return database


def insert(mariadb, database, first: int) -> None:
    with mariadb.connect(database) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO fl VALUES (%s, %s, %s)",
                        [(first + i, v, None if i % 3 else -v) for i, v in enumerate(EXTREMES)])


def source_bits(mariadb, database) -> dict:
    """What the server holds, every bit: FLOAT widened to DOUBLE (exact), as 32-bit patterns."""
    rows = mariadb.query("SELECT id, CAST(v AS DOUBLE), CAST(w AS DOUBLE) FROM fl", db=database)
    return {i: (bits(v), bits(w)) for i, v, w in rows}


def silver_bits(pipeline) -> dict:
    from deltalake import DeltaTable

    rows = DeltaTable(silver_path(pipeline, "fl")).to_pyarrow_table(columns=["id", "v", "w"])
    assert rows.schema.field("v").type == pa.float32()
    return {r["id"]: (bits(r["v"]), bits(r["w"])) for r in rows.to_pylist()}


@pytest.mark.parametrize("reader", ["native", "pymysql"])
def test_both_readers_read_every_bit(floats, mariadb, make_pipeline, reader):
    pipeline = make_pipeline(f"- name: fl\n  source: {floats}.fl")
    with mysql.cursor(pipeline.source) as cur:
        table = read_table(cur, floats, "fl")
    read = read_split(pipeline.source, table, Split(f"{floats}.fl", 0, None, None), True,
                      reader=reader)
    rows = pa.Table.from_batches(list(read.batches)).to_pylist()
    assert {r["id"]: (bits(r["v"]), bits(r["w"])) for r in rows} == \
        source_bits(mariadb, floats)
    assert bits(FLT_MAX) in {b for r in source_bits(mariadb, floats).values() for b in r}


@pytest.mark.parametrize("settings", [{"snapshot_reader": "native"},
                                      {"snapshot_reader": "pymysql"},
                                      {"snapshot_runner": "spark", "snapshot_reader": "pymysql"},
                                      {"snapshot_reader": "native", "splice": True}],
                         ids=["native", "pymysql", "spark-tasks", "spliced"])
def test_silver_holds_every_bit_on_every_path(floats, mariadb, engine, make_pipeline, settings,
                                              monkeypatch):
    """`spliced`: silver's first version made of bronze's files' column chunks however small
    (lake/first_version.py; small files are otherwise read and written again), during the
    snapshot, and taken by the creating commit."""
    settings, spliced, taken = dict(settings), [], []
    splice = settings.pop("splice", False)
    if splice:
        from cdc_sql.lake import first_version, parquet_splice

        monkeypatch.setattr(first_version, "SPLICE_BYTES", 0)
        real, made_ahead = parquet_splice.splice, first_version._made_ahead
        monkeypatch.setattr(parquet_splice, "splice",
                            lambda *a: spliced.append(1) or real(*a))
        monkeypatch.setattr(first_version, "_made_ahead",
                            lambda *a: taken.append(made_ahead(*a)) or taken[-1])
    pipeline = make_pipeline(f"- name: fl\n  source: {floats}.fl", **settings)
    run(pipeline, engine)  # the snapshot
    assert bool(spliced) == splice and all(found is not None for found in taken)
    assert bool(taken) == splice  # each file made during the snapshot, taken
    assert silver_bits(pipeline) == source_bits(mariadb, floats)
    insert(mariadb, floats, 101)  # the binlog
    mariadb.execute("UPDATE fl SET w = v WHERE id < 5", db=floats)
    run(pipeline, engine)
    assert silver_bits(pipeline) == source_bits(mariadb, floats)
    report = verify_table(engine, pipeline, pipeline.tables[0], checkpoint(engine, pipeline))
    assert report.equal, report.summary()
    assert compare_table(engine, pipeline, pipeline.tables[0]) == ""
    # a re-snapshot reads them all again
    State(Lake.open(engine, str(pipeline.root))).write(
        *resnapshot.requests([f"{floats}.fl"], "test", "2024-01-01T00:00:00+00:00"))
    run(pipeline, engine)
    assert silver_bits(pipeline) == source_bits(mariadb, floats)
    assert checkpoint(engine, pipeline).table("fl").resnapshot == ""
    from deltalake import DeltaTable

    assert RESNAPSHOT_MARK in [c.get("userMetadata") for c in
                               DeltaTable(silver_path(pipeline, "fl")).history()]


def test_verify_sees_a_float_off_by_its_last_bit(floats, mariadb, engine, make_pipeline):
    """What a six-digit read made of FLT_MAX (3.40282e38) is a difference verify reports."""
    pipeline = make_pipeline(f"- name: fl\n  source: {floats}.fl")
    run(pipeline, engine)
    with mariadb.connect(floats) as conn, conn.cursor() as cur:
        cur.execute("SET sql_log_bin = 0")  # no binlog event carries it: silver keeps FLT_MAX
        cur.execute("UPDATE fl SET v = 3.40282e38 WHERE id = 1")
    report = verify_table(engine, pipeline, pipeline.tables[0], checkpoint(engine, pipeline))
    assert not report.equal and "different (key id: 1)" in report.summary(), report.summary()
