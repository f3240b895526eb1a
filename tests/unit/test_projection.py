import pytest

from cdc_sql.config.model import Table
from cdc_sql.config.projection import parse_projection, resolve_projection
from cdc_sql.errors import ConfigError

TABLE = Table(name="orders", source="shop.orders")
COLUMNS = ["id", "customer_id", "status", "amount", "note"]


def resolve(sql: str, key=("id",)):
    return resolve_projection(Table(name="orders", source="shop.orders", projection=sql),
                              COLUMNS, list(key))


def rejects(sql: str, fragment: str):
    with pytest.raises(ConfigError) as info:
        resolve(sql)
    assert fragment in str(info.value), str(info.value)


def test_star_is_every_column():
    projection = resolve("SELECT * FROM orders")
    assert [name for _, name in projection.columns] == COLUMNS
    assert projection.key == ("id",) and projection.where is None


def test_default_projection_is_star():
    projection = resolve_projection(TABLE, COLUMNS, ["id"])
    assert [name for _, name in projection.columns] == COLUMNS


def test_mysql_functions_transpile_to_spark():
    projection = resolve("SELECT id, IFNULL(note, '') AS note, amount FROM orders "
                         "WHERE status <> 'new'")
    assert projection.columns[1] == ("COALESCE(`note`, '')", "note")
    assert projection.where == "`status` <> 'new'"


def test_spark_dialect_accepted():
    projection = resolve("SELECT id, amount FROM orders WHERE note RLIKE '^x'")
    assert "RLIKE" in projection.where


def test_renamed_key_is_tracked():
    assert resolve("SELECT id AS order_id, amount FROM orders").key == ("order_id",)


@pytest.mark.parametrize("sql, fragment", [
    ("SELECT id, amount FROM orders WHERE", "syntax error"),
    ("SELECT id, nope FROM orders", "column `nope` does not exist"),
    ("SELECT amount FROM orders", "drops the primary-key column `id`"),
    ("SELECT id, SUM(amount) AS s FROM orders", "aggregate"),
    ("SELECT id, ROW_NUMBER() OVER (ORDER BY id) AS r FROM orders", "window function"),
    ("SELECT id, RAND() AS r FROM orders", "not deterministic"),
    ("SELECT id, NOW() AS r FROM orders", "not deterministic"),
    ("SELECT id FROM orders WHERE created < CURRENT_TIMESTAMP", "not deterministic"),
    ("SELECT o.id FROM orders o JOIN customers c ON o.customer_id = c.id", "JOIN"),
    ("SELECT id FROM orders WHERE id IN (SELECT id FROM x)", "exactly one table"),
    ("SELECT id FROM customers", "source table is `orders`"),
    ("SELECT id FROM orders GROUP BY id", "GROUP BY"),
    ("SELECT id FROM orders ORDER BY id", "ORDER BY"),
    ("SELECT id FROM orders LIMIT 5", "LIMIT"),
    ("SELECT DISTINCT id FROM orders", "DISTINCT"),
    ("DELETE FROM orders", "expected `SELECT"),
    ("SELECT id, amount * 2 FROM orders", "give the expression"),
    ("SELECT id, amount AS id FROM orders", "twice"),
    ("SELECT id, amount AS _cdc_x FROM orders", "reserved"),
    ("SELECT 1; SELECT 2", "exactly one SELECT"),
])
def test_rejected(sql, fragment):
    rejects(sql, fragment)


def test_offline_parse_checks_from_table():
    with pytest.raises(ConfigError, match="source table is `orders`"):
        parse_projection("SELECT id FROM other", TABLE)
