"""The real-world corpus (tests/corpus): a rental-store schema with cascading foreign keys and
triggers, every charset and collation the server ships, zero dates in keys of every temporal
type, odd table and database names, ZEROFILL, FLOAT(M,D), BIGINT UNSIGNED keys at their
maximum, MariaDB's INET4/INET6/UUID, a table without a key and a declared one. Loaded before
the snapshot and again after it, then changed (boundary values, NULLs, key changes, deletes,
cascades, one transaction over every table); silver must equal MariaDB value by value, and
`verify` must agree."""
import pytest

from cdc_sql.ops.verify import compare_table, verify_table
from tests.corpus import data
from tests.integration.helpers import checkpoint, run

pytestmark = pytest.mark.integration


@pytest.fixture
def corpus(mariadb, database):
    with mariadb.connect(database) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")  # zero dates, as old applications write them
        for statement in data.schema(cur):
            cur.execute(statement)
        data.load(cur, 1)
    odd = data.quoted(data.ODD_DATABASE)
    mariadb.execute(f"CREATE DATABASE {odd}",
                    f"CREATE TABLE {odd}.{data.quoted(data.ODD_TABLES[0])} "
                    f"(id INT PRIMARY KEY, v VARCHAR(10))",
                    f"INSERT INTO {odd}.{data.quoted(data.ODD_TABLES[0])} VALUES (1, 'a')")
    yield database
    mariadb.execute(f"DROP DATABASE {odd}")


def tables(mariadb, database) -> list[tuple[str, str, str]]:
    """(silver name, pipeline source, extra YAML) for every corpus table."""
    names = [row[0] for row in mariadb.query(
        "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
        "ORDER BY TABLE_NAME", (database,))]
    out = []
    for i, name in enumerate(names):
        extra = "\n  primary_key: [a]" if name == "no_key" else ""
        out.append((f"c{i}", f"{data.quoted(database)}.{data.quoted(name)}", extra))
    out.append(("odd_db", f"{data.quoted(data.ODD_DATABASE)}.{data.quoted(data.ODD_TABLES[0])}",
                ""))
    return out


def test_the_corpus_reaches_silver_exactly_by_snapshot_binlog_and_changes(
        mariadb, corpus, engine, make_pipeline):
    entries = tables(mariadb, corpus)
    assert len(entries) > 30
    yaml = "\n".join(f"- name: {name}\n  source: \"{source.replace(chr(34), chr(92) + chr(34))}\""
                     f"{extra}" for name, source, extra in entries)
    pipeline = make_pipeline(yaml, binlog_batch_rows=7)
    run(pipeline, engine)  # the first half, by snapshot
    with mariadb.connect(corpus) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")
        data.load(cur, 101)  # the second half, by binlog inserts
        data.change(cur)
    odd = f"{data.quoted(data.ODD_DATABASE)}.{data.quoted(data.ODD_TABLES[0])}"
    mariadb.execute(f"INSERT INTO {odd} VALUES (2, 'b')", f"UPDATE {odd} SET v = 'c' WHERE id = 1")
    run(pipeline, engine)
    state = checkpoint(engine, pipeline)
    differing = {}
    for table in pipeline.tables:
        diff = compare_table(engine, pipeline, table)
        if diff:
            differing[table.source] = diff
        report = verify_table(engine, pipeline, table, state)
        if not report.equal:
            differing[f"verify {table.source}"] = report.summary()
    assert not differing, "\n".join(f"{k}: {v}" for k, v in differing.items())
