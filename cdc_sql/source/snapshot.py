"""Reading one snapshot split: a safe watermark first, then the rows as Arrow batches.

Three readers, same rows, same types:
- `binary` (default when every column allows it and the package's C decoders are built): the
  SELECT prepared and executed in MySQL's binary protocol on the watermark's own connection,
  inside its consistent snapshot (exact), its rows decoded in C (source/result_rows.py), at
  about a fifth of connectorx's CPU a row (docs/performance.md); over TLS too.
- `native`: connectorx, in Rust, Arrow out, several times the rows/s of pymysql. It opens its
  own connection, so the watermark is the consistent-snapshot position read *before* its
  SELECT starts: every transaction at or before it is visible to the SELECT; later ones may be
  too, and replaying them over the rows is harmless (docs/architecture.md).
- `pymysql`: an unbuffered cursor inside the consistent-snapshot transaction itself (exact), with
  per-value normalization; for the column types the other two do not cover yet. FLOAT is
  read as the DOUBLE it widens to: the text protocol prints a FLOAT with six significant
  digits (FLT_MAX comes back as 3.40282e38), a DOUBLE with every digit it needs.
Columns the binary and native readers would get wrong are cast in their SELECT (DECIMAL and
TIME as text, zero dates as NULL) and restored to the contract types in Arrow.
All stream: memory follows the batch, not the split or the table.
"""
from __future__ import annotations

import urllib.parse
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pymysql.converters

from cdc_sql.errors import SourceError, is_transient
from cdc_sql.source import mysql, result_rows
from cdc_sql.source.schema import Column, SourceTable, key_text_name
from cdc_sql.source.splits import Split, bound_quote, mysql_quote
from cdc_sql.source.values import normalize
from cdc_sql.source.failover import server_identity
from cdc_sql.source.watermarks import Watermark, begin_snapshot

_TEMPORAL = {"date", "datetime", "timestamp"}
_AS_TEXT = {"decimal", "time"}
_NATIVE = {"tinyint", "smallint", "mediumint", "int", "bigint", "float", "double", "year",
           "char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set",
           "binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob",
           *_TEMPORAL, *_AS_TEXT}


IN_SNAPSHOT = {"binary", "pymysql"}  # readers whose SELECT runs in the watermark's own snapshot


@dataclass
class SplitRead:
    """An open read of consecutive splits: their watermark is known before the first row
    arrives; each row carries the id of its split (`_cdc_split_id`)."""

    watermark: Watermark
    batches: Iterator[pa.RecordBatch]
    reader: str
    server: str = ""  # the server the watermark is a position of (source/failover.py)
    # ends the read, read to its end or not: a read left open holds its snapshot (and a
    # metadata lock on the table) until its connection is collected
    close: Callable[[], None] = field(default=lambda: None, repr=False)


def read_schema(table: SourceTable) -> pa.Schema:
    """A read's rows: the table's contract types, then the split each row belongs to."""
    return table.arrow_schema.append(pa.field("_cdc_split_id", pa.int32()))


def native_supported(table: SourceTable) -> bool:
    """Whether connectorx can read every column exactly (with the casts below)."""
    return connectorx_installed() and columns_native(table)


def connectorx_installed() -> bool:
    try:
        import connectorx  # noqa: F401
    except ImportError:
        return False
    return True


def columns_native(table: SourceTable) -> bool:
    """Whether the binary and native readers read every column exactly (with the casts below)."""
    return all(_native_ok(c) for c in table.columns)


def _native_ok(column: Column) -> bool:
    # MariaDB's JSON is LONGTEXT (native); MySQL's binary JSON type is not covered yet.
    return column.data_type in _NATIVE


BATCH_ROWS = 65_536  # rows a batch of the snapshot holds at most
# A pymysql batch ends after about this much of values that can be long (`wide_columns`),
# whatever its row count: forty rows of 14 MB are not read as one batch.
BATCH_BYTES = 32 * 2**20


def rows_a_batch(row_bytes: int | None) -> int:
    """How many rows a read's batches hold: BATCH_ROWS, fewer when the catalog says a row
    holds so many bytes that BATCH_ROWS of them pass BATCH_BYTES (connectorx's batches are
    counted in rows only; pymysql's also end past BATCH_BYTES, `_fetch`). Pure."""
    return max(1, min(BATCH_ROWS, BATCH_BYTES // max(row_bytes or 1, 1)))


def read_splits(source, table: SourceTable, splits: list[Split], mariadb: bool,
                batch_rows: int = BATCH_ROWS, reader: str = "auto",
                rows: int | None = None) -> SplitRead:
    """Consecutive splits of one table in one consistent read and one query (`rows`: about
    how many rows they hold, None when not known)."""
    if reader == "auto":
        reader = auto_reader(columns_native(table), connectorx_installed(),
                             result_rows.available(), source.ssl.enabled, rows)
    if reader == "binary":
        return _read_binary(source, table, splits, mariadb, batch_rows)
    if reader == "native":
        return _read_native(source, table, splits, mariadb, batch_rows)
    return _read_pymysql(source, table, splits, mariadb, batch_rows)


# A read of at most this many rows goes through pymysql in the watermark's own connection:
# connectorx's read takes two more connections (its own, and one for the binlog's end after
# it), 1-2 ms more than pymysql's whole read of a table of ten rows, while pymysql's Python
# decoding costs microseconds a row (docs/performance.md, "Measurements behind the code").
# Few rows may still be many bytes, and the catalog's sizes lag a table just filled (InnoDB
# counts long values stored off the row's pages at its next statistics): pymysql's batches are
# bounded in bytes as they arrive (BATCH_BYTES).
SMALL_READ_ROWS = 1_000


def auto_reader(columns_ok: bool, connectorx: bool, compiled: bool, tls: bool,
                rows: int | None) -> str:
    """The reader `snapshot_reader: auto` takes: none but pymysql for a read known to be small
    (SMALL_READ_ROWS) or a column the others cannot read exactly; else the binary reader where
    the C decoders are built, connectorx ("native") where they are not and no TLS is asked for
    (it takes no TLS files). Pure."""
    if not columns_ok or (rows is not None and rows <= SMALL_READ_ROWS):
        return "pymysql"
    if compiled:
        return "binary"
    return "native" if connectorx and not tls else "pymysql"


def read_split(source, table: SourceTable, split: Split, mariadb: bool,
               batch_rows: int = BATCH_ROWS, reader: str = "auto") -> SplitRead:
    return read_splits(source, table, [split], mariadb, batch_rows, reader)


def _select_sql(table: SourceTable, splits: list[Split], native: bool) -> tuple[str, list]:
    """The SELECT of consecutive splits: their union's range, each row tagged with its split
    by comparing its key with the splits' bounds (MySQL compares, in the key's collation). The
    native reader takes no parameters, so bounds are inlined as literals escaped by pymysql;
    pymysql's reader binds them, so its names' `%` are doubled (`bound_quote`)."""
    literal = _literal if native else None
    quote = mysql_quote if native else bound_quote
    key = [quote(k) for k in table.key]
    items = [_select_item(c) if native else _text_protocol_item(c) for c in table.columns]
    items += [f"CAST({quote(c.name)} AS CHAR) AS {quote(key_text_name(c.name))}"
              for c in table.key_text_columns]  # zero dates stay unique in the key
    split_id, args = _split_id_sql(key, splits, literal)
    predicate, where_args = Split.union(splits).where(key, literal=literal)
    return (f"SELECT {', '.join(items)}, {split_id} AS `_cdc_split_id` FROM "
            f"{quote(table.db)}.{quote(table.name)} WHERE {predicate}"), \
        args + where_args


def _split_id_sql(key: list[str], splits: list[Split], literal) -> tuple[str, list]:
    """The id of a row's split: the first whose upper bound the key is below."""
    if len(splits) == 1:
        return str(int(splits[0].split_id)), []
    cases, args = [], []
    for split in splits[:-1]:
        below, bound = replace(split, lower=None).where(key, literal=literal)
        cases.append(f"WHEN {below} THEN {int(split.split_id)}")
        args.extend(bound)
    return f"CASE {' '.join(cases)} ELSE {int(splits[-1].split_id)} END", args


def _text_protocol_item(column: Column) -> str:
    name = bound_quote(column.name)
    return f"CAST({name} AS DOUBLE) AS {name}" if column.data_type == "float" else name


def unscaled(column: Column) -> bool:
    """A DECIMAL of at most 18 digits, read by connectorx as its unscaled integer (the value
    times 10^scale, exact in a BIGINT): Arrow makes it a decimal without parsing text, at less
    than half the CPU. Pure."""
    return column.data_type == "decimal" and (column.precision or 99) <= 18


def _select_item(column: Column) -> str:
    # Longer DECIMALs go as text: connectorx's own Decimal(38,10) path panics on some values
    # ("decimal scale is not equal to expected scale"), seen with DECIMAL(30,10).
    name = mysql_quote(column.name)
    if unscaled(column):
        return f"CAST({name} * {10 ** (column.scale or 0)} AS SIGNED) AS {name}"  # exact
    if column.data_type in _AS_TEXT or column.spark_type == "DECIMAL(20,0)":
        return f"CAST({name} AS CHAR) AS {name}"
    if column.data_type in _TEMPORAL:
        # Zero, partly-zero and invalid dates are NULL (connectorx would panic on them): date
        # arithmetic gives NULL for every date it cannot compute with, in the column's type
        # (a TIMESTAMP's as DATETIME, in the session's UTC), at 40% of what testing each part
        # of the date costs the server.
        return f"DATE_ADD({name}, INTERVAL 0 DAY) AS {name}"
    return name


# -- native (connectorx) ---------------------------------------------------------------------
def _failure(exc: BaseException) -> bool:
    """connectorx raises RuntimeError, and Rust panics arrive as pyo3's PanicException, a
    BaseException; interrupts and exits are not read failures."""
    return isinstance(exc, Exception) or type(exc).__name__ == "PanicException"

def _read_native(source, table: SourceTable, splits: list[Split], mariadb: bool,
                 batch_rows: int) -> SplitRead:
    import connectorx  # optional: without it every split reads with pymysql

    conn, watermark, server = _snapshot_connection(source, mariadb)
    conn.close()  # (its snapshot ends with it) connectorx reads in a connection of its own
    sql, _ = _select_sql(table, splits, native=True)
    try:
        stream = connectorx.read_sql(
            _url(source), sql, return_type="arrow_stream", batch_size=batch_rows,
            pre_execution_query=["SET time_zone = '+00:00'"])
    except BaseException as exc:  # noqa: BLE001 - see _failure
        if not _failure(exc):
            raise
        raise _read_failed(table, splits, _redact(str(exc), source), None) from None
    return SplitRead(watermark, _restore(stream, table, source, splits), "native", server,
                     getattr(stream, "close", lambda: None))


def _restore(stream, table: SourceTable, source, splits: list[Split]) -> Iterator[pa.RecordBatch]:
    """What connectorx returns, in the contract's Arrow types. A read that breaks off (the
    server restarted, the connection was killed) is a SourceError like any other."""
    cast = _contract(table)
    batches = iter(stream)
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except BaseException as exc:  # noqa: BLE001 - see _failure
            if not _failure(exc):
                raise
            raise _read_failed(table, splits, _redact(str(exc), source), None) from None
        yield cast(batch)


def _contract(table: SourceTable) -> Callable[[pa.RecordBatch], pa.RecordBatch]:
    """The cast of a batch as the binary and native readers read it (`_select_item`) to the
    contract's Arrow types (`read_schema`)."""
    schema = read_schema(table)
    scaled = {i for i, column in enumerate(table.columns) if unscaled(column)}

    def cast(batch: pa.RecordBatch) -> pa.RecordBatch:
        arrays = [from_unscaled(batch.column(i), field.type) if i in scaled else
                  pc.cast(batch.column(i), field.type) for i, field in enumerate(schema)]
        return pa.RecordBatch.from_arrays(arrays, schema=schema)
    return cast


def from_unscaled(values: pa.Array, type_: pa.Decimal128Type) -> pa.Array:
    """Decimals of `type_` from their unscaled integers (`unscaled`): the integers as
    decimals of scale 0, then read as of `type_`'s scale (the same 128-bit values). Pure."""
    return pc.cast(values, pa.decimal128(19, 0)).view(type_)


def _read_failed(table: SourceTable, splits: list[Split], message: str,
                 code: int | None) -> SourceError:
    return SourceError(f"snapshot read of {table.qualified} splits {splits[0].split_id}-"
                       f"{splits[-1].split_id} failed: {message}",
                       transient=is_transient(code, message))


def _literal(value) -> str:
    return pymysql.converters.escape_item(value, "utf8mb4")


def _url(source) -> str:
    quote = lambda text: urllib.parse.quote(str(text), safe="")  # noqa: E731
    return (f"mysql://{quote(source.user)}:{quote(source.password)}@{source.host}:{source.port}"
            f"/information_schema")


def _redact(text: str, source) -> str:
    for secret in {source.password, urllib.parse.quote(source.password, safe="")} - {""}:
        text = text.replace(secret, "***")
    return text.splitlines()[0] if text else text


# -- binary (the compiled decoder) ------------------------------------------------------------
def _read_binary(source, table: SourceTable, splits: list[Split], mariadb: bool,
                 batch_rows: int) -> SplitRead:
    conn, watermark, server = _snapshot_connection(source, mariadb)
    sql, _ = _select_sql(table, splits, native=True)
    return SplitRead(watermark, _binary_batches(conn, sql, table, splits, batch_rows), "binary",
                     server, lambda: _close(conn))


def _binary_batches(conn, sql: str, table: SourceTable, splits: list[Split],
                    batch_rows: int) -> Iterator[pa.RecordBatch]:
    cast = _contract(table)
    try:
        for batch in result_rows.read(conn, sql, batch_rows, BATCH_BYTES):
            yield cast(batch)
        conn.commit()
    except pymysql.err.MySQLError as exc:  # the read broke off: a restart, a KILL
        raise _read_failed(table, splits, mysql.first_line(exc),
                           exc.args[0] if exc.args else None) from None
    except result_rows.Failed as exc:
        raise _read_failed(table, splits, str(exc), None) from None
    finally:
        _close(conn)


def _snapshot_connection(source, mariadb: bool):
    """A connection in a consistent snapshot, with the snapshot's watermark and the server."""
    conn = mysql.connect(source, autocommit=False)
    with _closed_on_failure(conn, source), conn.cursor() as first:  # buffered: read to the end
        return conn, begin_snapshot(first, mariadb), server_identity(first, mariadb)


@contextmanager
def _closed_on_failure(conn, source) -> Iterator[None]:
    try:
        yield
    except pymysql.err.MySQLError as exc:
        conn.close()
        raise mysql.explain(exc, source) from None
    except BaseException:
        conn.close()
        raise


# -- pymysql ------------------------------------------------------------------------------------
def _read_pymysql(source, table: SourceTable, splits: list[Split], mariadb: bool,
                  batch_rows: int) -> SplitRead:
    conn, watermark, server = _snapshot_connection(source, mariadb)
    with _closed_on_failure(conn, source):
        cur = conn.cursor(mysql.StreamingCursor)
        sql, args = _select_sql(table, splits, native=False)
        cur.execute(sql, args)  # bound even when there are none: the `%` above are doubled
    return SplitRead(watermark, _batches(conn, cur, table, splits, batch_rows), "pymysql",
                     server, lambda: _close(conn))


_SHORT = {"tinyint", "smallint", "mediumint", "int", "bigint", "float", "double", "year", "bit",
          "enum", "set", *_TEMPORAL, *_AS_TEXT}


def wide_columns(table: SourceTable, batch_rows: int) -> list[int]:
    """The positions of the columns whose values can be long enough that `batch_rows` of them
    pass BATCH_BYTES (four bytes a character), or whose length is not declared (JSON,
    spatial types). Pure."""
    per_value = BATCH_BYTES // max(batch_rows, 1)
    return [i for i, c in enumerate(table.columns)
            if c.data_type not in _SHORT and (c.length is None or 4 * c.length > per_value)]


def _fetch(cur, batch_rows: int, wide: list[int], batch_bytes: int) -> list[tuple]:
    """The next batch: `batch_rows` rows, fewer when the values of the `wide` columns pass
    `batch_bytes` (counted in characters or bytes, as they arrive)."""
    if not wide:
        return cur.fetchmany(batch_rows)
    rows, size = [], 0
    while len(rows) < batch_rows and size < batch_bytes and (row := cur.fetchone()) is not None:
        rows.append(row)
        size += sum(len(row[i]) for i in wide if isinstance(row[i], (str, bytes)))
    return rows


def _batches(conn, cur, table: SourceTable, splits: list[Split],
             batch_rows: int) -> Iterator[pa.RecordBatch]:
    schema = read_schema(table)
    columns = list(table.columns) + [None] * (len(table.key_text_columns) + 1)
    wide = wide_columns(table, batch_rows)
    try:
        while rows := _fetch(cur, batch_rows, wide, BATCH_BYTES):
            arrays = [pa.array([normalize(column, row[i]) if column else row[i] for row in rows],
                               type=field.type)
                      for i, (column, field) in enumerate(zip(columns, schema))]
            yield pa.RecordBatch.from_arrays(arrays, schema=schema)
        conn.commit()
    except pymysql.err.MySQLError as exc:  # the read broke off: a restart, a KILL
        raise _read_failed(table, splits, mysql.first_line(exc),
                           exc.args[0] if exc.args else None) from None
    finally:
        _close(conn)


def _close(conn) -> None:
    """Ends a read's connection, which `SplitRead.close` may have ended already."""
    if conn.open:
        conn.close()
