"""Table layout per table and for the target: the YAML keys' checks (file, line, key, why), how
the target's settings fold into each table, the pure rules of config/layout.py, and the
refusal of a change data feed on Sail."""
import argparse

import pytest
from hypothesis import given, strategies as st

from cdc_sql import cli
from cdc_sql.config import layout
from cdc_sql.config.model import Table, load_pipeline
from cdc_sql.errors import ConfigError
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
    ("    table_properties:\n      delta.enableDeletionVectors: true\n",
     "tables[0].table_properties.delta.enableDeletionVectors", 14, "deletion vectors"),
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


@pytest.mark.parametrize("where, key", [("  change_data_feed: true\n", "target.change_data_feed"),
                                        (None, "tables[0].change_data_feed")])
def test_a_change_data_feed_on_sail_is_refused_before_the_engine_starts(tmp_path, where, key):
    text = GOOD.replace(TARGET, TARGET + where) if where else \
        GOOD + "    change_data_feed: true\n"
    pipeline = load_pipeline(write(tmp_path, text), environ={"PW": "x"})
    with pytest.raises(ConfigError) as info:
        cli._engine(argparse.Namespace(engine=None, engine_url=None), pipeline)
    assert info.value.path == key and "Sail 0.7 cannot write" in str(info.value)
    assert layout.engine_refusal(pipeline.tables[0], "local") is None


def test_a_runner_refuses_a_change_data_feed_on_sail_before_opening_the_lake(tmp_path):
    from types import SimpleNamespace

    from cdc_sql.run.runner import Runner

    pipeline = load_pipeline(write(tmp_path, GOOD + "    change_data_feed: true\n"),
                             environ={"PW": "x"})
    with pytest.raises(ConfigError) as info:
        Runner(pipeline, SimpleNamespace(mode="sail"))
    assert info.value.path == "tables[0].change_data_feed"
    assert not (tmp_path / "lake").exists()
