"""Every function of the projection allow-list gives the same values in silver (Spark SQL, on the
engine) as on the source (the projection transpiled to MySQL, as `verify` runs it): one example
per allowed function over rows with NULLs, negatives, non-ASCII text and edge dates."""
import pytest

from cdc_sql.config.projection import ALLOWED_FUNCTIONS, ALLOWED_NAMES
from cdc_sql.ops.verify import compare_table
from tests.integration.helpers import checkpoint, run

pytestmark = pytest.mark.integration

EXAMPLES = {
    "Upper": "UPPER(s)", "Lower": "LOWER(s)", "Concat": "CONCAT(s, '-', s)",
    "ConcatWs": "CONCAT_WS('/', s, 'x')", "Substring": "SUBSTRING(s, 2, 3)",
    "Trim": "TRIM(p)", "Left": "LEFT(s, 2)", "Right": "RIGHT(s, 2)", "Pad": "LPAD(s, 6, '*')",
    "Replace": "REPLACE(s, 'a', 'A')", "Reverse": "REVERSE(s)", "Repeat": "REPEAT(s, 2)",
    "StrPosition": "LOCATE('b', s)", "Hex": "HEX(n)", "Space": "SPACE(2)",
    "MD5": "MD5(s)", "SHA": "SHA1(s)", "SHA2": "SHA2(s, 256)",
    "Coalesce": "COALESCE(n, -1)", "If": "IF(n > 0, 'pos', 'not')", "Nullif": "NULLIF(n, 0)",
    "Case": "CASE WHEN n > 10 THEN 'big' WHEN n IS NULL THEN 'none' ELSE 'small' END",
    "And": "IF(n > 0 AND s <> '', 1, 0)", "Or": "IF(n > 0 OR s = '', 1, 0)",
    "Abs": "ABS(n)", "Round": "ROUND(x, 1)", "Floor": "FLOOR(x)", "Ceil": "CEIL(x)",
    "Pow": "POWER(n, 2)", "Sqrt": "SQRT(ABS(n))", "Sign": "SIGN(n)", "Exp": "EXP(n / 10)",
    "Ln": "LN(ABS(n) + 1)",
    "Year": "YEAR(d)", "Month": "MONTH(d)", "Day": "DAY(d)", "DayOfMonth": "DAYOFMONTH(d)",
    "Hour": "HOUR(t)", "Minute": "MINUTE(t)", "Second": "SECOND(t)", "TsOrDsToDate": "DATE(t)",
    "DateDiff": "DATEDIFF(d, '2024-01-01')", "DayOfWeek": "DAYOFWEEK(d)",
    "DayOfYear": "DAYOFYEAR(d)", "Quarter": "QUARTER(d)", "LastDay": "LAST_DAY(d)",
    "WeekOfYear": "WEEKOFYEAR(d)", "Cast": "CAST(n AS CHAR)",
}
NAMED = {"CRC32": "CRC32(s)"}


def test_every_allowed_function_has_an_example():
    allowed = {name for names in ALLOWED_FUNCTIONS.values() for name in names}
    assert set(EXAMPLES) == allowed and set(NAMED) == set(ALLOWED_NAMES)


def test_allowed_functions_agree_on_the_source_and_in_silver(mariadb, database, engine,
                                                               make_pipeline):
    mariadb.execute(
        "CREATE TABLE fn (id INT PRIMARY KEY, s VARCHAR(20), p VARCHAR(20), n INT, "
        "x DECIMAL(8,3), d DATE, t DATETIME(6))",
        "INSERT INTO fn VALUES (1, 'abc', '  pad  ', 12, 2.345, '2024-02-29', "
        "'2024-02-29 23:59:58.5'), (2, 'ba', 'x', -7, -2.355, '2023-12-31', "
        "'2023-12-31 00:00:00'), (3, 'é😀ü', '', 0, 0.05, '2000-01-01', '2000-01-01 12:30:00'), "
        "(4, NULL, NULL, NULL, NULL, NULL, NULL), (5, '', ' ', 1, 1.5, '1999-06-15', "
        "'1999-06-15 06:07:08.000001')", db=database)
    columns = ", ".join(f"{sql} AS f_{name.lower()}" for name, sql in {**EXAMPLES, **NAMED}.items())
    pipeline = make_pipeline(f"- name: fn\n  source: {database}.fn\n"
                             f"  projection: \"SELECT id, {columns} FROM fn\"")
    run(pipeline, engine)
    assert compare_table(engine, pipeline, pipeline.tables[0]) == ""
    mariadb.execute("UPDATE fn SET n = n + 100, s = CONCAT(s, 'z') WHERE id <= 3", db=database)
    run(pipeline, engine)  # the binlog path too
    assert compare_table(engine, pipeline, pipeline.tables[0]) == ""
    from cdc_sql.ops.verify import verify_table

    report = verify_table(engine, pipeline, pipeline.tables[0], checkpoint(engine, pipeline))
    assert report.equal, report.summary()
