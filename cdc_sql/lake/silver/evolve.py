"""Silver and history tables created with their first rows, history started from silver, and
both given the source's columns after a DDL."""
from __future__ import annotations

from cdc_sql.config import layout
from cdc_sql.errors import CdcError, SourceError
from cdc_sql.lake import semantics
from cdc_sql.lake.lake import Lake
from cdc_sql.lake.silver.plan import SilverPlan
from cdc_sql.lake.tables import stats_properties


def create(lake: Lake, path: str, rows, properties: dict | None = None,
           partitions: list[str] = ()) -> None:
    """A silver or history table created with its first rows, in one commit (a run killed
    after it finds the table complete), its statistics leaving out decimals wider than 64 bits
    (tables.stats_properties; docs/engines.md), with the pipeline's `properties`
    (config/layout.py) in that commit: a change data feed then starts at version 0.
    `partitions`: the columns it is partitioned by (history: layout.history_partitions)."""
    properties = properties or {}
    if layout.CHANGE_DATA_FEED in properties and not lake.engine.writes_change_data_feed:
        raise CdcError(layout.SAIL_CANNOT_WRITE_CDF)  # a remote Sail: known once it answers
    if layout.deletion_vectors(properties) and not lake.engine.keeps_deletion_vectors:
        raise CdcError(layout.SAIL_KEEPS_NO_DELETION_VECTORS)  # (likewise)
    lake.engine.append(rows, path, {**stats_properties(rows.schema), **properties}, partitions)


def start_history(lake: Lake, plan: SilverPlan) -> None:
    """A history table starts from silver as it stands: after the first batch's snapshot, or
    when a pipeline turns history on later; partitioned by its current versions."""
    path = lake.history_path(plan.spec.name)
    if not lake.tables.exists(path):
        create(lake, path, _history_seed(lake.engine.read(lake.silver_path(plan.spec.name)), plan),
               layout.properties(plan.spec),
               layout.history_partitions(plan.spec, lake.clusters_liquid))


def _history_seed(silver, plan: SilverPlan):
    """Silver's rows as current versions, each since its last change: the start of a history
    (empty with a new silver table), typed like silver."""
    from pyspark.sql import functions as F

    offset, ts = F.col("_cdc_offset"), F.col("_cdc_ts")
    silver = silver.where(semantics.live(silver.columns))  # a soft-deleted row is no version
    held = (offset, ts) if plan.tracked is not None else ()  # the change its values are from
    return silver.select(*plan.row_columns, "_cdc_op", offset.alias("_cdc_valid_from"),
                         ts.alias("_cdc_valid_from_ts"),
                         F.lit(None).cast("string").alias("_cdc_valid_to"),
                         F.lit(None).cast(silver.schema["_cdc_ts"].dataType).alias("_cdc_valid_to_ts"),
                         F.lit(True).alias("_cdc_current"), *held)


def evolve(lake: Lake, path: str, plan: SilverPlan, changes_schema,
           renames: dict[str, list[str]], any_type: bool = False) -> list[str]:
    """Bring a silver (or history) table's columns up to the source's after a DDL, in one
    commit marked as cdc-sql's own: columns added there are added (NULL in older rows); a
    renamed column is added under its new name, filled from the old one; a widened type (INT to
    BIGINT, more DECIMAL digits, FLOAT to DOUBLE) is rewritten. Columns dropped there stay, and
    their names are returned (NULL from now on). Any other type change stops the table."""
    from pyspark.sql.types import StructField

    current = {f.name: f.dataType for f in lake.engine.read(path).schema.fields}
    wanted = {f.name: f for f in changes_schema.fields}
    widened = {}
    for name, field_ in wanted.items():
        if name in current and current[name] != field_.dataType:
            if not any_type and not widens(current[name], field_.dataType):
                raise SourceError(
                    f"column `{name}` of {plan.spec.name} changed type in the source, from "
                    f"{current[name].simpleString()} to {field_.dataType.simpleString()}, which "
                    f"is not a widening cdc-sql can apply to {path}. Re-snapshot the table: "
                    f"cdc-sql resnapshot PIPELINE --tables {plan.spec.name}")
            widened[name] = field_.dataType
    added = [(f.name, f.dataType, next((old for old in reversed(renames.get(f.name, []))
                                        if old in current), None))
             for name, f in wanted.items() if name not in current]
    if widened or any(source for _, _, source in added):
        try:  # one commit: a crash leaves all or nothing
            lake.tables.reshape(path, widened, added)
        except Exception as exc:  # noqa: BLE001 - a cast of old values that failed, explained
            if not any_type:
                raise
            types = ", ".join(f"`{n}` {t.simpleString()}" for n, t in widened.items())
            raise SourceError(
                f"{path}: the re-snapshot gives {types}, and this table's old values do not all "
                f"convert ({exc}). Keep its old versions elsewhere and remove the table: it "
                f"starts again from silver") from None
    elif added:
        lake.tables.add_columns(path, [StructField(name, t, True) for name, t, _ in added])
    return [name for name in current if name not in wanted and not name.startswith("_cdc_")]


def widens(old, new) -> bool:
    """Every value of Spark type `old` is exactly a value of `new`."""
    from pyspark.sql import types as T

    digits = {T.ByteType: 3, T.ShortType: 5, T.IntegerType: 10, T.LongType: 19}
    order = list(digits)
    if type(old) in digits and type(new) in digits:
        return order.index(type(old)) <= order.index(type(new))
    if type(old) in digits and isinstance(new, T.DecimalType):
        return new.precision - new.scale >= digits[type(old)]
    if isinstance(old, T.DecimalType) and isinstance(new, T.DecimalType):
        return new.scale >= old.scale and new.precision - new.scale >= old.precision - old.scale
    return isinstance(old, T.FloatType) and isinstance(new, T.DoubleType)
