"""Table layout a pipeline chooses for silver and history: the change data feed, Delta table
properties and the columns silver is clustered by (docs/operations.md, "Change data feed and
table layout"). Pure rules: which properties a pipeline may set, and what a table ends up with.

cdc-sql chooses some properties itself, because its writers depend on them: column mapping
(Delta Spark needs it for some column names; Sail and delta-rs write it only where cdc-sql
asked), the statistics columns (tables.stats_configuration), and the protocol (every writer on
every engine must be able to write silver). A property that would take those away, or that
makes silver refuse a MERGE's updates and deletes, is refused when the file is read.
Deletion vectors are the engine's to write: a table asking for them is merged by its SQL, on
an engine that can compact them (`engine_refusal`).
"""
from __future__ import annotations

from cdc_sql.errors import ConfigError

CHANGE_DATA_FEED = "delta.enableChangeDataFeed"
DELETION_VECTORS = "delta.enableDeletionVectors"
CURRENT = "_cdc_current"  # history's column marking the current version of each key

# Delta properties known to change only retention, file sizes, checkpoints or statistics.
SAFE_DELTA = frozenset({
    "delta.logRetentionDuration", "delta.deletedFileRetentionDuration",
    "delta.checkpointInterval", "delta.checkpoint.writeStatsAsJson",
    "delta.checkpoint.writeStatsAsStruct",
    "delta.dataSkippingNumIndexedCols", "delta.targetFileSize",
    "delta.tuneFileSizesForRewrites", "delta.autoOptimize.optimizeWrite",
    "delta.autoOptimize.autoCompact", "delta.randomizeFilePrefixes",
    "delta.setTransactionRetentionDuration", "delta.isolationLevel",
    "delta.compatibility.symlinkFormatManifest.enabled",
})
# Why a property cdc-sql relies on is not the pipeline's to set.
REFUSED = {
    CHANGE_DATA_FEED: "set `change_data_feed: true` instead (cdc-sql then checks the engine "
                      "can write it)",
    "delta.columnMapping.mode": "cdc-sql chooses column mapping (name mode where Delta Spark "
                                "needs it); another mode breaks delta-rs and Sail writes",
    "delta.appendOnly": "silver takes updates and deletes (every MERGE would fail)",
    "delta.enableRowTracking": "delta-rs and Sail 0.7 cannot write row tracking",
    "delta.enableTypeWidening": "cdc-sql widens columns itself (on_schema_change: evolve)",
    "delta.dataSkippingStatsColumns": "cdc-sql chooses the statistics columns (decimals wider "
                                      "than 64 bits get none)",
    "delta.minReaderVersion": "the protocol is cdc-sql's to choose (every engine must write it)",
    "delta.minWriterVersion": "the protocol is cdc-sql's to choose (every engine must write it)",
}


def refused_property(key: str) -> str | None:
    """Why a pipeline may not set the table property `key`; None when it may (deletion vectors
    too: the engine then merges the table, and an engine that cannot keep them refuses it,
    `engine_refusal`)."""
    if key in REFUSED:
        return REFUSED[key]
    if key == DELETION_VECTORS:
        return None
    if key.startswith("delta.feature."):
        return "table features are cdc-sql's to choose (every engine must write silver)"
    if key.startswith("delta."):
        if key in SAFE_DELTA:
            return None
        return (f"not a Delta property cdc-sql knows to be harmless to its writers (those "
                f"are: {', '.join(sorted(SAFE_DELTA))})")
    return ("only Delta's own properties (delta.*) reach silver on every engine (a Spark "
            "DataFrame writer keeps no other)")


def properties(spec) -> dict[str, str]:
    """The properties silver and history are created with (and given when they exist), from a
    loaded table (`config.model.load_pipeline` has folded the target's settings in)."""
    chosen = dict(spec.table_properties)
    if spec.change_data_feed:
        chosen[CHANGE_DATA_FEED] = "true"
    return chosen


def missing(wanted: dict[str, str], current: dict[str, str]) -> dict[str, str]:
    """The properties a table lacks or holds with another value."""
    return {k: v for k, v in wanted.items() if current.get(k) != v}


def cluster_columns(spec, key: tuple[str, ...]) -> list[str]:
    """The columns cdc-sql clusters silver and history by itself (a Z-order): `cluster_by`,
    else the key. Not on a table Delta liquid-clusters (liquid_columns)."""
    return list(spec.cluster_by) or list(key)


def liquid_columns(spec, clusters_liquid: bool) -> list[str]:
    """The columns silver and history are liquid-clustered by (Delta's CLUSTER BY, which
    Delta Spark keeps up with a plain OPTIMIZE): the table's `cluster_by` on an engine with
    liquid clustering (`Engine.clusters_liquid`: Spark with Delta Lake); [] otherwise, and
    cdc-sql clusters them itself (cluster_columns)."""
    return list(spec.cluster_by) if clusters_liquid else []


def history_partitions(spec, clusters_liquid: bool) -> list[str]:
    """The columns a new history table is partitioned by: `_cdc_current`, so a window's MERGE
    reads only the current versions (docs/performance.md, "History that costs what a window
    changes"); none where Delta liquid-clusters it (Delta clusters no partitioned table)."""
    return [] if liquid_columns(spec, clusters_liquid) else [CURRENT]


def cluster_by_change(spec, clusters_liquid: bool,
                      current: list[str]) -> tuple[str, ...] | None:
    """The ALTER TABLE CLUSTER BY a silver or history table needs, given the columns Delta
    clusters it by now (`current`, DESCRIBE DETAIL's clusteringColumns), as a Databricks user
    would write it after editing the table's definition: the table's `cluster_by` when it
    differs (on a table not yet liquid-clustered too); () for CLUSTER BY NONE when the
    pipeline no longer names the columns a table is clustered by (its files stay as they are,
    OPTIMIZE only compacts them from then on); None when nothing changes. Only on an engine
    with liquid clustering: Sail can neither alter nor write such a table."""
    if not clusters_liquid or tuple(spec.cluster_by) == tuple(current):
        return None
    return tuple(spec.cluster_by)


def describe(spec, key: tuple[str, ...], clusters_liquid: bool | None = False) -> str:
    """The table's layout in one line (`cdc-sql plan`). `clusters_liquid` None: the engine
    is not known before it answers (engine mode remote or active)."""
    chosen = ", ".join(f"{k}={v}" for k, v in properties(spec).items()) or "none"
    feed = "on (every write path records its rows' changes)" if spec.change_data_feed else "off"
    return (f"change data feed {feed}; table properties: {chosen}; "
            f"{_clustering(spec, key, clusters_liquid)}")


def _clustering(spec, key: tuple[str, ...], clusters_liquid: bool | None) -> str:
    own = (f"files clustered by {', '.join(cluster_columns(spec, key))} (cdc-sql's Z-order "
           f"after a snapshot and in `cdc-sql maintain`)")
    if not spec.cluster_by or clusters_liquid is False:
        return own
    liquid = (f"files liquid-clustered by {', '.join(spec.cluster_by)} (Delta's CLUSTER BY; "
              f"OPTIMIZE after a snapshot and in `cdc-sql maintain`)")
    return liquid if clusters_liquid else \
        f"{liquid} if the engine is Spark with Delta Lake; on Sail {own}"


SAIL_CANNOT_WRITE_CDF = (
    "Sail 0.7 cannot write a Delta table with a change data feed (it refuses the table's "
    "changeDataFeed feature): run the pipeline on Spark with Delta Lake (engine mode local, "
    "remote or active), or leave change_data_feed off")


SAIL_KEEPS_NO_DELETION_VECTORS = (
    "Sail 0.7 cannot compact deletion vectors away (it has no OPTIMIZE) nor read most older "
    "versions of such a table, which a cascade needs: run the pipeline on Spark with Delta "
    "Lake (engine mode local, remote or active), or leave delta.enableDeletionVectors out")


def deletion_vectors(chosen: dict[str, str]) -> bool:
    """Whether the table properties `chosen` turn deletion vectors on (delta-rs writes none:
    such a table's windows go through the engine)."""
    return str(chosen.get(DELETION_VECTORS, "")).lower() == "true"


def engine_refusal(spec, engine_kind: str) -> tuple[str, str] | None:
    """Why the engine cannot write this table's layout, and the setting that asks for it
    (under `tables[i]` or `target`: `spec` may be the target itself); None when it can."""
    if engine_kind != "sail":
        return None
    if spec.change_data_feed:
        return SAIL_CANNOT_WRITE_CDF, "change_data_feed"
    if deletion_vectors(spec.table_properties):
        return SAIL_KEEPS_NO_DELETION_VECTORS, f"table_properties.{DELETION_VECTORS}"
    return None


def check_engine(pipeline, engine_mode: str) -> None:
    """Stop, naming the key, when the engine cannot write some table's layout: before the
    lake is touched (the CLI, before its lock; a Runner, before its run)."""
    by_target = engine_refusal(pipeline.target, engine_mode)  # what the target's settings ask
    for i, spec in enumerate(pipeline.tables):
        refusal = engine_refusal(spec, engine_mode)
        if refusal is not None:
            why, setting = refusal
            raise ConfigError(why, pipeline.file, f"target.{setting}" if refusal == by_target
                              else f"tables[{i}].{setting}")
