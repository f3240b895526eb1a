"""History against silver, for `cdc-sql verify`: every live silver row is exactly one current
version of `<name>_history` with the same values, and no current version is more. With history
on chosen columns that is the in-place update's promise (a change of other columns reaches
the current version); with every column, a version per change. Read by the engine: the two
tables' rows, never the source."""
from __future__ import annotations

from cdc_sql.lake import semantics
from cdc_sql.lake.lake import Lake
from cdc_sql.lake.silver.plan import SilverPlan
from cdc_sql.lake.tables import table_ref
from cdc_sql import sql
from cdc_sql.sql import quote


def history_differences(lake: Lake, plan: SilverPlan, silver_columns) -> str | None:
    """What differs between silver's live rows and history's current versions, in one line
    (None: nothing, or no history). Compared on the columns both hold (a column added to the
    source and ignored, or not yet in history, is left out)."""
    path = lake.history_path(plan.spec.name)
    if not plan.spec.history or not lake.tables.exists(path):
        return None
    present = set(lake.tables.schema(path).names) & set(silver_columns)
    columns = ", ".join(quote(c) for c in plan.row_columns if c in present)
    missing, extra = lake.engine.sql(sql.render(
        "history_current_check", columns=columns,
        silver=table_ref(lake.silver_path(plan.spec.name)),
        live=semantics.live_where(silver_columns), history=table_ref(path))).collect()[0]
    if not missing and not extra:
        return None
    return (f"{plan.spec.name}_history: {missing:,} silver rows have no current version with "
            f"their values, {extra:,} current versions are no silver row (removing {path} "
            f"starts history again from silver, without its old versions)")
