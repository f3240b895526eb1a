"""Preflight reads a schema the pipeline wants most tables of whole, a query for all its
tables' columns, another for their unique keys, another for their partitions
(source/schema.Catalog): what it finds is what a table read on its own gives."""
from __future__ import annotations

from cdc_sql.source import mysql
from cdc_sql.source.schema import read_table, read_tables

TABLES = [
    "CREATE TABLE plain (id INT PRIMARY KEY, v VARCHAR(20) NOT NULL, d DECIMAL(12,3), "
    "t DATETIME(6), f FLOAT, e ENUM('a','b'))",
    "CREATE TABLE Plain (ID BIGINT UNSIGNED PRIMARY KEY, w TEXT)",  # equal in the collation
    "CREATE TABLE keyed (a INT NOT NULL, b VARCHAR(10) NOT NULL, c INT, "
    "UNIQUE KEY zz (c), UNIQUE KEY ab (b, a))",
    "CREATE TABLE declared (a INT, b INT, UNIQUE KEY u (a))",
    "CREATE TABLE ranged (id INT NOT NULL, k INT NOT NULL, PRIMARY KEY (id, k)) "
    "PARTITION BY RANGE (k) (PARTITION p0 VALUES LESS THAN (10), "
    "PARTITION p1 VALUES LESS THAN MAXVALUE)",
    "CREATE TABLE subparted (id INT NOT NULL, k INT NOT NULL, PRIMARY KEY (id, k)) "
    "PARTITION BY RANGE (k) SUBPARTITION BY HASH (id) SUBPARTITIONS 2 "
    "(PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN (20))",
    "CREATE TABLE versioned (id INT PRIMARY KEY, v INT, "
    "since TIMESTAMP(6) GENERATED ALWAYS AS ROW START INVISIBLE, "
    "until TIMESTAMP(6) GENERATED ALWAYS AS ROW END INVISIBLE, "
    "PERIOD FOR SYSTEM_TIME(since, until)) WITH SYSTEM VERSIONING",
    "CREATE TABLE `p%s%cent` (`k``q` INT PRIMARY KEY)",
]


def test_a_schema_read_whole_gives_each_table_as_read_alone(mariadb, database, make_pipeline):
    mariadb.execute(*TABLES, db=database)
    # a source matches a name in any case: `plain` and `Plain` both match both entries
    names = ["plain", "Plain", "keyed", "declared", "ranged", "subparted", "versioned",
             "p%s%cent"]
    pipeline = make_pipeline("".join(
        f"- name: t{n}\n  source: {database}.{name}\n" +
        ("  primary_key: [a]\n" if name == "declared" else "") for n, name in enumerate(names)))
    with mysql.cursor(pipeline.source) as cur:
        queries = []
        execute = cur.execute
        cur.execute = lambda sql, *args: queries.append(sql) or execute(sql, *args)
        per_spec = read_tables(cur, pipeline.tables)
        cur.execute = execute
        # the listing, the three of the schema, SHOW CREATE TABLE of the versioned table
        assert len(queries) == 5, queries
        for spec, tables in zip(pipeline.tables, per_spec):
            for table in tables:
                assert table == read_table(cur, database, table.name, spec.primary_key,
                                           "SYSTEM VERSIONED" if table.name == "versioned"
                                           else "BASE TABLE")
    found = [t for tables in per_spec for t in tables]
    assert {t.name for t in found} == set(names)
    by_name = {t.name: t for t in found}
    assert by_name["keyed"].key == ("b", "a") and by_name["keyed"].key_index == "ab"
    assert by_name["plain"].key == ("id",) and by_name["Plain"].key == ("ID",)
    assert by_name["declared"].key_index == "declared"
    assert [p for p, _ in by_name["subparted"].partitioning.partitions] == ["p0", "p1"]
    assert by_name["ranged"].partitioning.column == "k"
    assert by_name["versioned"].row_end == "until"
    assert [c.name for c in by_name["Plain"].columns] == ["ID", "w"]
    assert [c.name for c in by_name["plain"].columns] == ["id", "v", "d", "t", "f", "e"]
