"""MariaDB system-versioned tables (`WITH SYSTEM VERSIONING`): their current rows.

The server keeps a table's history in the table itself: every row carries a row end (a hidden
`row_end` column, or one the table declares `AS ROW END`), the greatest value its type holds
for a current row, the time (or transaction) it stopped being current for a history row. So
the binlog says an UPDATE twice (the row's new image, and a history row written with the old
values) and a DELETE as an update that ends the row. Silver holds current rows, as a SELECT
shows them: a change that writes or removes a history row is none of silver's business, and
one that ends a current row deletes it.
"""
from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pyarrow.compute as pc

# The greatest row end: TIMESTAMP(6)'s last second before 2038 (MariaDB up to 11.4; 11.5 moved
# it to 2106), or the greatest BIGINT UNSIGNED for transaction-precise versioning.
_FOREVER = dt.datetime(2038, 1, 19, 3, 14, 7, tzinfo=dt.timezone.utc)
_LAST_TRX = decimal.Decimal(2**64 - 1)
HIDDEN = ("row_start", "row_end")


def current(ends: pa.Array) -> pa.Array:
    """Which row ends mark a current row."""
    if pa.types.is_timestamp(ends.type):
        forever = pa.scalar(_FOREVER if ends.type.tz else _FOREVER.replace(tzinfo=None),
                            ends.type)
        return pc.fill_null(pc.greater_equal(ends, forever), True)
    if pa.types.is_decimal(ends.type):
        return pc.fill_null(pc.equal(ends, pa.scalar(_LAST_TRX, ends.type)), True)
    return pc.fill_null(pc.equal(ends, pa.scalar(2**63 - 1, ends.type)), True)


def current_changes(batch: pa.RecordBatch, table) -> pa.RecordBatch:
    """A batch of one versioned table's changes as changes of its current rows: an insert of
    a history row and a delete of one go; an update that ends a current row deletes it (the
    image keeps the key). Hidden versioning columns are dropped (the contract has none)."""
    if table.row_end not in batch.schema.names:
        return batch
    now = current(batch.column(table.row_end))
    ops = batch.column("_cdc_op")
    updated = pc.equal(ops, "u")
    ended = pc.and_(pc.invert(now), updated)
    ops = pc.if_else(ended, pa.scalar("d"), ops)
    at = batch.schema.get_field_index("_cdc_op")
    columns = [ops if i == at else c for i, c in enumerate(batch.columns)]
    batch = pa.RecordBatch.from_arrays(columns, schema=batch.schema)
    batch = batch.filter(pc.or_(now, updated))
    if table.row_end_hidden:
        keep = [n for n in batch.schema.names if n not in HIDDEN]
        batch = batch.select(keep)
    return batch
