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


@pytest.mark.parametrize("sql, shown", [
    ("SELECT id, @env:AWS_SECRET_ACCESS_KEY AS k FROM orders", "@env"),
    ("SELECT id FROM orders WHERE amount > :upto", ":upto"),
    ("SELECT id, ? AS x FROM orders", "?"),
    ("SELECT id, @@hostname AS h FROM orders", "@@hostname"),
    ("SELECT id, @x := id AS y FROM orders", "@x := id"),
    ("SELECT id, @x AS y FROM orders", "@x"),
])
def test_parameters_placeholders_and_variables_are_refused(sql, shown):
    """They read the session or the job's environment (Spark substitutes ${env:...}), not the
    row: only known expression nodes pass."""
    with pytest.raises(ConfigError) as info:
        resolve(sql)
    message = str(info.value)
    assert f"`{shown}" in message and "session or environment variables" in message, message


@pytest.mark.parametrize("sql, clause", [
    ("SELECT id FROM orders QUALIFY id > 1", "QUALIFY id > 1"),
    ("SELECT id FROM orders TABLESAMPLE (10 PERCENT)", "TABLESAMPLE (`TABLESAMPLE (10 PERCENT)"),
    ("SELECT id FROM orders PARTITION (p0)", "PARTITION(p0)"),
    ("SELECT id FROM orders OFFSET 5", "OFFSET 5"),
    ("SELECT id FROM orders FORCE INDEX (PRIMARY)", "an index hint (`FORCE INDEX"),
    ("SELECT id FROM orders USE INDEX (x)", "USE INDEX (x)"),
    ("SELECT id FROM orders FOR UPDATE", "FOR UPDATE"),
    ("SELECT id FROM orders LOCK IN SHARE MODE", "a locking clause (`FOR SHARE"),
    ("SELECT SQL_NO_CACHE id FROM orders", "SQL_NO_CACHE"),
    ("SELECT id FROM orders WINDOW w AS (PARTITION BY id)", "WINDOW"),
    ("SELECT id FROM orders FOR SYSTEM_TIME AS OF TIMESTAMP '2020-01-01'", "a time-travel"),
    ("SELECT id FROM orders SORT BY id", "SORT BY"),
    ("SELECT id FROM orders DISTRIBUTE BY id", "DISTRIBUTE BY"),
])
def test_clauses_silver_would_ignore_are_refused_by_name(sql, clause):
    """A filter an analyst wrote must never silently do nothing: a projection is the select
    list, FROM and WHERE."""
    with pytest.raises(ConfigError) as info:
        resolve(sql)
    message = str(info.value)
    assert clause in message and "select list, FROM <its table> and WHERE" in message, message


def test_operators_literals_and_casts_pass():
    resolve("SELECT id, CAST(amount AS DECIMAL(10,2)) AS c, amount BETWEEN 1 AND 2 AS b, "
            "amount IN (1, 2) AS i, note LIKE 'x%' AS l, note IS NULL AS n, -amount AS m, "
            "NOT amount AS nn, amount DIV 2 AS d, amount % 2 AS md, amount | 1 AS bo, "
            "amount & 1 AS ba, amount ^ 1 AS bx, ~amount AS bn, amount << 1 AS sl, x'00' AS hx, "
            "TRUE AS t, NULL AS z FROM orders AS o WHERE o.amount >= 0 AND (note <> 'a' OR "
            "note IS NOT NULL)")


def test_an_unterminated_string_is_a_syntax_error():
    rejects("SELECT id FROM orders WHERE note = 'abc", "SQL syntax error: a quote or comment "
                                                      "that does not end")
