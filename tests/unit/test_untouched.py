"""Which commits after cdc-sql's last one count as a hand change of silver."""
import pytest

from cdc_sql.errors import StateError
from cdc_sql.config.model import Table
from cdc_sql.engine import EVOLVE_MARK
from cdc_sql.lake.silver import check_untouched

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
    [(6, "MERGE", "")],                        # ours: a crash before the state commit
    [(6, "OPTIMIZE", ""), (7, "MERGE", "")],
    [(6, "DELETE", ""), (7, "RESTORE", "5")],  # undone
    [(6, "OPTIMIZE", ""), (7, "UPDATE", ""), (8, "RESTORE", "6")],
    [(6, EVOLVE_MARK, ""), (7, "MERGE", ""), (8, EVOLVE_MARK, "")],  # a DDL batch, crashed
])
def test_allowed(commits):
    check_untouched(History(commits), "/r", TABLE, {"silver_version": 5})


@pytest.mark.parametrize("commits", [
    [(6, "DELETE", "")],
    [(6, "MERGE", ""), (7, "MERGE", "")],      # a second MERGE is not a crashed run of ours
    [(6, "MERGE", ""), (7, "OPTIMIZE", "")],
    [(6, "ADD COLUMNS", "")],
    [(6, "UPDATE", ""), (7, "RESTORE", "6")],  # restored to the changed version
    [(6, "WRITE", ""), (7, "RESTORE", "4")],   # older than what we last wrote
    [(6, "MERGE", ""), (7, EVOLVE_MARK, ""), (8, "DELETE", "")],
])
def test_refused(commits):
    with pytest.raises(StateError, match="changed outside cdc-sql after its version 5"):
        check_untouched(History(commits), "/r", TABLE, {"silver_version": 5})
