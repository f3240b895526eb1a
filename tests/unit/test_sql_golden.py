"""The SQL every template renders to, for a few plans, compared with reviewed copies in
tests/unit/golden/ (as sqlglot's dialect tests compare expected SQL): a template change shows up
as a diff of these files. No database or engine is involved.

After an intended change: CDC_SQL_UPDATE_GOLDEN=1 pytest tests/unit/test_sql_golden.py, then
review `git diff tests/unit/golden`."""
import os
from pathlib import Path

import pyarrow as pa
import pytest

from cdc_sql.config.model import History, Table
from cdc_sql.lake.lake import Lake
from cdc_sql.lake.silver.facts import Facts
from cdc_sql.lake.silver.plan import plan_silver
from cdc_sql.lake.silver.steps import batch_steps, describe
from cdc_sql.source.schema import Column, SourceTable
from cdc_sql import sql
from cdc_sql.sql import render, template
from cdc_sql.window import SplitRef, Window

GOLDEN = Path(__file__).parent / "golden"
TEMPLATES = sorted(p.stem for p in (Path(sql.__file__).parent).glob("*.sql"))
LAKE = Lake(None, "/lake", None)


def column(name, data_type, column_type=None, **kw):
    return Column(name, data_type, column_type or data_type, kw.get("precision"),
                  kw.get("scale"), kw.get("fsp"), kw.get("length"))


ORDERS = SourceTable("shop", "orders", (
    column("id", "bigint"), column("status", "enum", "enum('new','paid')"),
    column("amount", "decimal", "decimal(10,2)", precision=10, scale=2),
    column("placed", "datetime", fsp=3)), ("id", "placed"))
SHARD = SourceTable("shop", "orders_2", ORDERS.columns, ORDERS.key)

SCENARIOS = {
    "first_batch_with_history": (
        Table(name="orders", source="shop.orders", history=True,
              projection="SELECT id, UPPER(status) AS status, amount, placed FROM orders "
                         "WHERE amount > 0"),
        [ORDERS], Window("", "000002:000000000100:000000",
                         {"shop.orders": (SplitRef(0, "a1", "000001:000000000004:000000"),
                                          SplitRef(1, "a2", "000001:000000000090:000000"))},
                         first=True)),
    "later_batch_after_a_rename": (
        Table(name="orders", source="shop.orders"), [ORDERS],
        Window("000002:000000000100:000000", "000003:000000000200:000000")),
    "shards": (
        Table(name="all_orders", source=r"shop\.orders(_[0-9]+)?"), [ORDERS, SHARD],
        Window("000002:000000000100:000000", "000003:000000000200:000000")),
    "resnapshot_with_history": (
        Table(name="orders", source="shop.orders", history=True), [ORDERS],
        Window("000002:000000000100:000000", "000003:000000000200:000000",
               {"shop.orders": (SplitRef(0, "b1", "000002:000000000300:000000"),)},
               replace=True)),
    "soft_deletes_with_a_where": (
        Table(name="orders", source="shop.orders", deletes="soft",
              projection="SELECT id, status, amount, placed FROM orders WHERE amount > 0"),
        [ORDERS], Window("000002:000000000100:000000", "000003:000000000200:000000")),
    "soft_deletes_resnapshot": (
        Table(name="orders", source="shop.orders", deletes="soft"), [ORDERS],
        Window("000002:000000000100:000000", "000003:000000000200:000000",
               {"shop.orders": (SplitRef(0, "b1", "000002:000000000300:000000"),)},
               replace=True)),
    "skipped_deletes_resnapshot_without_a_column": (
        Table(name="orders", source="shop.orders", skip=["delete", "truncate"],
              exclude_columns=["amount"]), [ORDERS],
        Window("000002:000000000100:000000", "000003:000000000200:000000",
               {"shop.orders": (SplitRef(0, "b1", "000002:000000000300:000000"),)},
               replace=True)),
    "change_data_feed_soft_deletes_replayed_resnapshot": (
        Table(name="orders", source="shop.orders", deletes="soft", change_data_feed=True),
        [ORDERS], Window("000002:000000000100:000000", "000003:000000000200:000000",
                         {"shop.orders": (SplitRef(0, "b1", "000002:000000000300:000000"),)},
                         replace=True, replaced=True)),
    "history_on_chosen_columns": (
        Table(name="orders", source="shop.orders", history=History(track=["status"])),
        [ORDERS], Window("000002:000000000100:000000", "000003:000000000200:000000")),
    "history_on_chosen_columns_untouched": (  # no attempt reached history: current versions
        Table(name="orders", source="shop.orders", history=History(track=["status"])),
        [ORDERS], Window("000002:000000000100:000000", "000003:000000000200:000000",
                         history_untouched=True)),
    "later_batch_with_history_untouched": (
        Table(name="orders", source="shop.orders", history=True), [ORDERS],
        Window("000002:000000000100:000000", "000003:000000000200:000000",
               history_untouched=True)),
    "history_on_chosen_columns_resnapshot": (
        Table(name="orders", source="shop.orders", history=History(except_=["amount"])),
        [ORDERS], Window("000002:000000000100:000000", "000003:000000000200:000000",
                         {"shop.orders": (SplitRef(0, "b1", "000002:000000000300:000000"),)},
                         replace=True)),
    "range_reread_with_history_and_soft_deletes": (
        Table(name="orders", source="shop.orders", history=True, deletes="soft"), [ORDERS],
        Window("000002:000000000100:000000", "000003:000000000200:000000",
               {"shop.orders": (SplitRef(5, "r1", "000002:000000000300:000000"),)},
               ranges=(("shop.orders", "id BETWEEN 10 AND 20 OR id IN (7, -3)",
                        "000002:000000000300:000000", "2026-11-26T05:00:00.250000+00:00"),),
               ranged=5)),
}
RENAME = (("ddl", "000002:000000000150:000000", None,
           "ALTER TABLE orders RENAME COLUMN state TO status"),)


def facts(name: str) -> Facts:
    if name.endswith("_resnapshot") or name.endswith("_column"):  # silver is there
        return Facts(silver_types=dict.fromkeys(("id", "status", "amount", "placed",
                                                 "_cdc_offset", "_cdc_op", "_cdc_ts",
                                                 "_cdc_key_placed"), pa.string()))
    if name != "later_batch_after_a_rename":
        return Facts()
    bronze = {"id": pa.int64(), "state": pa.string(), "status": pa.string(),
              "amount": pa.decimal128(8, 2), "placed": pa.timestamp("us"),
              "_cdc_key_placed": pa.string()}
    return Facts(changes_columns={"shop.orders": bronze}, statements={"shop.orders": RENAME},
                 silver_types=dict.fromkeys(("id", "status", "amount", "placed", "dropped_col",
                                             "_cdc_offset", "_cdc_op", "_cdc_ts",
                                             "_cdc_key_placed"), pa.string()))


def rendered(name: str) -> str:
    spec, sources, window = SCENARIOS[name]
    plan = plan_silver(spec, sources, "golden.yaml", 0)
    return describe(batch_steps(LAKE, plan, window, facts(name)))


def assert_reviewed(file: str, text: str) -> None:
    path = GOLDEN / file
    if os.environ.get("CDC_SQL_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{path} differs: review, then CDC_SQL_UPDATE_GOLDEN=1"


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_rendered_sql_is_the_reviewed_sql(name):
    assert_reviewed(f"{name}.sql", rendered(name))


def test_the_cascade_queries_are_the_reviewed_sql():
    assert_reviewed("cascades.sql", render(
        "cascade_parent_changes", key="`id`",
        bronze_changes="delta.`/lake/bronze/_changes/shop.parent`") + render(
        "cascade_silver_rows", columns="`id`, `parent_id`",
        silver="delta.`/lake/silver/child` VERSION AS OF 7",
        live="\nWHERE NOT COALESCE(_cdc_deleted, FALSE)"))


def test_the_history_check_is_the_reviewed_sql():
    assert_reviewed("history_check.sql", render(
        "history_current_check", columns="`id`, `status`", silver="delta.`/lake/silver/orders`",
        live="\nWHERE NOT COALESCE(_cdc_deleted, FALSE)",
        history="delta.`/lake/silver/orders_history`"))


def test_every_template_is_in_a_golden_file():
    texts = "".join(p.read_text() for p in GOLDEN.glob("*.sql"))
    first_lines = {name: template(name).splitlines()[0] for name in TEMPLATES}
    assert not [n for n, line in first_lines.items() if line not in texts]


def test_a_range_reread_removes_nothing_when_deletes_are_skipped():
    """skip: [delete] keeps rows the source deleted: a range re-read only upserts its rows."""
    _, sources, window = SCENARIOS["range_reread_with_history_and_soft_deletes"]
    for skip, removes in (([], True), (["delete"], False)):
        plan = plan_silver(Table(name="orders", source="shop.orders", skip=skip), sources,
                           "golden.yaml", 0)
        names = [step.name for step in batch_steps(LAKE, plan, window, Facts())]
        assert ("cdc_range_removes_orders" in names) is removes
        assert ("cdc_candidates_orders_r" in names) is removes
