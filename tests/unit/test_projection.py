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
    projection = resolve("SELECT id, amount FROM orders WHERE note <=> 'x' AND amount > 0")
    assert "IS NOT DISTINCT FROM" in projection.where


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


@pytest.mark.parametrize("sql, name", [
    ("SELECT id, reflect('java.lang.Thread', 'sleep', 1000L) AS x FROM orders", "REFLECT"),
    ("SELECT id, java_method('java.lang.System', 'getenv', 'HOME') AS x FROM orders",
     "JAVA_METHOD"),
    ("SELECT id, LOAD_FILE('/etc/passwd') AS f FROM orders", "LOAD_FILE"),
    ("SELECT id FROM orders WHERE note = LOAD_FILE('/etc/passwd')", "LOAD_FILE"),
    ("SELECT id, USER() AS u FROM orders", "USER"),
    ("SELECT id, DATABASE() AS d FROM orders", "not deterministic"),
    ("SELECT id, CONNECTION_ID() AS c FROM orders", "CONNECTION_ID"),
    ("SELECT id, UNIX_TIMESTAMP() AS t FROM orders", "UNIX_TIMESTAMP"),
    ("SELECT id, SLEEP(1) AS s FROM orders", "SLEEP"),
    ("SELECT id, BENCHMARK(1000000, MD5(note)) AS b FROM orders", "BENCHMARK"),
    ("SELECT id, GET_LOCK('x', 1) AS l FROM orders", "GET_LOCK"),
    ("SELECT id, EXPLODE(SPLIT(note, ',')) AS e FROM orders", "EXPLODE"),
    ("SELECT id, AES_ENCRYPT(note, 'k') AS e FROM orders", "AES_ENCRYPT"),
    ("SELECT id, CONVERT(note USING latin1) AS n FROM orders", "CHARACTER SET latin1"),
    ("SELECT id, LENGTH(note) AS n FROM orders", "LENGTH"),  # bytes in MySQL, characters in Spark
    ("SELECT id FROM orders WHERE note RLIKE '^x'", "REGEXP"),  # MariaDB has no REGEXP_LIKE
    ("SELECT id, ASCII(note) AS a FROM orders", "ASCII"),  # a byte in MySQL, a code point in Spark
    ("SELECT id, GREATEST(amount, 1) AS g FROM orders", "GREATEST"),  # NULL in MySQL, 1 in Spark
    ("SELECT id FROM orders WHERE amount > 0 XOR note = ''", "XOR"),  # not in Spark SQL
])
def test_functions_outside_the_allow_list_are_refused_by_name(sql, name):
    with pytest.raises(ConfigError) as info:
        resolve(sql)
    message = str(info.value)
    assert name in message or name == "not deterministic", message
    assert "not allowed in a projection" in message or "not deterministic" in message


def test_allowed_functions_pass():
    resolve("SELECT id, UPPER(status) AS s, ROUND(amount, 1) AS a, COALESCE(note, '') AS n, "
            "CONCAT_WS('-', status, note) AS c, CRC32(note) AS h, "
            "CASE WHEN amount > 1 THEN 'big' END AS size FROM orders WHERE YEAR(note) > 2000")


def test_udfs_are_allowed(monkeypatch):
    import udfs

    monkeypatch.setitem(udfs.UDFS, "mask_email", (lambda v: v, "string"))
    resolve("SELECT id, mask_email(note) AS n FROM orders")
