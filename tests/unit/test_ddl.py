"""What a binlog DDL statement touches, renames and truncates; which type changes widen."""
import pytest
from pyspark.sql import types as T

from cdc_sql.lake.silver.evolve import widens
from cdc_sql.source.ddl import is_truncate, renamed_columns, touched_tables, value_rewrites
from cdc_sql.source.schema import Column


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


@pytest.mark.parametrize("statement, kept", [
    ("CREATE USER 'cdc'@'%' IDENTIFIED BY 'hunter2'", "CREATE USER '?'@'?' IDENTIFIED BY '?'"),
    ("ALTER TABLE t ADD c VARCHAR(9) DEFAULT \"x\" COMMENT 'it''s \\' secret', CHANGE a b INT",
     "ALTER TABLE t ADD c VARCHAR(9) DEFAULT '?' COMMENT '?', CHANGE a b INT"),
    ("ALTER TABLE `we'ird` ADD d BINARY(2) DEFAULT x'00ff' /* 'hunter2' */ -- hunter2\n",
     "ALTER TABLE `we'ird` ADD d BINARY(2) DEFAULT '?'"),
    ("ALTER TABLE t ADD e TEXT DEFAULT _utf8mb4'hunter2' #hunter2",
     "ALTER TABLE t ADD e TEXT DEFAULT _utf8mb4'?'"),
    ("INSERT INTO t VALUES (N'hunter2', b'101')", "INSERT INTO t VALUES ('?', '?')"),
    ("TRUNCATE TABLE `db`.`t`", "TRUNCATE TABLE `db`.`t`"),
    ("SET @x = 'hunter2", "/* a statement sqlglot cannot read: not kept */"),
])
def test_statements_are_kept_without_their_literals_and_comments(statement, kept):
    from cdc_sql.source.ddl import redacted

    assert redacted(statement) == kept
    assert touched_tables(redacted(statement), "shop") == touched_tables(statement, "shop")
    assert renamed_columns(redacted(statement)) == renamed_columns(statement)


@pytest.mark.parametrize("statement", [
    "CREATE USER 'cdc'@'%' IDENTIFIED BY 'hunter2'", "  ALTER USER cdc IDENTIFIED BY 'hunter2'",
    "/* x */ GRANT SELECT ON shop.* TO cdc", "REVOKE ALL ON *.* FROM cdc",
    "SET PASSWORD FOR cdc = PASSWORD('hunter2')", "drop user cdc", "CREATE ROLE r",
    "RENAME USER a TO b", "SET DEFAULT ROLE r FOR cdc",
])
def test_account_statements_touch_no_table_and_are_not_logged(statement, caplog):
    """Capture keeps only statements touching a captured table; one sqlglot cannot read
    counts as touching every table of its database, so these must be known as none."""
    with caplog.at_level("DEBUG"):
        assert touched_tables(statement, "shop") == set()
        assert not is_truncate(statement) and renamed_columns(statement) == []
    assert "hunter2" not in caplog.text and "cdc" not in caplog.text


def test_sqlglot_does_not_log_what_it_cannot_read(caplog):
    with caplog.at_level("DEBUG"):
        assert touched_tables("RENAME TABLE t TO `hunter2`", "shop") is None
    assert "hunter2" not in caplog.text


_BEFORE = {"v": Column("v", "varchar", "varchar(10)", None, None, None, 10),
           "at": Column("at", "datetime", "datetime(6)", None, None, 6, None),
           "c": Column("c", "char", "char(4)", None, None, None, 4)}


@pytest.mark.parametrize("statement, strict, expected", [
    ("ALTER TABLE t ADD COLUMN f INT DEFAULT 5", True, ["column `f` added with a DEFAULT"]),
    ("ALTER TABLE t ADD f INT NOT NULL", True, ["column `f` added with NOT NULL's implicit"]),
    ("ALTER TABLE t ADD f BIGINT AUTO_INCREMENT UNIQUE", True, ["AUTO_INCREMENT values"]),
    ("ALTER TABLE t ADD g INT AS (id * 2) VIRTUAL", True, ["generated values"]),
    ("ALTER TABLE t ADD COLUMN (a INT DEFAULT 1, b INT)", True, ["DEFAULT that sqlglot"]),
    ("ALTER IGNORE TABLE t ADD UNIQUE (v)", True, ["rows of duplicate keys"]),
    ("ALTER TABLE t MODIFY v VARCHAR(5)", False, ["without STRICT_TRANS_TABLES"]),
    ("ALTER TABLE t MODIFY v CHAR(10)", True, ["to CHAR"]),
    ("ALTER TABLE t CHANGE at at2 DATETIME(3)", True, ["column `at` converted to DATETIME(3)"]),
    ("ALTER TABLE t MODIFY at DATETIME", True, ["DATETIME(0)"]),
    # no value changes without row events:
    ("ALTER TABLE t ADD f INT DEFAULT NULL", True, []),
    ("ALTER TABLE t ADD f INT NULL, ADD g TEXT", False, []),
    ("ALTER TABLE t ADD COLUMN (a INT, b INT)", True, []),
    ("ALTER TABLE t MODIFY v VARCHAR(5) NOT NULL", True, []),  # strict: fails where it would cut
    ("ALTER TABLE t MODIFY at DATETIME(6)", True, []),
    ("ALTER TABLE t MODIFY c CHAR(8)", True, []),
    ("ALTER TABLE t ALTER COLUMN v SET DEFAULT 'x'", False, []),
    ("ALTER TABLE t DROP COLUMN v, ADD INDEX (c)", False, []),
    ("CREATE TABLE t2 (id INT DEFAULT 1)", False, []),
])
def test_value_rewrites(statement, strict, expected):
    found = [r.why for r in value_rewrites(statement, _BEFORE, strict)]
    assert len(found) == len(expected) and all(e in f for e, f in zip(expected, found)), found


def test_only_added_columns_are_marked_added():
    """A table whose new columns stay out of silver (ignore_new_columns) minds only the rest."""
    found = value_rewrites("ALTER TABLE t ADD f INT DEFAULT 1, MODIFY at DATETIME", _BEFORE, True)
    assert [r.added for r in found] == [True, False]
