"""The SQL text of each step, rendered from cdc_sql/sql/*.sql with identifiers quoted. Pure."""
from __future__ import annotations

import datetime as dt

from cdc_sql.config.layout import CURRENT
from cdc_sql.lake import semantics
from cdc_sql.lake.lake import Lake
from cdc_sql.lake.silver.plan import SilverPlan
from cdc_sql.lake.tables import table_ref
from cdc_sql.source import predicates
from cdc_sql.source.schema import SourceTable, arrow_type, key_text_name
from cdc_sql.sql import quote, render
from cdc_sql.window import Window


def _image_columns(source: SourceTable, present: dict | None, renames: dict, prefix: str,
                   by_offset: bool) -> str:
    """The source's columns read from a bronze table whose columns (name -> Arrow type) are
    `present` (None: not known, every column taken as there): by name; for rows written before
    a rename, by the earlier name (`renames`: column -> [(earlier name, offset)], oldest first;
    binlog rows by their offset against bound parameters, snapshot rows by the newest name
    bronze has); NULL where bronze has no such column; cast where bronze's type is not the
    contract's (a widened column, say)."""
    def read(name: str) -> str:
        return f"{prefix}{quote(name)}" if present is None or name in present else "NULL"

    def typed(expr: str, column, name: str | None) -> str:
        if name is not None and expr != "NULL" and \
                (present is None or present[name] == arrow_type(column.spark_type)):
            return expr
        return f"CAST({expr} AS {column.spark_type})"

    items, k = [], 0
    for column in source.columns:
        chain = renames.get(column.name, [])
        if chain and by_offset:
            cases = "".join(f"WHEN _cdc_offset < :rename_{k + n} THEN {read(old)} "
                            for n, (old, _) in enumerate(chain))
            value = typed(f"CASE {cases}ELSE {read(column.name)} END", column, None)
        elif chain:
            names = [column.name, *(old for old, _ in reversed(chain))]
            name = next((n for n in names if present is None or n in present), None)
            value = typed(read(name) if name else "NULL", column, name)
        else:
            value = typed(read(column.name), column, column.name)
        k += len(chain)
        items.append(f"{value} AS {quote(column.name)}")
    for column in source.key_text_columns:
        name = key_text_name(column.name)
        items.append(f"{read(name)} AS {quote(name)}")
    return ",\n  ".join(items)


def snapshot_images_sql(lake: Lake, source: SourceTable, splits_view: str,
                        renames: dict | None = None, present=None) -> str:
    return render(
        "snapshot_images",
        columns=_image_columns(source, present, renames or {}, "b.", by_offset=False),
        bronze_snapshot=table_ref(lake.snapshot_path(source.db, source.name)),
        done_splits=quote(splits_view),
    )


def binlog_images_sql(lake: Lake, source: SourceTable, renames: dict | None = None,
                      present=None) -> str:
    return render(
        "binlog_images",
        columns=_image_columns(source, present, renames or {}, "", by_offset=True),
        bronze_changes=table_ref(lake.changes_path(source.db, source.name)),
    )


def candidates_sql(plan: SilverPlan, images_view: str) -> str:
    items = [f"{expr} AS {quote(name)}" for expr, name in plan.projection.columns]
    items += [f"{quote(key_text_name(source))} AS {quote(key_text_name(out))}"
              for source, out in plan.key_texts]
    matches = plan.projection.where or "TRUE"
    return render(
        "silver_candidates",
        projection=",\n  ".join(items),
        matches=matches,
        images=quote(images_view),
        extra=semantics.candidate_columns(plan.spec, matches),
        kept=semantics.candidate_filter(plan.spec),
    )


def snapshot_rows_sql(plan: SilverPlan, candidates_view: str,
                      window: Window) -> tuple[str, dict]:
    """The snapshot rows silver is created with, one UNION ALL branch per group of splits read
    together (an attempt: one bronze commit, one key range). Each branch reads only its own
    bronze files, so Sail writes silver's first files with disjoint key ranges and they need no
    clustering (one query mixed the groups' files into partitions that each spanned every key:
    docs/performance.md)."""
    attempts = sorted({split.attempt for entries in (window.splits or {}).values()
                       for split in entries})
    if len(attempts) < 2:
        return render("silver_snapshot_rows", output=", ".join(quote(c) for c in plan.columns),
                      candidates=quote(candidates_view), group=""), {}
    branches = [render("silver_snapshot_rows", output=", ".join(quote(c) for c in plan.columns),
                       candidates=quote(candidates_view), group=f" AND _cdc_attempt = :group_{i}")
                for i in range(len(attempts))]
    branches[1:] = ["\n".join(line for line in branch.splitlines() if not line.startswith("--"))
                    for branch in branches[1:]]  # the template's comment once
    return "\nUNION ALL\n".join(branches), {f"group_{i}": a for i, a in enumerate(attempts)}


def changes_sql(plan: SilverPlan, candidates_view: str) -> str:
    return render(
        "silver_changes",
        output=", ".join(f"c.{quote(c)}" for c in (*plan.columns, "_cdc_remove")),
        key=", ".join(quote(k) for k in plan.key),
        won_columns=", ".join(f"c.{quote(c)}" for c in (*plan.key, "_cdc_offset",
                                                        "_cdc_remove")),
        key_match=key_match(plan, "c", "later"),
        won_match=key_match(plan, "c", "w"),
        candidates=quote(candidates_view),
    )


def history_versions_sql(lake: Lake, plan: SilverPlan, candidates_view: str,
                         current_only: bool = False) -> str:
    """A batch's history versions; `current_only`: no attempt of the batch reached history
    (Window.history_untouched), so the version before it is a current one."""
    if plan.tracked is not None:
        return _tracked_versions_sql(lake, plan, candidates_view, current_only)
    return render(
        "history_versions",
        key=", ".join(quote(k) for k in plan.key),
        candidates=quote(candidates_view),
        columns=", ".join(quote(c) for c in plan.row_columns),
        history_columns=", ".join(f"h.{quote(c)}" for c in plan.row_columns),
        history=table_ref(lake.history_path(plan.spec.name)),
        key_match=key_match(plan, "h", "f"),
    )


def _tracked_versions_sql(lake: Lake, plan: SilverPlan, candidates_view: str,
                         current_only: bool) -> str:
    """History with chosen columns (history_tracked_versions.sql): a change opens a version
    when a tracked column differs from the key's change before it."""
    key = ", ".join(quote(k) for k in plan.key)
    order = f"OVER (PARTITION BY {key} ORDER BY _cdc_offset, _cdc_remove DESC)"
    return render(
        "history_tracked_versions",
        key=key,
        candidates=quote(candidates_view),
        columns=", ".join(quote(c) for c in plan.row_columns),
        history_columns=", ".join(f"h.{quote(c)}" for c in plan.row_columns),
        last_columns=", ".join(f"l.{quote(c)}" for c in plan.row_columns),
        history=table_ref(lake.history_path(plan.spec.name)),
        key_match=key_match(plan, "h", "f"),
        run_match=key_match(plan, "l", "b"),
        current=f"h.{quote(CURRENT)} AND " if current_only else "",
        same=" AND ".join(f"{quote(c)} <=> LAG({quote(c)}) {order}" for c in plan.tracked)
        or "TRUE",
    )


def history_resnapshot_sql(lake: Lake, plan: SilverPlan, changes_view: str) -> str:
    """With chosen columns, a row differs from its current version when a tracked column
    does (history_tracked_resnapshot.sql); else when any does."""
    tracked = plan.tracked is not None
    return render(
        "history_tracked_resnapshot" if tracked else "history_resnapshot",
        changes=quote(changes_view),
        history=table_ref(lake.history_path(plan.spec.name)),
        columns=", ".join(f"f.{quote(c)}" for c in plan.row_columns),
        history_columns=", ".join(f"h.{quote(c)}" for c in plan.row_columns),
        key_match=key_match(plan, "h", "f"),
        **({"tracked_same": _same(plan.tracked)} if tracked else
           {"same": _same(plan.row_columns)}),
    )


def _same(columns) -> str:
    """History's current version (h) and a new row (f) agree on `columns`."""
    return " AND ".join(f"h.{quote(c)} <=> f.{quote(c)}" for c in columns) or "TRUE"


def history_merge_sql(lake: Lake, plan: SilverPlan, versions_view: str,
                      dropped: tuple[str, ...] = (), current_only: bool = False) -> str:
    """`dropped` (chosen columns only): history columns the source no longer has; a version
    updated in place sets them NULL, as silver's row. `current_only`: the MERGE matches
    current versions only (Window.history_untouched), the partition history keeps them in."""
    columns = [quote(c) for c in plan.history_columns]
    tracked = {} if plan.tracked is None else {"assignments": ", ".join(
        [*(f"t.{quote(c)} = s.{quote(c)}" for c in plan.row_columns if c not in plan.key),
         *(f"t.{quote(c)} = NULL" for c in dropped)])}
    return render(
        "history_tracked_merge" if tracked else "history_merge",
        history=table_ref(lake.history_path(plan.spec.name)),
        versions=quote(versions_view),
        key_match=key_match(plan, "t", "s"),
        columns=", ".join(columns),
        values=", ".join(f"s.{c}" for c in columns),
        current=f" AND t.{quote(CURRENT)}" if current_only else "",
        **tracked,
    )


def key_match(plan: SilverPlan, left: str, right: str) -> str:
    """Keys compare with `=`; with `<=>` only where a declared key may hold NULLs (a MERGE on
    `<=>` is slower: docs/performance.md)."""
    equals = "<=>" if plan.key_nullable else "="
    return " AND ".join(f"{left}.{quote(k)} {equals} {right}.{quote(k)}" for k in plan.key)


def merge_sql(lake: Lake, plan: SilverPlan, changes_view: str, dropped: tuple[str, ...] = ()) -> str:
    """`dropped`: silver columns the source no longer has; an update sets them NULL."""
    return render("silver_merge", **_silver_merge_holes(lake, plan, dropped),
                  changes=quote(changes_view), removes=semantics.removes(plan.spec, "s"))


def replace_again_sql(lake: Lake, plan: SilverPlan, replacement: str) -> str:
    """A re-snapshot's `replacement` rows merged into silver (silver_replace_again.sql)."""
    return render("silver_replace_again", **_silver_merge_holes(lake, plan),
                  replacement=replacement)


def _silver_merge_holes(lake: Lake, plan: SilverPlan, dropped: tuple[str, ...] = ()) -> dict:
    """What a MERGE of rows `s` in silver's columns into silver `t` says of those columns."""
    columns = [quote(c) for c in plan.columns]
    return {"silver": table_ref(lake.silver_path(plan.spec.name)),
            "key_match": key_match(plan, "t", "s"),
            "assignments": ", ".join([*(f"t.{c} = s.{c}" for c in columns),
                                      *(f"t.{quote(c)} = NULL" for c in dropped)]),
            "columns": ", ".join(columns),
            "values": ", ".join(f"s.{c}" for c in columns)}


def range_removes_sql(lake: Lake, plan: SilverPlan, ranges, candidates: str
                      ) -> tuple[str, dict]:
    """The removes of a window's range re-reads (`Window.ranges`), one UNION ALL branch each,
    in the columns of `candidates` (silver_range_removes.sql), with their values bound."""
    columns = [quote(c) for c in plan.row_columns]
    silver = table_ref(lake.silver_path(plan.spec.name))
    rows = f"SELECT {', '.join(columns)} FROM {silver}{semantics.live_where(plan.columns)}"
    if plan.spec.history:
        rows += (f" UNION ALL SELECT {', '.join(f'h.{c}' for c in columns)} FROM "
                 f"{table_ref(lake.history_path(plan.spec.name))} AS h LEFT ANTI JOIN "
                 f"({rows}) AS s ON {key_match(plan, 'h', 's')} WHERE h._cdc_current")
    branches, args = [], {}
    for n, (source, predicate, watermark, read_at) in enumerate(ranges):
        where, values = predicates.bound(predicate, "spark", f":range_{n}_{{}}".format)
        args.update({f"range_{n}_{i}": v for i, v in enumerate(values)})
        args.update({f"range_{n}_at": watermark, f"range_{n}_source": source})
        if read_at:  # (not kept by state written before: the time of the merge)
            args[f"range_{n}_read_at"] = _spark_timestamp(read_at)
        branches.append(render(
            "silver_range_removes", columns=", ".join(f"t.{c}" for c in columns),
            at=f"range_{n}_at", source=f"range_{n}_source", rows=rows, predicate=where,
            read_at=f":range_{n}_read_at" if read_at else "current_timestamp()",
            candidates=quote(candidates), key_match=key_match(plan, "t", "c"),
            extra=f",\n  TRUE AS {quote(semantics.DELETED)}" if semantics.soft(plan.spec)
            else ""))
    return "\nUNION ALL\n".join(branches), args


def _spark_timestamp(iso: str) -> str:
    """A time in ISO 8601 as `CAST(... AS TIMESTAMP)` reads it in the engine's session time
    zone, UTC (engine.SESSION_CONF)."""
    return dt.datetime.fromisoformat(iso).astimezone(dt.timezone.utc) \
        .strftime("%Y-%m-%d %H:%M:%S.%f")
