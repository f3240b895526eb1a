"""Change semantics a table chooses: what a delete or a TRUNCATE does to silver.

`deletes: soft` keeps a deleted row in silver, its last image with `_cdc_deleted = true`, at the
delete's offset and time (`_cdc_offset`, `_cdc_ts`, `_cdc_op = 'd'`); a later insert of the key
revives it. It is one rule for every path: a delete is an upsert of its before-image flagged
deleted, so the last-change-per-key pick, the offset guard and the replay of a window stay
exactly as they are. A row that leaves the projection's WHERE is still removed (it was not
deleted at the source).

`skip: [delete]` and `skip: [truncate]` keep those changes out of silver (bronze holds them):
a delete is no candidate at all, so the key keeps its last image; a TRUNCATE, or a partition
TRUNCATE or DROP, removes nothing. History follows silver's candidates: soft deletes end a
version as hard ones do; skipped deletes never end one.

These functions decide; lake/silver/, small_merge.py, verify.py and status call them
(docs/operations.md, "Soft deletes, skipped operations, left-out columns").
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

DELETED = "_cdc_deleted"


def soft(spec) -> bool:
    return spec.deletes == "soft"


def skips(spec, operation: str) -> bool:
    return operation in spec.skip


def extra_columns(spec) -> tuple[str, ...]:
    """The columns silver has beyond the row and `_cdc_offset/_op/_ts`."""
    return (DELETED,) if soft(spec) else ()


def extra_fields(spec) -> list[pa.Field]:
    """Those columns as Arrow fields, as an engine creates them (nullable)."""
    return [pa.field(DELETED, pa.bool_())] if soft(spec) else []


def candidate_columns(spec, matches: str) -> str:
    """The candidates' extra columns (silver_candidates.sql, `{{ extra }}`): a soft delete is
    a delete whose image the projection's WHERE keeps."""
    if not soft(spec):
        return ""
    return f",\n  _cdc_deleted AND COALESCE({matches}, FALSE) AS {DELETED}"


def candidate_filter(spec) -> str:
    """Which images are candidates at all (silver_candidates.sql): not skipped deletes."""
    return "\nWHERE NOT _cdc_deleted" if skips(spec, "delete") else ""


def removes(spec, alias: str = "") -> str:
    """The condition under which a last change removes its key from silver (silver_merge.sql,
    silver_replace.sql): with soft deletes, only leaving the WHERE does."""
    prefix = f"{alias}." if alias else ""
    if soft(spec):
        return f"({prefix}_cdc_remove AND NOT {prefix}{DELETED})"
    return f"{prefix}_cdc_remove"


def live(columns) -> str:
    """A SQL predicate for the rows that are live at the source: soft-deleted rows are not
    (NULL: rows written before `deletes: soft` was turned on, all live)."""
    return f"NOT COALESCE({DELETED}, FALSE)" if DELETED in columns else "TRUE"


def live_where(columns) -> str:
    """live() as a WHERE clause for a template's hole ('' when every row is live)."""
    return f"\nWHERE {live(columns)}" if DELETED in columns else ""


def replace_kept(spec, columns, present, key_match: str, silver: str, changes: str) -> str:
    """What a re-snapshot keeps of silver (whose columns are `present`; none: there is no
    silver) beside the new rows (silver_replace.sql): with skipped deletes, the rows whose key
    it no longer finds, as they are; with soft deletes, those rows flagged deleted at the
    re-snapshot's end (`:upto`) unless they already were. A replay finds them in the replaced
    silver, and keeps them the same."""
    from cdc_sql.sql import quote

    if not present or not (soft(spec) or skips(spec, "delete")):
        return ""
    was = f"COALESCE(t.{DELETED}, FALSE)" if DELETED in present else "FALSE"
    marked = {"_cdc_offset": f"CASE WHEN {was} THEN t._cdc_offset ELSE :upto END",
              "_cdc_op": f"CASE WHEN {was} THEN t._cdc_op ELSE 'd' END",
              DELETED: "TRUE"} if soft(spec) else {}
    items = ", ".join(f"{marked[c]} AS {quote(c)}" if c in marked else
                      f"t.{quote(c)}" if c in present else f"NULL AS {quote(c)}"
                      for c in columns)
    why = "soft-deleted" if soft(spec) else "deletes skipped"
    return (f"\nUNION ALL\n-- rows the re-snapshot no longer finds, kept ({why})\n"
            f"SELECT {items}\nFROM {silver} AS t\nLEFT ANTI JOIN {changes} AS s ON {key_match}")


def keeps_rows(spec) -> bool:
    """Silver may hold rows the source no longer has, on purpose (verify counts them as kept)."""
    return bool(spec.skip)


def applies_truncate(spec) -> bool:
    return not skips(spec, "truncate")


def remove_rows(lake, spec, path: str, removed_at: str, removed_ts, where: list) -> None:
    """Silver rows a TRUNCATE (or a partition's removal) took away, matching `where`: deleted,
    or, with soft deletes, flagged deleted at its offset and time (a replay finds them past
    that offset, and changes nothing)."""
    if not soft(spec):
        lake.tables.delete_rows(path, where)
        return
    updates = {DELETED: True, "_cdc_op": "d", "_cdc_offset": removed_at,
               "_cdc_ts": removed_ts.strftime("%Y-%m-%d %H:%M:%S.%f")}
    for flag in (False, None):  # NULL: rows from before soft deletes were turned on
        lake.tables.update_rows(path, updates,
                                [*where, (DELETED, "=" if flag is False else "IS", flag)])


def arrow_changes(spec, changes: pa.Table) -> pa.Table:
    """Bronze changes (with `_cdc_op`) as the candidates of a table silver holds as it is
    (small_merge.py): `_cdc_remove`, and `_cdc_deleted` with soft deletes; skipped deletes
    left out. The same rule as candidate_columns, candidate_filter and removes."""
    deleted = pc.equal(changes["_cdc_op"], "d")
    if skips(spec, "delete"):
        changes = changes.filter(pc.invert(deleted))
        deleted = pc.equal(changes["_cdc_op"], "d")
    if soft(spec):
        changes = changes.append_column(DELETED, deleted)
        return changes.append_column("_cdc_remove", pa.repeat(pa.scalar(False),
                                                              changes.num_rows))
    return changes.append_column("_cdc_remove", deleted)


def soft_deleted_rows(lake, spec) -> int | None:
    """How many rows silver holds flagged deleted (`cdc-sql status`); None: no silver yet."""
    path = lake.silver_path(spec.name)
    if not lake.tables.exists(path) or DELETED not in lake.tables.schema(path).names:
        return None
    # counted here, not filtered by delta-rs: its filter on a boolean column found no row in
    # files JVM Spark wrote (deltalake 1.x)
    flags = lake.tables.read_arrow(path, [DELETED])[DELETED]
    return int(pc.sum(pc.cast(pc.fill_null(flags, False), pa.int64())).as_py() or 0)
