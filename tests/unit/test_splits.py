from cdc_sql.source.splits import Split


def test_split_predicates_cover_open_ends():
    assert Split("d.t", 0, None, None).where(["`id`"]) == ("TRUE", [])
    assert Split("d.t", 0, None, (10,)).where(["`id`"]) == ("`id` < %s", [10])
    assert Split("d.t", 1, (10,), None).where(["`id`"]) == ("`id` >= %s", [10])
    sql, args = Split("d.t", 1, ("a", 1), ("b", 2)).where(["`s`", "`n`"])
    assert sql == "(`s`, `n`) >= (%s, %s) AND (`s`, `n`) < (%s, %s)" and args == ["a", 1, "b", 2]


def test_bounds_survive_state_json():
    import datetime as dt
    import decimal
    import json

    split = Split("d.t", 3, (decimal.Decimal("1.50"), b"\x00k", dt.datetime(2024, 1, 1, 5)),
                  ("x", 7, dt.date(2024, 2, 2)))
    assert Split.from_json(json.loads(json.dumps(split.to_json()))) == split
