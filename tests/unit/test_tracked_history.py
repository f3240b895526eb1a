"""History on chosen columns: the `history` key's forms and checks (file, line, key), the
columns a plan tracks, and where a window is cut (merge.cut_at_removals). Pure."""
import datetime as dt

import pytest

from cdc_sql.config.model import History, Table, load_pipeline
from cdc_sql.errors import ConfigError
from cdc_sql.lake.silver.facts import Statement
from cdc_sql.lake.silver.merge import cut_at_removals
from cdc_sql.lake.silver.plan import plan_silver
from cdc_sql.source.schema import Column, SourceTable
from cdc_sql.window import Window
from tests.unit.test_config import GOOD, error_for, write

ORDERS = SourceTable("shop", "orders", tuple(
    Column(name, "int", "int", 10, 0, None, None)
    for name in ("id", "status", "amount", "updated_at")), ("id",))


@pytest.mark.parametrize("lines, path, message", [
    ("    history: {track: [a], except: [b]}\n", "tables[0].history.except", "not both"),
    ("    history: {}\n", "tables[0].history", "history: true"),
    ("    history: {track: []}\n", "tables[0].history", "history: true"),
    ("    history: [status]\n", "tables[0].history",
     "expected true, false or a mapping (track, except), got a list"),
    ("    history: {track: [a, A]}\n", "tables[0].history.track[1]", "listed twice"),
    ("    history: {tracks: [a]}\n", "tables[0].history.tracks", "did you mean `track`?"),
    ("    history: {track: status}\n", "tables[0].history.track", "expected a list"),
])
def test_bad_history_names_file_line_and_key(tmp_path, lines, path, message):
    err = error_for(tmp_path, GOOD + lines)
    assert (err.path, err.line) == (path, 13) and message in str(err), str(err)
    assert str(err).startswith(f"{tmp_path / 'p.yaml'}:13 at `{path}`")


@pytest.mark.parametrize("lines, history", [
    ("    history: true\n", True),
    ("    history: false\n", False),
    ("    history: {track: [status, amount]}\n", History(track=["status", "amount"])),
    ("    history:\n      except: [updated_at]\n", History(except_=["updated_at"])),
])
def test_history_forms_load(tmp_path, lines, history):
    table = load_pipeline(write(tmp_path, GOOD + lines), environ={"PW": "x"}).tables[0]
    assert table.history == history
    assert table.tracked == (history if isinstance(history, History) else None)


@pytest.mark.parametrize("history, tracked", [
    (True, None),
    (History(track=["Status", "amount"]), ("status", "amount")),
    (History(except_=["updated_at"]), ("status", "amount")),
    (History(except_=["status", "amount", "updated_at"]), ()),  # inserts and deletes only
])
def test_the_plan_tracks_silver_columns(history, tracked):
    plan = plan_silver(Table(name="o", source="shop.orders", history=history), [ORDERS], "p.yaml", 0)
    assert plan.tracked == tracked
    held = "_cdc_offset" in plan.history_columns  # the change a version's values are from
    assert held == (tracked is not None)


@pytest.mark.parametrize("history, projection, path, message", [
    (History(track=["nope"]), "", "tables[3].history.track[0]",
     "`nope` is not a column of silver table `o` (it has id, status, amount, updated_at; "
     "table shop.orders)"),
    (History(except_=["amount", "ID"]), "", "tables[3].history.except[1]", "is a key column"),
    (History(track=["updated_at"]), "SELECT id, status FROM orders", "tables[3].history.track[0]",
     "not a column"),
])
def test_tracked_columns_are_silver_columns_and_not_keys(history, projection, path, message):
    with pytest.raises(ConfigError) as info:
        plan_silver(Table(name="o", source="shop.orders", history=history,
                          projection=projection), [ORDERS], "p.yaml", 3)
    assert info.value.path == path and message in str(info.value), str(info.value)
    assert str(info.value).startswith(f"p.yaml at `{path}`: ")


def statement(op: str, offset: str, table: str = "orders") -> Statement:
    return Statement("shop", table, op, offset, dt.datetime(2024, 1, 1), "")


def test_a_window_is_cut_after_each_removal_of_its_sources():
    plan = plan_silver(Table(name="o", source="shop.orders", history=History(track=["status"])),
                       [ORDERS], "p.yaml", 0)
    window = Window("a", "z")
    found = [statement("truncate", "c"), statement("ddl", "d"), statement("delete", "f"),
             statement("truncate", "g", "other"), statement("truncate", "z"),
             statement("truncate", "a")]
    assert cut_at_removals(plan, window, found) == [Window("a", "c"), Window("c", "f"),
                                                    Window("f", "z")]
    assert cut_at_removals(plan, window, []) == [window]
    first = Window("", "z", {"shop.orders": ()}, first=True)
    assert cut_at_removals(plan, first, found) == [first]  # no history in it yet
