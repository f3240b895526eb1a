"""Which commits after cdc-sql's last one count as a hand change of silver."""
import pytest

from cdc_sql.errors import StateError
from cdc_sql.config.model import Table
from cdc_sql.lake.lake import Lake
from cdc_sql.lake.silver.ownership import check_untouched
from cdc_sql.lake.state import TableEntry
from cdc_sql.lake.tables import EVOLVE_MARK, OWN_MERGE, operation as _operation

TABLE = Table(name="t", source="db.t")


class History:
    def __init__(self, commits):
        self.commits = commits

    def exists(self, path):
        return True

    def history(self, path, after):
        return [c for c in self.commits if c[0] > after]


@pytest.mark.parametrize("commits", [
    [],
    [(6, "OPTIMIZE", ""), (7, "VACUUM START", ""), (8, "VACUUM END", "")],
    [(6, OWN_MERGE, "")],                      # ours: a crash before the state commit
    [(6, OWN_MERGE, ""), (7, OWN_MERGE, "")],  # ... twice (two runs died there)
    [(6, "OPTIMIZE", ""), (7, OWN_MERGE, "")],
    [(6, "DELETE", ""), (7, "RESTORE", "5")],  # undone
    [(6, "OPTIMIZE", ""), (7, "UPDATE", ""), (8, "RESTORE", "6")],
    [(6, EVOLVE_MARK, ""), (7, OWN_MERGE, ""), (8, EVOLVE_MARK, "")],  # a DDL batch, crashed
])
def test_allowed(commits):
    check_untouched(Lake(None, "/r", History(commits)), TABLE, TableEntry(silver_version=5))


@pytest.mark.parametrize("commits", [
    [(6, "DELETE", "")],
    [(6, "MERGE", "")],                        # a MERGE without our guards: by hand
    [(6, OWN_MERGE, ""), (7, "MERGE", "")],
    [(6, "ADD COLUMNS", "")],
    [(6, "UPDATE", ""), (7, "RESTORE", "6")],  # restored to the changed version
    [(6, "WRITE", ""), (7, "RESTORE", "4")],   # older than what we last wrote
    [(6, OWN_MERGE, ""), (7, EVOLVE_MARK, ""), (8, "DELETE", "")],
])
def test_refused(commits):
    with pytest.raises(StateError, match="changed outside cdc-sql after its version 5"):
        check_untouched(Lake(None, "/r", History(commits)), TABLE, TableEntry(silver_version=5))


def test_our_merges_are_told_by_their_guards():
    ours = {"matchedPredicates": '[{"predicate": "s . _cdc_offset > t . _cdc_offset"}]'}
    history = {"mergePredicate": "t . id = s . id AND t . _cdc_valid_from = s . _cdc_valid_from"}
    by_hand = {"mergePredicate": "t.id = s.id", "matchedPredicates": "[]"}
    assert _operation("MERGE", ours, None) == OWN_MERGE
    assert _operation("MERGE", history, None) == OWN_MERGE
    assert _operation("MERGE", by_hand, None) == "MERGE"
    assert _operation("DELETE", {"predicate": "_cdc_offset > '1'"}, None) == "DELETE"
    assert _operation("WRITE", {}, EVOLVE_MARK) == EVOLVE_MARK
