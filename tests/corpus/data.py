"""The corpus: its tables, the rows to load before and after the snapshot, and the changes.

Every table is loaded in two halves: ids 1..N before the snapshot (they reach silver by
snapshot), N+1..2N after it (by binlog inserts); then `change` updates boundary values, sets
NULLs, changes keys and deletes rows, and one transaction touches every table.
"""
from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).parent
SAMPLE = "Aé€Łжא中😀"  # characters some charsets can hold and others cannot ('?' there)
ODD_TABLES = ['we"ird', "[brackets]$", "pipe|at@", "订单", "with space", "dot.ted",
              "back`tick", "per%cent", "tilde~name", "UPPER_lower"]
ODD_DATABASE = "odd-db.名"
ZERO_DATES = ["0000-00-00", "2001-00-00", "2001-01-00", "0000-01-01", "1999-12-31",
              "2024-02-29"]


def quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def rental_statements() -> list[str]:
    text = (HERE / "rental.sql").read_text()
    statements, current = [], []
    for line in text.splitlines():
        if line.startswith("--") or not line.strip():
            continue
        current.append(line)
        if line.rstrip().endswith(";"):
            statements.append("\n".join(current).rstrip().rstrip(";"))
            current = []
    return statements


def charset_tables(cur) -> list[str]:
    """One column per charset the server ships, and one per collation."""
    cur.execute("SELECT CHARACTER_SET_NAME FROM information_schema.CHARACTER_SETS "
                "WHERE CHARACTER_SET_NAME <> 'binary' ORDER BY 1")
    charsets = [row[0] for row in cur.fetchall()]
    cur.execute("SELECT COLLATION_NAME, CHARACTER_SET_NAME FROM information_schema.COLLATIONS "
                "WHERE CHARACTER_SET_NAME <> 'binary' AND ID IS NOT NULL ORDER BY ID")
    collations = cur.fetchall()
    charset_columns = ", ".join(f"c_{cs} VARCHAR(40) CHARACTER SET {cs}" for cs in charsets)
    collation_columns = ", ".join(f"k_{i} VARCHAR(3) CHARACTER SET {cs} COLLATE {name}"
                                  for i, (name, cs) in enumerate(collations))
    return [f"CREATE TABLE charsets_all (id INT PRIMARY KEY, {charset_columns}) "
            f"ROW_FORMAT=DYNAMIC",
            f"CREATE TABLE collations_all (id INT PRIMARY KEY, {collation_columns}) "
            f"ROW_FORMAT=DYNAMIC"]


def charset_rows(cur, first: int) -> list[str]:
    cur.execute("SELECT CHARACTER_SET_NAME, MAXLEN FROM information_schema.CHARACTER_SETS "
                "WHERE CHARACTER_SET_NAME <> 'binary' ORDER BY 1")
    charsets = cur.fetchall()
    names = ", ".join(f"c_{cs}" for cs, _ in charsets)
    text = ", ".join(f"'{SAMPLE} {cs}'" for cs, _ in charsets)
    # single-byte charsets: every byte but the quote-sensitive ones, as the charset reads it
    every_byte = bytes(b for b in range(0x20, 0x100) if b not in (0x27, 0x5C)).hex()
    raw = ", ".join(f"CONVERT(UNHEX('{every_byte}') USING {cs})" if maxlen == 1 else
                    f"'{cs} ✓'" for cs, maxlen in charsets)
    cur.execute("SELECT COUNT(*) FROM information_schema.COLLATIONS "
                "WHERE CHARACTER_SET_NAME <> 'binary' AND ID IS NOT NULL")
    count = cur.fetchone()[0]
    keys = ", ".join(f"k_{i}" for i in range(count))
    return [f"INSERT INTO charsets_all (id, {names}) VALUES ({first}, {text}), "
            f"({first + 1}, {raw}), ({first + 2}, {', '.join(['NULL'] * len(charsets))})",
            f"INSERT INTO collations_all (id, {keys}) VALUES ({first}, "
            f"{', '.join(['%s'] * count)})" % tuple(["'Ab '"] * count)]


TYPES = """CREATE TABLE types_all (
  id INT PRIMARY KEY, zf INT(5) ZEROFILL, zu SMALLINT UNSIGNED ZEROFILL, fmd FLOAT(7,4),
  ff FLOAT, dd DOUBLE(12,3), bu BIGINT UNSIGNED, b1 BIT(1), b64 BIT(64), yr YEAR,
  dec0 DECIMAL(5,0), dec65 DECIMAL(65,30), tm TIME(4), dt DATETIME, ts TIMESTAMP(6) NULL,
  en ENUM('Small','Medium','Größe','🎉'), st SET('Read','Write','Exécuter','🔥'),
  tt TINYTEXT, mt MEDIUMTEXT CHARACTER SET latin1, lb LONGBLOB, js JSON,
  bn BINARY(3), vb VARBINARY(8), i6 INET6, i4 INET4, uu UUID, g POINT,
  pk2 CHAR(2) CHARACTER SET ascii, UNIQUE KEY (pk2))"""

ZERO_KEYS = [
    "CREATE TABLE zk_date (d DATE NOT NULL PRIMARY KEY, v VARCHAR(20))",
    "CREATE TABLE zk_datetime (id INT NOT NULL, dt DATETIME(3) NOT NULL, v VARCHAR(20), "
    "PRIMARY KEY (id, dt))",
    "CREATE TABLE zk_timestamp (ts TIMESTAMP(2) NOT NULL PRIMARY KEY, v VARCHAR(20))",
]
NO_KEY = "CREATE TABLE no_key (a INT, b VARCHAR(10), c DATE)"
UNSIGNED_KEY = "CREATE TABLE big_key (id BIGINT UNSIGNED PRIMARY KEY, v INT)"
# one row: every file of it has min = max (a Delta statistics trap for wide decimals)
UNSIGNED_ONE = "CREATE TABLE big_one (id BIGINT UNSIGNED PRIMARY KEY, d DECIMAL(38,0))"


def types_rows(first: int) -> list[str]:
    rows = []
    values = [
        ("0", "0", "-1.4", "-1.1", "0.5", "0", "b'0'", "0", "1901", "-99999",
         f"'-{'9' * 35}.{'9' * 30}'", "'-838:59:59.9999'", "'1000-01-01 00:00:00'",
         "'1970-01-01 00:00:01'", "'Small'", "'Read,Exécuter'", "''", "'café'", "x''",
         "'null'", "x'000000'", "x''", "'::'", "'0.0.0.0'",
         "'00000000-0000-0000-0000-000000000000'", "ST_GeomFromText('POINT(0 0)')"),
        ("12345", "65535", "999.9999", "3.40282e38", "-123456789.123", "18446744073709551615",
         "b'1'", "18446744073709551615", "2155", "99999", f"'{'9' * 35}.{'9' * 30}'",
         "'838:59:59.0001'", "'9999-12-31 23:59:59'", "'2038-01-19 03:14:07.999999'",
         "'🎉'", "'Read,Write,Exécuter,🔥'", "'tiny ✓'", "'Grüße'", "x'00ff00'",
         "'{\"a\": [1, 2.5, \"é\"], \"b\": null}'", "x'ff'", "x'00000001'",
         "'2001:db8::ff00:42:8329'", "'255.255.255.255'",
         "'123e4567-e89b-12d3-a456-426614174000'", "ST_GeomFromText('POINT(-1.5 2.25)')"),
    ]
    for n, row in enumerate(values):
        rows.append(f"INSERT INTO types_all VALUES ({first + n}, {', '.join(row)}, "
                    f"'{chr(65 + (first + n) % 26)}{chr(65 + (first + n) // 26 % 26)}')")
    rows.append(f"INSERT INTO types_all (id) VALUES ({first + 2})")  # NULL everywhere
    return rows


def zero_key_rows(first: int) -> list[str]:
    half = ZERO_DATES[:3] if first == 1 else ZERO_DATES[3:]
    rows = [f"INSERT INTO zk_date VALUES ('{d}', 'v{first}')" for d in half]
    rows += [f"INSERT INTO zk_datetime VALUES ({first}, '{d} 10:00:00.250', 'v')" for d in half]
    stamps = ["0000-00-00 00:00:00", "1970-01-01 00:00:01.5"] if first == 1 else \
        ["2038-01-19 03:14:07.99", "2024-02-29 12:00:00"]
    rows += [f"INSERT INTO zk_timestamp VALUES ('{ts}', 'v')" for ts in stamps]
    return rows


def odd_tables() -> list[str]:
    return [f"CREATE TABLE {quoted(name)} (id INT PRIMARY KEY, `odd col` VARCHAR(20))"
            for name in ODD_TABLES]


def odd_rows(first: int) -> list[str]:
    return [f"INSERT INTO {quoted(name)} VALUES ({first}, 'x{first}'), ({first + 1}, NULL)"
            for name in ODD_TABLES]


def rental_rows(first: int) -> list[str]:
    """Two rows per table at ids first, first+1 (parents before children)."""
    a, b = first, first + 1
    return [
        f"INSERT INTO language VALUES ({a}, 'English', '2020-01-01'), "
        f"({b}, 'Français', '2020-01-02')",
        f"INSERT INTO country VALUES ({a}, 'Österreich'), ({b}, '日本')",
        f"INSERT INTO city VALUES ({a}, 'Wien', {a}), ({b}, '東京', {b})",
        f"INSERT INTO address VALUES ({a}, '1 Main St', 'Mitte', {a}, NULL, '+43 1', "
        f"ST_GeomFromText('POINT(16.37 48.2)'), '2020-01-01'), ({b}, '2-1 丸の内', '千代田', {b}, "
        f"'100-0005', '', ST_GeomFromText('POINT(139.76 35.68)'), '2020-01-01')",
        f"INSERT INTO film (film_id, title, description, release_year, language_id, length, "
        f"rating, special_features) VALUES ({a}, 'ACADEMY DINOSAUR', 'A Epic Drama', 2006, "
        f"{a}, 86, 'PG', 'Deleted Scenes,Behind the Scenes'), ({b}, 'Ça tourne', NULL, 1901, "
        f"{b}, NULL, 'NC-17', 'Trailers,Commentaries,Deleted Scenes,Behind the Scenes')",
        f"INSERT INTO actor VALUES ({a}, 'PENELOPE', 'GUINESS', '2020-01-01'), "
        f"({b}, 'Zoë', 'Ñúñez', '2020-01-01')",
        f"INSERT INTO film_actor VALUES ({a}, {a}, '2020-01-01'), ({b}, {a}, '2020-01-01'), "
        f"({b}, {b}, '2020-01-01')",
        f"INSERT INTO customer VALUES ({a}, 1, 'MARY', 'SMITH', 'mary@example.org', {a}, "
        f"TRUE, '2006-02-14 22:04:36', '2020-01-01'), ({b}, 2, 'Jürgen', 'Müller', NULL, {b}, "
        f"FALSE, '2006-02-14 22:04:37', NULL)",
        f"INSERT INTO rental VALUES ({a}, '2005-05-24 22:53:30', 367, {a}, NULL, 1, "
        f"'2020-01-01'), ({b}, '2005-05-24 22:53:30', 1525, {b}, '2005-05-28 19:40:33', 1, "
        f"'2020-01-01')",
        f"INSERT INTO payment VALUES ({a}, {a}, 1, {a}, 2.99, '2005-05-25 11:30:37', NULL), "
        f"({b}, {b}, 1, NULL, 999.99, '2005-05-28 10:35:23', '2020-01-01')",
        f"INSERT INTO staff VALUES ({a}, 'Mike', 'Hillyer', x'89504e470d0a1a0a0000', "
        f"'mike@example.org', TRUE, 'Mike', 'secret{a}', '2020-01-01'), ({b}, 'Jon', "
        f"'Stephens', NULL, NULL, TRUE, 'Jon', NULL, '2020-01-01')",
    ]


def load(cur, first: int) -> None:
    """The corpus' rows at ids first.. (1 before the snapshot, 101 after)."""
    for sql in [*rental_rows(first), *types_rows(first), *zero_key_rows(first),
                *charset_rows(cur, first), *odd_rows(first),
                f"INSERT INTO no_key VALUES ({first}, 'a', '2024-01-01'), "
                f"({first + 1}, NULL, NULL)",
                f"INSERT INTO big_key VALUES ({18446744073709551615 - first}, {first}), "
                f"({first}, 0)",
                f"INSERT INTO big_one VALUES ({18446744073709551616 - first}, "
                f"{10 ** 38 - first})"]:
        cur.execute(sql)


def change(cur) -> None:
    """Boundary updates, NULLs, key changes and deletes; then one transaction over every
    table."""
    for sql in [
        "UPDATE film SET special_features = 'Deleted Scenes', rating = 'G' WHERE film_id = 1",
        "UPDATE film SET special_features = '', description = 'changed ✓' WHERE film_id = 102",
        "UPDATE film SET title = 'RENAMED', release_year = 2155 WHERE film_id = 101",
        "DELETE FROM payment WHERE payment_id = 2",
        "UPDATE payment SET rental_id = NULL, amount = -0.01 WHERE payment_id = 101",
        "UPDATE types_all SET zf = 7, fmd = -1.4, bu = 0, st = 'Write,🔥' WHERE id = 1",
        "UPDATE types_all SET id = 9000 WHERE id = 102",
        "DELETE FROM types_all WHERE id = 101",
        "UPDATE zk_date SET v = 'zero changed' WHERE d = '0000-00-00'",
        "UPDATE zk_date SET d = '0000-00-00' WHERE d = '1999-12-31'",  # blocked: duplicate
        "UPDATE zk_date SET d = '2002-00-00' WHERE d = '2001-00-00'",  # key change to a zero
        "DELETE FROM zk_date WHERE d = '2001-01-00'",
        "UPDATE zk_datetime SET dt = '0000-00-00 00:00:00' WHERE id = 101 AND "
        "dt = '2024-02-29 10:00:00.250'",
        "DELETE FROM zk_datetime WHERE id = 1 AND dt = '0000-00-00 10:00:00.250'",
        "UPDATE zk_timestamp SET ts = '2000-01-01 00:00:00' WHERE ts = 0",
        "UPDATE zk_timestamp SET ts = 0 WHERE ts = '2024-02-29 12:00:00'",
        "UPDATE charsets_all SET id = 7000 WHERE id = 2",
        "UPDATE collations_all SET k_0 = NULL WHERE id = 1",
        "UPDATE no_key SET b = 'changed' WHERE a = 1",
        "DELETE FROM big_key WHERE v = 0 AND id = 1",
        "UPDATE big_key SET v = -1 WHERE id = 18446744073709551614",
        # foreign-key cascades, which InnoDB carries out without a binlog event
        "UPDATE country SET country_id = 900 WHERE country_id = 1",    # city: ON UPDATE CASCADE
        "UPDATE city SET city_id = 800 WHERE city_id = 2",             # address
        "UPDATE actor SET actor_id = 9000 WHERE actor_id = 2",         # film_actor's key
        "DELETE FROM actor WHERE actor_id = 101",                      # film_actor: ON DELETE
        "DELETE FROM rental WHERE rental_id = 1",                      # payment: SET NULL
        "UPDATE language SET language_id = 200 WHERE language_id = 102",  # film
        *[f"UPDATE {quoted(name)} SET id = id + 100, `odd col` = 'moved' WHERE id = 1"
          for name in ODD_TABLES],
    ]:
        try:
            cur.execute(sql)
        except Exception as exc:  # noqa: BLE001 - the duplicate-key case is meant to fail
            if "Duplicate entry" not in str(exc):
                raise
    cur.execute("START TRANSACTION")
    for table in ["language", "country", "city", "address", "film", "film_text", "actor",
                  "film_actor", "customer", "rental", "payment", "staff", "types_all",
                  "zk_date", "zk_datetime", "zk_timestamp", "charsets_all", "collations_all",
                  "no_key", "big_key", *ODD_TABLES]:
        cur.execute(f"UPDATE {quoted(table)} SET {_touch(table)} LIMIT 1")
    cur.execute("COMMIT")


def _touch(table: str) -> str:
    columns = {"language": "name = 'Touched'", "country": "country = 'Touched'",
               "city": "city = 'Touched'", "address": "phone = 'touched'",
               "film": "length = 1", "film_text": "description = 'touched'",
               "actor": "last_name = 'Touched'", "film_actor": "last_update = '2021-01-01'",
               "customer": "email = 'touched@example.org'", "rental": "staff_id = 2",
               "payment": "amount = 0.5", "staff": "email = 'touched'",
               "types_all": "tt = 'touched'", "zk_date": "v = 'touched'",
               "zk_datetime": "v = 'touched'", "zk_timestamp": "v = 'touched'",
               "charsets_all": "c_latin1 = 'touched'", "collations_all": "k_1 = 'zz'",
               "no_key": "b = 'touched'", "big_key": "v = 42"}
    return columns.get(table, "`odd col` = 'touched'")


def schema(cur) -> list[str]:
    return [*rental_statements(), TYPES, *ZERO_KEYS, NO_KEY, UNSIGNED_KEY, UNSIGNED_ONE,
            *odd_tables(),
            *charset_tables(cur)]
