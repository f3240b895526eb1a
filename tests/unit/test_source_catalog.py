"""Which schemas preflight reads whole (source/schema.read_whole): those a pipeline wants at
least half the tables of; a few tables of a large schema are read on their own."""
from __future__ import annotations

from cdc_sql.source.schema import read_whole


def test_a_schema_per_tenant_is_read_whole():
    listed = [(f"tenant{n}", "orders") for n in range(1000)] + [("app", "users")]
    assert read_whole(listed[:-1], listed) == {f"tenant{n}" for n in range(1000)}


def test_a_few_tables_of_a_large_schema_are_read_alone():
    listed = [("big", f"t{n}") for n in range(1000)] + [("small", "a"), ("small", "b")]
    assert read_whole([("big", "t1"), ("big", "t2"), ("small", "a")], listed) == {"small"}


def test_half_of_a_schema_is_read_whole_and_a_table_wanted_twice_counts_once():
    listed = [("db", "a"), ("db", "b"), ("db", "c"), ("db", "d")]
    assert read_whole([("db", "a"), ("db", "b")], listed) == {"db"}
    assert read_whole([("db", "a"), ("db", "a")], listed) == set()
    assert read_whole([], listed) == set()
