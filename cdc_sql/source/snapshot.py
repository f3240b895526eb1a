"""Reading one snapshot split: a consistent-snapshot transaction, its watermark, then the rows.

The watermark is taken in the same transaction as the SELECT (DESIGN section 3), so the rows are
exactly the table as of the watermark. Rows stream through an unbuffered cursor and leave as
Arrow batches of `batch_rows`, so memory follows the batch, not the split or the table.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa

from cdc_sql.source import mysql
from cdc_sql.source.schema import SourceTable
from cdc_sql.source.splits import Split, mysql_quote
from cdc_sql.source.values import arrow_type, normalize
from cdc_sql.source.watermarks import Watermark, begin_snapshot


@dataclass
class SplitRead:
    """An open split read: its watermark is known before the first row arrives."""

    watermark: Watermark
    batches: Iterator[pa.RecordBatch]


def arrow_schema(table: SourceTable) -> pa.Schema:
    return pa.schema([pa.field(c.name, arrow_type(c)) for c in table.columns])


def read_split(source, table: SourceTable, split: Split, mariadb: bool,
               batch_rows: int = 20_000) -> SplitRead:
    conn = mysql.connect(source, cursorclass=mysql.pymysql.cursors.SSCursor, autocommit=False)
    cur = conn.cursor()
    try:
        watermark = begin_snapshot(cur, mariadb)
        predicate, args = split.where([mysql_quote(k) for k in table.key])
        columns = ", ".join(mysql_quote(c.name) for c in table.columns)
        cur.execute(f"SELECT {columns} FROM {mysql_quote(table.db)}.{mysql_quote(table.name)} "
                    f"WHERE {predicate}", args)
    except mysql.pymysql.err.MySQLError as exc:
        conn.close()
        raise mysql.explain(exc, source) from None
    except BaseException:
        conn.close()
        raise
    return SplitRead(watermark, _batches(conn, cur, table, batch_rows))


def _batches(conn, cur, table: SourceTable, batch_rows: int) -> Iterator[pa.RecordBatch]:
    schema = arrow_schema(table)
    columns = table.columns
    try:
        while True:
            rows = cur.fetchmany(batch_rows)
            if not rows:
                break
            arrays = [pa.array([normalize(column, row[i]) for row in rows], type=field.type)
                      for i, (column, field) in enumerate(zip(columns, schema))]
            yield pa.RecordBatch.from_arrays(arrays, schema=schema)
        conn.commit()
    finally:
        conn.close()
