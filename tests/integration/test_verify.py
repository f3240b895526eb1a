"""`verify`: checksums per split or key-hash bucket agree for equal tables of every type family,
and a change no binlog event carries (sql_log_bin=0) is found and named by its key."""
import pytest

from cdc_sql.ops.verify import verify_table
from tests.integration.helpers import checkpoint, run

pytestmark = pytest.mark.integration

TYPES = """CREATE TABLE t (
  id INT PRIMARY KEY, ti TINYINT, ub BIGINT UNSIGNED, de DECIMAL(12,3), wide DECIMAL(65,30),
  fl FLOAT, db DOUBLE, d DATE, dtm DATETIME(6), ts TIMESTAMP(3) NULL, tm TIME(2), y YEAR,
  bi BINARY(4), vb VARBINARY(10), bl BLOB, b5 BIT(5), ch CHAR(5), vc VARCHAR(20),
  la VARCHAR(10) CHARACTER SET latin1, en ENUM('x','y'), st SET('a','b','c'), js JSON)"""
ROW = ("(%s, -128, 18446744073709551615, -12.5, 1.000000000000000000000000000001, 0.1, "
       "-1e200, '2024-02-29', '2024-01-01 10:00:00.123456', '2024-01-01 10:00:00.5', "
       "'-838:59:59.99', 2024, 'ab', x'0000ff', x'00', b'10101', 'ab  ', 'h\u00e9 \U0001F600', "
       "'caf\u00e9', 'y', 'c,a', '{\"k\": [1, 2]}')")


def _report(engine, pipeline, name=None):
    table = pipeline.table(name) if name else pipeline.tables[0]
    return verify_table(engine, pipeline, table, checkpoint(engine, pipeline))


def test_every_type_family_checksums_equal_and_one_changed_value_is_named(
        mariadb, database, make_pipeline, engine):
    mariadb.execute(TYPES, db=database)
    with mariadb.connect(database) as conn, conn.cursor() as cur:
        cur.executemany(f"INSERT INTO t VALUES {ROW}", [(i,) for i in range(1, 2501)])
        cur.execute("INSERT INTO t (id) VALUES (3000)")  # NULL in every type
    pipeline = make_pipeline(f"- name: t\n  source: {database}.t")
    run(pipeline, engine)
    report = _report(engine, pipeline)
    assert report.equal, report.summary()
    assert report.buckets == 3 and report.source_rows == report.silver_rows == 2501
    for column, value in (("vc", "'other'"), ("dtm", "'2024-01-01 10:00:00.123457'"),
                          ("db", "-1.0000001e200"), ("bl", "x'0001'"), ("ts", "NULL")):
        with mariadb.connect(database) as conn, conn.cursor() as cur:
            cur.execute("SET sql_log_bin = 0")
            cur.execute(f"UPDATE t SET {column} = {value} WHERE id = 1500")
        report = _report(engine, pipeline)
        assert not report.equal, column
        assert report.differing == [f"{database}.t split 1"], column
        assert "1 different (key id: 1500)" in report.summary(), column
        run(pipeline, engine)  # nothing in the binlog: silver still differs
        with mariadb.connect(database) as conn, conn.cursor() as cur:
            cur.execute(f"UPDATE t SET {column} = (SELECT {column} FROM (SELECT * FROM t) c "
                        f"WHERE id = 1499) WHERE id = 1500")  # logged: silver follows
        run(pipeline, engine)
        final = _report(engine, pipeline)
        assert final.equal, final.summary()


def test_string_keys_use_hash_buckets_and_find_missing_and_extra_rows(
        mariadb, database, make_pipeline, engine):
    mariadb.execute("CREATE TABLE s (region VARCHAR(8), code VARCHAR(8), v INT, "
                    "PRIMARY KEY (region, code)) COLLATE utf8mb4_general_ci", db=database)
    with mariadb.connect(database) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO s VALUES (%s, %s, %s)",
                        [(r, f"{'AbCd'[i % 4]}{i}", i) for r in ("eu", "US") for i in range(1500)])
    pipeline = make_pipeline(f"- name: s\n  source: {database}.s\n"
                             f"  projection: SELECT region, code, v * 2 AS twice FROM s")
    run(pipeline, engine)
    report = _report(engine, pipeline)
    assert report.equal, report.summary()
    assert report.buckets >= 3 and report.differing == []
    with mariadb.connect(database) as conn, conn.cursor() as cur:
        cur.execute("SET sql_log_bin = 0")
        cur.execute("DELETE FROM s WHERE region = 'eu' AND code = 'a4'")
        cur.execute("INSERT INTO s VALUES ('zz', 'q', 1)")
    summary = _report(engine, pipeline).summary()
    assert "1 missing in silver (key region, code: (zz, q))" in summary
    assert "1 not in the source (key region, code: (eu, A4))" in summary


def test_shards_are_checked_per_source_table(mariadb, database, make_pipeline, engine):
    for shard in ("o_1", "o_2"):
        mariadb.execute(f"CREATE TABLE {shard} (id INT PRIMARY KEY, x DOUBLE)",
                        f"INSERT INTO {shard} VALUES (1, 1.5), (2, NULL)", db=database)
    pipeline = make_pipeline(f"- name: o\n  source: {database}\\.o_[0-9]+")
    run(pipeline, engine)
    assert _report(engine, pipeline).equal
    with mariadb.connect(database) as conn, conn.cursor() as cur:
        cur.execute("SET sql_log_bin = 0")
        cur.execute("UPDATE o_2 SET x = 1.5000001 WHERE id = 1")
    report = _report(engine, pipeline)
    assert report.differing == [f"{database}.o_2 bucket 0"]
    assert "1 different (key id, _cdc_source_table" not in report.summary()  # per shard key
    assert "1 different (key id: 1)" in report.summary()


def test_verify_reads_the_source_read_only_with_a_time_limit(mariadb, database, engine,
                                                            make_pipeline):
    """A heavy projection must not load a production primary for long: verify's statements
    stop after source.verify_timeout_seconds, with a message saying so."""
    from cdc_sql.errors import SourceError

    mariadb.execute("CREATE TABLE big (id INT PRIMARY KEY, v VARCHAR(40))",
                    "INSERT INTO big SELECT seq, MD5(seq) FROM seq_1_to_200000", db=database)
    table = (f"- name: big\n  source: {database}.big\n"
             f"  projection: SELECT id, SHA2(REPEAT(v, 20), 512) AS h FROM big")
    pipeline = make_pipeline(table, chunk_size=50000)
    run(pipeline, engine)
    assert _report(engine, pipeline).equal
    slow = make_pipeline(table, chunk_size=50000, verify_timeout_seconds=0.001)
    with pytest.raises(SourceError, match="ran longer than source.verify_timeout_seconds"):
        _report(engine, slow)
