"""Table layout per table and for the target: the YAML keys' checks (file, line, key, why), how
the target's settings fold into each table, the pure rules of config/layout.py, and the
refusal of a change data feed on Sail."""
import argparse
import textwrap

import pytest
from hypothesis import given, strategies as st

from cdc_sql import cli
from cdc_sql.config import layout
from cdc_sql.config.model import Table, load_pipeline
from cdc_sql.errors import ConfigError
from cdc_sql.lake import small_merge
from cdc_sql.lake.silver.plan import plan_silver
from cdc_sql.source.schema import Column, SourceTable
from tests.unit.test_config import GOOD, error_for, write

TARGET = "  path: ./lake\n"


@pytest.mark.parametrize("lines, path, line, message", [
    ("    table_properties:\n      delta.appendOnly: true\n",
     "tables[0].table_properties.delta.appendOnly", 14, "updates and deletes"),
    ("    table_properties:\n      delta.columnMapping.mode: id\n",
     "tables[0].table_properties.delta.columnMapping.mode", 14, "column mapping"),
    ("    table_properties:\n      delta.enableChangeDataFeed: true\n",
     "tables[0].table_properties.delta.enableChangeDataFeed", 14, "change_data_feed: true"),
    ("    table_properties:\n      delta.feature.v2Checkpoint: supported\n",
     "tables[0].table_properties.delta.feature.v2Checkpoint", 14, "table features"),
    ("    table_properties:\n      delta.minWriterVersion: 7\n",
     "tables[0].table_properties.delta.minWriterVersion", 14, "protocol"),
    ("    table_properties:\n      delta.dataSkippingStatsColumns: id\n",
     "tables[0].table_properties.delta.dataSkippingStatsColumns", 14, "statistics"),
    ("    table_properties:\n      delta.somethingNew: 1\n",
     "tables[0].table_properties.delta.somethingNew", 14, "harmless"),
    ("    table_properties:\n      team: sales\n",
     "tables[0].table_properties.team", 14, "only Delta's own"),
    ("    table_properties: [delta.checkpointInterval]\n",
     "tables[0].table_properties", 13, "expected a mapping"),
    ("    table_properties:\n      delta.checkpointInterval: [1]\n",
     "tables[0].table_properties.delta.checkpointInterval", 14, "expected text"),
    ("    cluster_by: [amount, AMOUNT]\n", "tables[0].cluster_by[1]", 13, "listed twice"),
    ("    cluster_by: amount\n", "tables[0].cluster_by", 13, "expected a list"),
    ("    change_data_feed: yes please\n", "tables[0].change_data_feed", 13, "true or false"),
])
def test_bad_layout_names_file_line_and_key(tmp_path, lines, path, line, message):
    err = error_for(tmp_path, GOOD + lines)
    assert (err.path, err.line) == (path, line) and message in str(err), str(err)
    assert str(err).startswith(f"{tmp_path / 'p.yaml'}:{line} at `{path}`")


def test_a_refused_target_property_names_the_target(tmp_path):
    err = error_for(tmp_path, GOOD.replace(TARGET, TARGET + "  table_properties:\n"
                                                    "    delta.appendOnly: 'true'\n"))
    assert (err.path, err.line) == ("target.table_properties.delta.appendOnly", 10)


def test_the_target_folds_into_each_table_and_a_table_wins(tmp_path):
    text = GOOD.replace(TARGET, TARGET + "  change_data_feed: true\n  table_properties:\n"
                                         "    delta.logRetentionDuration: interval 60 days\n"
                                         "    delta.checkpointInterval: 10\n") + \
        "    cluster_by: [amount]\n    table_properties:\n      delta.checkpointInterval: 20\n" \
        "  - name: other\n    source: shop.other\n"
    pipeline = load_pipeline(write(tmp_path, text), environ={"PW": "x"})
    orders, other = pipeline.tables
    assert layout.properties(orders) == {"delta.logRetentionDuration": "interval 60 days",
                                         "delta.checkpointInterval": "20",
                                         "delta.enableChangeDataFeed": "true"}
    assert layout.properties(other)["delta.checkpointInterval"] == "10"
    assert other.change_data_feed and orders.cluster_by == ["amount"]
    assert layout.cluster_columns(orders, ("id",)) == ["amount"]
    assert layout.cluster_columns(other, ("id",)) == ["id"]
    assert "change data feed on" in layout.describe(orders, ("id",))


def test_nothing_chosen_is_no_property(tmp_path):
    table = load_pipeline(write(tmp_path, GOOD), environ={"PW": "x"}).tables[0]
    assert layout.properties(table) == {} and not table.change_data_feed
    assert layout.describe(table, ("id",)).startswith("change data feed off; table properties: "
                                                      "none; files clustered by id")


@given(st.from_regex(r"delta\.[A-Za-z.]{1,30}", fullmatch=True))
def test_only_known_delta_properties_pass(key):
    assert (layout.refused_property(key) is None) == (key in layout.SAFE_DELTA)


def test_missing_is_what_differs():
    assert layout.missing({"a": "1", "b": "2"}, {"a": "1", "b": "3", "c": "4"}) == {"b": "2"}


def test_cluster_by_must_name_silver_columns():
    source = SourceTable("shop", "orders", (Column("id", "bigint", "bigint", 19, 0, None, None),
                                            Column("amount", "int", "int", 10, 0, None, None)),
                         ("id",))
    with pytest.raises(ConfigError) as info:
        plan_silver(Table(name="orders", source="shop.orders", cluster_by=["amont"]), [source],
                    "p.yaml", 0)
    assert info.value.path == "tables[0].cluster_by[0]" and "amount" in str(info.value)
    plan = plan_silver(Table(name="orders", source="shop.orders",
                             cluster_by=["amount", "_cdc_offset"]), [source], "p.yaml", 0)
    assert layout.cluster_columns(plan.spec, plan.key) == ["amount", "_cdc_offset"]


@pytest.mark.parametrize("setting, key, why", [
    ("change_data_feed: true", "change_data_feed", "Sail 0.7 cannot write"),
    ("table_properties:\n  delta.enableDeletionVectors: 'true'",
     "table_properties.delta.enableDeletionVectors", "Sail 0.7 cannot compact deletion vectors"),
])
@pytest.mark.parametrize("on_target", [True, False])
def test_a_layout_sail_cannot_keep_is_refused_before_the_engine_starts(tmp_path, capsys, setting,
                                                                       key, why, on_target):
    """A change data feed (Sail 0.7 refuses the feature), deletion vectors (Sail 0.7 writes
    them but cannot compact them, nor read most older versions of such a table): a pipeline
    asking for either on Sail stops before the engine starts, naming the key; Spark with
    Delta Lake takes both."""
    text = GOOD.replace(TARGET, TARGET + textwrap.indent(setting, "  ") + "\n") if on_target \
        else GOOD + textwrap.indent(setting, "    ") + "\n"
    pipeline = load_pipeline(write(tmp_path, text), environ={"PW": "x"})
    with pytest.raises(ConfigError) as info:
        cli._engine(argparse.Namespace(engine=None, engine_url=None), pipeline)
    key = ("target." if on_target else "tables[0].") + key
    assert info.value.path == key and why in str(info.value)
    assert layout.engine_refusal(pipeline.tables[0], "local") is None
    assert cli.main(["validate", "--offline", str(tmp_path / "p.yaml")]) != 0  # validate says so
    assert f"at `{key}`" in capsys.readouterr().err


@pytest.mark.parametrize("value, engine", [("true", True), ("TRUE", True), ("false", False)])
def test_a_plain_table_with_deletion_vectors_is_merged_by_the_engine(value, engine):
    source = SourceTable("shop", "orders", (Column("id", "int", "int", 10, 0, None, None),),
                         ("id",))
    spec = Table(name="orders", source="shop.orders",
                 table_properties={"delta.enableDeletionVectors": value})
    reason = small_merge.plan_unsuitable(plan_silver(spec, [source], "p.yaml", 0))
    assert (reason is not None and "deletion vectors" in reason) is engine
    assert layout.refused_property("delta.enableDeletionVectors") is None


def test_a_runner_refuses_a_change_data_feed_on_sail_before_opening_the_lake(tmp_path):
    from types import SimpleNamespace

    from cdc_sql.run.runner import Runner

    pipeline = load_pipeline(write(tmp_path, GOOD + "    change_data_feed: true\n"),
                             environ={"PW": "x"})
    with pytest.raises(ConfigError) as info:
        Runner(pipeline, SimpleNamespace(mode="sail"))
    assert info.value.path == "tables[0].change_data_feed"
    assert not (tmp_path / "lake").exists()


def _orders_plan(cluster_by=("amount",)):
    source = SourceTable("shop", "orders", (Column("id", "bigint", "bigint", 19, 0, None, None),
                                            Column("amount", "int", "int", 10, 0, None, None)),
                         ("id",))
    return plan_silver(Table(name="orders", source="shop.orders", cluster_by=list(cluster_by)),
                       [source], "p.yaml", 0)


def test_cluster_by_is_liquid_only_where_the_engine_clusters_liquid():
    from cdc_sql.engine import DeltaSparkEngine, SailEngine, known

    spec = _orders_plan().spec
    assert DeltaSparkEngine.clusters_liquid and not SailEngine.clusters_liquid
    assert known("local") is DeltaSparkEngine and known("sail") is SailEngine
    assert known("remote") is None and known("active") is None  # whichever answers
    assert layout.liquid_columns(spec, True) == ["amount"]
    assert layout.liquid_columns(spec, False) == []  # Sail: cdc-sql's own Z-order
    assert layout.liquid_columns(_orders_plan(()).spec, True) == []  # the key: Z-ordered
    # history is partitioned by its current versions, but where Delta liquid-clusters it
    assert layout.history_partitions(spec, True) == []
    assert layout.history_partitions(spec, False) == ["_cdc_current"]
    assert layout.history_partitions(_orders_plan(()).spec, True) == ["_cdc_current"]


@pytest.mark.parametrize("cluster_by, current, liquid, change", [
    (["amount"], [], True, ("amount",)),          # a new table, or one Z-ordered before
    (["amount"], ["amount"], True, None),         # as asked
    (["amount", "id"], ["amount"], True, ("amount", "id")),  # columns changed
    ([], ["amount"], True, ()),                   # cluster_by removed: CLUSTER BY NONE
    ([], [], True, None),                         # never clustered, or NONE already
    (["amount"], [], False, None),                # Sail: cannot alter or write one
    ([], ["amount"], False, None),
])
def test_cluster_by_change_is_what_a_databricks_user_would_alter(cluster_by, current, liquid,
                                                                 change):
    spec = Table(name="orders", source="shop.orders", cluster_by=cluster_by)
    assert layout.cluster_by_change(spec, liquid, current) == change


@given(st.lists(st.sampled_from("abcd"), unique=True, max_size=3),
       st.lists(st.sampled_from("abcd"), unique=True, max_size=3))
def test_a_cluster_by_change_leaves_the_table_as_asked(wanted, current):
    spec = Table(name="t", source="s.t", cluster_by=wanted)
    change = layout.cluster_by_change(spec, True, current)
    after = list(current if change is None else change)
    assert after == wanted and layout.cluster_by_change(spec, True, after) is None


def test_describe_says_how_files_are_clustered_on_each_engine():
    spec, key = _orders_plan().spec, ("id",)
    assert "files liquid-clustered by amount (Delta's CLUSTER BY" in \
        layout.describe(spec, key, True)
    assert "files clustered by amount (cdc-sql's Z-order" in layout.describe(spec, key, False)
    unknown = layout.describe(spec, key, None)  # engine mode remote or active
    assert "liquid-clustered by amount" in unknown and "on Sail files clustered by amount" \
        in unknown
    plain = _orders_plan(()).spec
    assert layout.describe(plain, key, True).endswith("files clustered by id (cdc-sql's "
                                                      "Z-order after a snapshot and in "
                                                      "`cdc-sql maintain`)")


def test_a_liquid_table_goes_through_the_engine_and_says_why(tmp_path):
    from types import SimpleNamespace

    from cdc_sql.lake.lake import Lake
    from cdc_sql.lake.silver.route import Way, made_of_bronze, route
    from cdc_sql.window import Window

    plan, lake = _orders_plan(), Lake(None, str(tmp_path), None)
    found = route(plan, None, lake, engine_mode="local")
    assert found.way is Way.ENGINE_SQL and "liquid-clustered by amount" in found.reason
    assert "delta-rs cannot write" in found.reason
    assert route(plan, None, lake, engine_mode="sail").in_process  # Z-ordered by cdc-sql
    assert route(_orders_plan(()), None, lake, engine_mode="local").in_process
    first = Window("", "0000000001", {"shop.orders": ()}, first=True)
    jvm = Lake(SimpleNamespace(clusters_liquid=True), str(tmp_path), None)
    assert route(plan, first, jvm).way is Way.ENGINE_SQL
    assert route(plan, first, jvm).cluster  # then clustered: CLUSTER BY, OPTIMIZE FULL
    sail = Lake(SimpleNamespace(clusters_liquid=False), str(tmp_path), None)
    assert "liquid" not in route(plan, first, sail).reason  # no facts: bronze unread
    assert made_of_bronze(jvm, [plan]) == {}  # no first version by delta-rs: the engine's


def test_liquid_clustering_is_the_engines_sql_whoever_writes_the_table():
    """delta-rs cannot write the clustering feature: CLUSTER BY and OPTIMIZE go to the engine
    even for a table delta-rs writes; a table without the feature has no clustering columns,
    asked of no engine; NONE and FULL as a Databricks user writes them."""
    from types import SimpleNamespace

    from cdc_sql.lake.delta_rs_tables import DeltaRsTables
    from cdc_sql.lake.lake import WithFallback

    said = []
    spark = SimpleNamespace(sql=lambda text: said.append(text) or SimpleNamespace(
        collect=lambda: []))
    ops = WithFallback(DeltaRsTables(), SimpleNamespace(spark=spark))
    ops.alter_clustering("/lake/silver/t", ("n", "odd col"))
    ops.alter_clustering("/lake/silver/t", ())
    ops.recluster("/lake/silver/t", full=True)
    ops.recluster("/lake/silver/t")
    assert said == ["ALTER TABLE delta.`/lake/silver/t` CLUSTER BY (`n`, `odd col`)",
                    "ALTER TABLE delta.`/lake/silver/t` CLUSTER BY NONE",
                    "OPTIMIZE delta.`/lake/silver/t` FULL", "OPTIMIZE delta.`/lake/silver/t`"]
    assert ops.layout("/nowhere/t") is None and len(said) == 4  # not there: delta-rs's


def test_liquid_clustering_only_by_columns_with_statistics():
    """Delta liquid-clusters only by columns it keeps file statistics of: a decimal wider
    than 18 digits (cdc-sql writes it none), a boolean or binary column, or one past the
    columns with statistics is named with why, before the ALTER TABLE fails."""
    import pyarrow as pa

    from cdc_sql.lake.tables import stats_configuration, without_statistics

    schema = pa.schema([("id", pa.int64()), ("amount", pa.decimal128(20, 2)),
                        ("flag", pa.bool_()), ("odd col", pa.string()), ("raw", pa.binary()),
                        *((f"c{i}", pa.int32()) for i in range(40)),
                        ("_cdc_offset", pa.string())])
    properties = stats_configuration(schema)
    found = without_statistics(("id", "amount", "flag", "odd col", "raw", "c20", "c39",
                                "_cdc_offset"), schema, properties)
    assert set(found) == {"amount", "flag", "raw", "c39"}, found
    assert "DECIMAL(20,2)" in found["amount"] and "bool" in found["flag"]
    assert "delta.dataSkippingStatsColumns" in found["c39"]
    narrow = pa.schema([("id", pa.int64()), ("n", pa.int32()), ("m", pa.int32())])
    assert without_statistics(("n", "m"), narrow, {}) == {}  # Delta's first 32: every one
    assert without_statistics(("n", "m"), narrow, {"delta.dataSkippingNumIndexedCols": "2"}) \
        == {"m": "not among the first 2 columns, which have statistics"}


@given(st.lists(st.text(min_size=1, max_size=8).filter(lambda t: t.strip() == t),
                min_size=1, max_size=5, unique=True))
def test_statistics_columns_read_back_as_written(names):
    from cdc_sql.lake.tables import _column_list
    from cdc_sql.sql import quote

    assert _column_list(",".join(quote(n) for n in names)) == names


@pytest.mark.parametrize("silver, history, statements", [
    # as the pipeline asks: one DESCRIBE DETAIL a table, nothing else
    ({"delta.checkpointInterval": "5"}, ["_cdc_current"], []),
    # a property added to the pipeline: one SET TBLPROPERTIES for the table lacking it
    ({}, ["_cdc_current"], ["ALTER TABLE delta.`dbfs:/lake/silver/orders` SET TBLPROPERTIES "
                            "('delta.checkpointInterval' = '5')"]),
])
def test_a_run_reads_each_tables_layout_in_one_statement(silver, history, statements):
    """Where only the engine reads the lake (`dbfs:`, HDFS: tables.choose), lay_out asks each
    table's properties, partitions and liquid clustering in one DESCRIBE DETAIL (a round
    trip and a read of the table's log on the engine each: eight to eleven statements for a
    table with history before), and changes only what differs from the pipeline."""
    import re
    from types import SimpleNamespace

    from cdc_sql.lake.lake import Lake
    from cdc_sql.lake.silver.merge import lay_out

    details = {"dbfs:/lake/silver/orders": (silver, [], ["id"]),
               "dbfs:/lake/silver/orders_history": ({"delta.checkpointInterval": "5"},
                                                    history, [])}
    said = []

    def sql(text):
        said.append(text)
        found = dict(zip(("properties", "partitionColumns", "clusteringColumns"),
                         details[re.search(r"delta\.`(.*)`", text)[1]]))
        return SimpleNamespace(collect=list, select=lambda *columns: SimpleNamespace(
            first=lambda: {c: found[c] for c in columns}))

    engine = SimpleNamespace(spark=SimpleNamespace(sql=sql), mode="active",
                             describes_history=True, clusters_liquid=True)
    plan = plan_silver(Table(name="orders", source="shop.orders", history=True,
                             cluster_by=["id"], table_properties={"delta.checkpointInterval": "5"}),
                       [_orders_plan().sources[0]], "p.yaml", 0)
    lay_out(Lake.open(engine, "dbfs:/lake"), plan)
    assert said == ["DESCRIBE DETAIL delta.`dbfs:/lake/silver/orders`", *statements,
                    "DESCRIBE DETAIL delta.`dbfs:/lake/silver/orders_history`"]


def test_deletion_vectors_are_turned_on_by_the_engine(tmp_path):
    """A table delta-rs writes is given its properties by delta-rs, but for deletion vectors:
    delta-rs would give it reader features of its own choosing with them (variantType, which
    Delta before 4.0 cannot read), so Delta Spark's ALTER TABLE turns them on."""
    from types import SimpleNamespace

    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from cdc_sql.lake.delta_rs_tables import DeltaRsTables
    from cdc_sql.lake.lake import WithFallback

    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"id": [1]}))
    said = []
    spark = SimpleNamespace(sql=lambda text: said.append(text) or SimpleNamespace(
        collect=lambda: []))
    ops = WithFallback(DeltaRsTables(), SimpleNamespace(spark=spark))
    ops.set_properties(path, {"delta.checkpointInterval": "5"})
    ops.set_properties(path, {"delta.enableDeletionVectors": "true"})
    assert DeltaTable(path).metadata().configuration == {"delta.checkpointInterval": "5"}
    assert said == [f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES "
                    f"('delta.enableDeletionVectors' = 'true')"]
