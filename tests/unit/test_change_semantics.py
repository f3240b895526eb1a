"""Change semantics per table: the YAML keys' checks (file, line, key, what to do), the
projection's `* EXCEPT`, a pattern source's `exclude`, and the pure rules of
lake/semantics.py."""
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from cdc_sql.config.model import Table, load_pipeline, matching
from cdc_sql.config.projection import resolve_projection
from cdc_sql.errors import ConfigError
from cdc_sql.lake import semantics
from cdc_sql.lake.small_merge import last_change_per_key
from cdc_sql.ops.status import render
from cdc_sql.source.offsets import Offset
from tests.unit.test_config import GOOD, error_for, write


@pytest.mark.parametrize("lines, path, line, message", [
    ("    deletes: sometimes\n", "tables[0].deletes", 13, "must be one of hard, soft"),
    ("    skip: [insert]\n", "tables[0].skip[0]", 13, "must be one of delete, truncate"),
    ("    skip: delete\n", "tables[0].skip", 13, "expected a list"),
    ("    skip: [delete, delete]\n", "tables[0].skip[1]", 13, "listed twice"),
    ("    deletes: soft\n    skip: [delete]\n", "tables[0].deletes", 13, "choose one"),
    ("    exclude: shop\\.x\n", "tables[0].exclude", 13, "regular-expression source"),
    ("    primary_key: [id]\n    exclude_columns: [ID]\n", "tables[0].exclude_columns[0]", 14,
     "key column"),
    ("    exclude_columns: [a, A]\n", "tables[0].exclude_columns[1]", 13, "listed twice"),
    ("    exclude_columns: [amount]\n", "tables[0].exclude_columns", 13, "has no `*`"),
])
def test_bad_semantics_name_file_line_and_key(tmp_path, lines, path, line, message):
    err = error_for(tmp_path, GOOD + lines)
    assert (err.path, err.line) == (path, line) and message in str(err), str(err)
    assert str(err).startswith(f"{tmp_path / 'p.yaml'}:{line} at `{path}`")


def test_a_bad_exclude_regex(tmp_path):
    text = GOOD.replace("source: shop.orders", "source: shop\\.orders_.*") + \
        "    exclude: shop\\.orders_[0-9\n"
    err = error_for(tmp_path, text)
    assert err.path == "tables[0].exclude" and "not a valid regular expression" in str(err)


def test_good_semantics_load(tmp_path):
    text = GOOD.replace("source: shop.orders", "source: shop\\.orders_.*").replace(
        "SELECT id, amount FROM orders WHERE amount > 0",
        "SELECT * EXCEPT (note) FROM orders WHERE amount > 0") + \
        "    exclude: shop\\.orders_archive\n    deletes: soft\n    skip: [truncate]\n" \
        "    exclude_columns: [email]\n"
    table = load_pipeline(write(tmp_path, text), environ={"PW": "x"}).tables[0]
    assert (table.deletes, table.skip, table.exclude_columns) == ("soft", ["truncate"], ["email"])
    names = [("shop", "orders_1"), ("shop", "orders_archive"), ("shop", "orders_2")]
    assert matching([table], names) == [[("shop", "orders_1"), ("shop", "orders_2")]]


def test_star_except_and_exclude_columns_leave_columns_out():
    table = Table(name="t", source="d.t", exclude_columns=["Email"],
                  projection="SELECT * EXCEPT (note), UPPER(note) AS shout FROM t")
    projection = resolve_projection(table, ["id", "email", "note", "n"], ["id"])
    assert [name for _, name in projection.columns] == ["id", "n", "shout"]
    assert [name for _, name in resolve_projection(
        Table(name="t", source="d.t", exclude_columns=["n"]), ["id", "n"], ["id"]).columns] == \
        ["id"]


@pytest.mark.parametrize("table, message, path", [
    (Table(name="t", source="d.t", projection="SELECT * EXCEPT (nope) FROM t"),
     "EXCEPT names `nope`", None),
    (Table(name="t", source="d.t", projection="SELECT * EXCEPT (id) FROM t"),
     "leaves out the key column `id`", None),
    (Table(name="t", source="d.t", exclude_columns=["nope"]), "exclude_columns names `nope`",
     "exclude_columns"),
    (Table(name="t", source="d.t", projection="SELECT * REPLACE (n + 1 AS n) FROM t"),
     "REPLACE", None),
])
def test_star_leaving_out_what_is_not_there_is_refused(table, message, path):
    with pytest.raises(ConfigError) as info:
        resolve_projection(table, ["id", "n"], ["id"])
    assert message in str(info.value) and info.value.path == path


def test_the_sql_fragments():
    hard, soft = Table(name="t", source="d.t"), Table(name="t", source="d.t", deletes="soft")
    skip = Table(name="t", source="d.t", skip=["delete", "truncate"])
    assert semantics.removes(hard, "s") == "s._cdc_remove"
    assert semantics.removes(soft, "s") == "(s._cdc_remove AND NOT s._cdc_deleted)"
    assert semantics.candidate_filter(skip) == "\nWHERE NOT _cdc_deleted"
    assert semantics.candidate_filter(soft) == semantics.candidate_columns(hard, "x") == ""
    assert semantics.replace_kept(hard, ["id"], ["id"], "k", "s", "c") == ""
    assert semantics.replace_kept(soft, ["id"], (), "k", "s", "c") == ""  # no silver
    assert ":upto" in semantics.replace_kept(soft, ["id", "_cdc_offset"], ["id"], "k", "s", "c")
    assert not semantics.applies_truncate(skip) and semantics.applies_truncate(soft)
    assert semantics.live(["_cdc_deleted"]) == "NOT COALESCE(_cdc_deleted, FALSE)"
    assert semantics.live(["id"]) == "TRUE" and semantics.live_where(["id"]) == ""


CHANGES = st.lists(st.tuples(st.integers(1, 4), st.sampled_from("cud"), st.integers(0, 9)),
                   max_size=30)


@pytest.mark.parametrize("kind", ["hard", "soft", "skip"])
@settings(deadline=None)  # the first example pays for pyarrow's compute kernels
@given(changes=CHANGES)
def test_arrow_changes_pick_what_the_rule_says(kind, changes):
    """The in-process path's rule (arrow_changes, then the last change per key) against the
    model: a key's last change, a delete flagged (soft), left out (skip) or removing (hard)."""
    spec = Table(name="t", source="d.t", deletes="soft" if kind == "soft" else "hard",
                 skip=["delete"] if kind == "skip" else [])
    rows = [{"id": key, "v": v, "_cdc_op": op, "_cdc_offset": Offset(1, 100 + n, 0).text}
            for n, (key, op, v) in enumerate(changes)]
    table = pa.Table.from_pylist(rows, pa.schema([("id", pa.int32()), ("v", pa.int32()),
                                                  ("_cdc_op", pa.string()),
                                                  ("_cdc_offset", pa.string())]))
    picked = last_change_per_key(semantics.arrow_changes(spec, table), ["id"]).to_pylist()
    model = {}
    for row in rows:
        if kind == "skip" and row["_cdc_op"] == "d":
            continue
        model[row["id"]] = row
    assert {r["id"]: (r["v"], r["_cdc_remove"], r.get("_cdc_deleted")) for r in picked} == {
        k: (r["v"], kind == "hard" and r["_cdc_op"] == "d",
            r["_cdc_op"] == "d" if kind == "soft" else None) for k, r in model.items()}


def test_status_shows_the_semantics():
    text = render({"pipeline": "p", "source_position": None, "captured_position": None,
                   "captured_lag_bytes": None, "last_run": None, "tables": [
                       {"name": "a", "phase": "binlog", "splits_done": 1, "splits_total": 1,
                        "snapshot_rows": 3, "applied_offset": None, "lag_bytes": None,
                        "lag_seconds": None, "deletes": "soft", "skip": [],
                        "soft_deleted_rows": 1200},
                       {"name": "b", "phase": "binlog", "splits_done": 1, "splits_total": 1,
                        "snapshot_rows": 3, "applied_offset": None, "lag_bytes": None,
                        "lag_seconds": None, "deletes": "hard", "skip": ["delete"],
                        "soft_deleted_rows": None}]})
    assert "a: soft deletes, 1,200 rows flagged _cdc_deleted" in text
    assert "b: skips delete: rows they removed at the source stay in silver" in text
