"""The --where predicate of a range re-read: what is refused, in one line naming the table, and
how it is bound for MySQL and Spark (source/predicates.py)."""
from __future__ import annotations

import decimal

import pytest
import sqlglot
from hypothesis import given, settings, strategies as st

from cdc_sql.errors import ConfigError
from cdc_sql.source import predicates
from cdc_sql.source.schema import Column, SourceTable

TABLE = SourceTable("shop", "orders", (
    Column("id", "int", "int", 10, 0, None, None),
    Column("region", "varchar", "varchar(8)", None, None, None, 8),
    Column("amount", "decimal", "decimal(10,2)", 10, 2, None, None),
    Column("day", "date", "date", None, None, None, None)), ("id", "region"))
DAY_KEY = SourceTable("shop", "days", TABLE.columns, ("day",))


@pytest.mark.parametrize("text, canonical", [
    ("id BETWEEN 10 AND 20", "id BETWEEN 10 AND 20"),
    ("ID >= -5 and id < 7.5", "id >= -5 AND id < 7.5"),
    ("id IN (1, 2, 3) OR id IS NULL", "id IN (1, 2, 3) OR id IS NULL"),
    ("NOT (id BETWEEN 1 AND 2) AND region = 'eu'", "NOT (id BETWEEN 1 AND 2) AND region = 'eu'"),
    ("region IN ('eu', 'us') AND id <> 3", "region IN ('eu', 'us') AND id <> 3"),
])
def test_accepted(text, canonical):
    assert predicates.check(text, TABLE) == canonical


@pytest.mark.parametrize("text, says", [
    ("amount > 3", "`amount` is not a key column (id, region)"),
    ("nope = 1", "the table has no column `nope`"),
    ("o.id = 1", "without a table"),
    ("id = SLEEP(1)", "a function is not allowed"),
    ("id IN (SELECT 1)", "a subquery"),
    ("id = @x", "a variable is not allowed"),
    ("id = 1 -- x", "comments"),
    ("id = 1 /* x */", "comments"),
    ("id = 1 # x", "comments"),
    ("id = 1; DROP TABLE t", "several statements"),
    ("id = 1 ORDER BY id", "not a single predicate"),
    ("id = 1 LIMIT 1", "not a single predicate"),
    ("1 = 1", "names no column"),
    ("", "it is empty"),
    ("id = = 1", "not a MySQL predicate"),
    ("region > 'a'", "string key column `region` may only be `=`"),
    ("NOT region = 'a'", "string key column `region`"),
    ("region NOT IN ('a')", "string key column `region`"),
    ("region <> 'a'", "string key column `region`"),
    ("id = id + 1", "is not allowed"),
    ("(id, region) = (1, 'a')", "a row constructor"),
    ("id", "not a condition"),
    ("id AND id = 1", "`id` is not a condition where `AND` wants one"),
    ("(id = 1) = TRUE", "is not a column or value"),
])
def test_refused_in_one_line(text, says):
    with pytest.raises(ConfigError) as raised:
        predicates.check(text, TABLE)
    message = str(raised.value)
    assert says in message and "shop.orders" in message and "\n" not in message


def test_temporal_key_refused():
    with pytest.raises(ConfigError, match="`day` is date"):
        predicates.check("day = '2020-01-01'", DAY_KEY)


def test_values_are_bound_on_both_sides():
    text = predicates.check("id BETWEEN -10 AND 2.5 OR region IN ('e''u', 'us')", TABLE)
    sql, args = predicates.bound(text, "mysql", lambda i: "%s")
    assert sql == "`id` BETWEEN %s AND %s OR `region` IN (%s, %s)"
    assert args == [-10, decimal.Decimal("2.5"), "e'u", "us"]
    sql, args = predicates.bound(text, "spark", lambda i: f":where_{i}")
    assert sql == "`id` BETWEEN :where_0 AND :where_1 OR `region` IN (:where_2, :where_3)"
    inline, none = predicates.bound(text, "mysql", lambda i: "", literal=repr)
    assert none == [] and "'e\\'u'" in inline or "\"e'u\"" in inline
    assert predicates.columns(text) == {"id", "region"}


_atoms = st.sampled_from(["id", "region", "amount", "day", "1", "-2", "'a'", "NULL", "TRUE",
                          "@v", "NOW()", "(SELECT 1)", "id + 1", "x"])
_ops = st.sampled_from(["=", "<", ">=", "<>", " AND ", " OR ", " BETWEEN 1 AND ", " IN ",
                        " IS ", "--", ";", "/*"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_atoms, _ops), min_size=1, max_size=6), _atoms,
       st.booleans())
def test_fuzzed_predicates_are_refused_or_safe(parts, last, wrap):
    """Whatever the text, check either refuses it with one line naming the table or returns a
    predicate that names only key columns and no function, and binds to the same tree."""
    text = "".join(a + o for a, o in parts) + last
    text = f"NOT ({text})" if wrap else text
    try:
        canonical = predicates.check(text, TABLE)
    except ConfigError as exc:
        assert "shop.orders" in str(exc) and "\n" not in str(exc)
        return
    tree = sqlglot.parse_one(canonical, read="mysql")
    assert {c.name for c in tree.find_all(sqlglot.exp.Column)} <= {"id", "region"}
    assert not [f for f in tree.find_all(sqlglot.exp.Func)
                if not isinstance(f, sqlglot.exp.Connector)]
    assert all(not isinstance(op.this, sqlglot.exp.Column)
               for op in tree.find_all(sqlglot.exp.Connector))
    assert predicates.check(canonical, TABLE) == canonical  # stable
    sql, args = predicates.bound(canonical, "spark", lambda i: f":w{i}")
    assert sql.count(":w") == len(args)


def test_a_range_split_reads_its_predicate():
    from cdc_sql.source.splits import Split, group_splits

    ranged = Split("shop.orders", 7, None, None, "id BETWEEN 1 AND 2 OR region = 'eu'")
    assert Split.from_json(ranged.to_json()) == ranged
    assert "predicate" not in Split("shop.orders", 0, None, None).to_json()
    assert ranged.where(["`id`", "`region`"]) == \
        ("`id` BETWEEN %s AND %s OR `region` = %s", [1, 2, "eu"])
    assert ranged.where(["`id`"], literal=lambda v: repr(v))[0] == \
        "`id` BETWEEN 1 AND 2 OR `region` = 'eu'"
    plain = [Split("shop.orders", i, None, None) for i in range(7)]
    assert group_splits([*plain, ranged], 80, 1)[-1] == [ranged]  # always read alone


def test_a_column_name_holding_percent_is_doubled_where_pymysql_binds():
    """pymysql binds values into `%s`, reading any other `%` as a placeholder: a key column
    named with one is doubled in a range split's bound predicate, not where values are
    written in (connectorx) nor for Spark."""
    from cdc_sql.source.splits import Split

    ranged = Split("shop.t", 3, None, None, "`k%s` BETWEEN 1 AND 2")
    assert ranged.where(["`k%%s`"]) == ("`k%%s` BETWEEN %s AND %s", [1, 2])
    assert ranged.where(["`k%s`"], literal=repr)[0] == "`k%s` BETWEEN 1 AND 2"
    assert predicates.bound("`k%s` = 1", "spark", ":v{}".format)[0] == "`k%s` = :v0"
