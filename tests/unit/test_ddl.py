"""What a binlog DDL statement touches, renames and truncates; which type changes widen."""
import pytest
from pyspark.sql import types as T

from cdc_sql.lake.silver import widens
from cdc_sql.source.ddl import is_truncate, renamed_columns, touched_tables


@pytest.mark.parametrize("statement, tables", [
    ("ALTER TABLE t ADD COLUMN c INT", {("shop", "t")}),
    ("ALTER TABLE Other.T DROP COLUMN c", {("other", "t")}),
    ("TRUNCATE TABLE t", {("shop", "t")}),
    ("DROP TABLE IF EXISTS t, u", {("shop", "t"), ("shop", "u")}),
    ("CREATE TABLE orders_3 (id INT PRIMARY KEY)", {("shop", "orders_3")}),
    ("RENAME TABLE t TO t2", None),  # sqlglot cannot read it: every captured table may change
])
def test_touched_tables(statement, tables):
    assert touched_tables(statement, "shop") == tables


def test_renamed_columns():
    assert renamed_columns("ALTER TABLE t RENAME COLUMN a TO b") == [("a", "b")]
    assert renamed_columns("ALTER TABLE t CHANGE a b BIGINT, CHANGE c c INT, ADD d INT") == [("a", "b")]
    assert renamed_columns("ALTER TABLE t MODIFY a BIGINT") == []
    assert renamed_columns("not sql at all (") == []


def test_is_truncate():
    assert is_truncate("TRUNCATE t") and is_truncate("truncate table `db`.`t`")
    assert not is_truncate("DELETE FROM t")


@pytest.mark.parametrize("old, new, ok", [
    (T.IntegerType(), T.LongType(), True),
    (T.LongType(), T.IntegerType(), False),
    (T.ShortType(), T.DecimalType(5, 0), True),
    (T.LongType(), T.DecimalType(20, 0), True),
    (T.LongType(), T.DecimalType(20, 2), False),
    (T.DecimalType(6, 2), T.DecimalType(10, 4), True),
    (T.DecimalType(6, 2), T.DecimalType(6, 3), False),
    (T.FloatType(), T.DoubleType(), True),
    (T.IntegerType(), T.StringType(), False),
])
def test_widens(old, new, ok):
    assert widens(old, new) is ok
