"""The target lock: local targets (plain paths, file://) are locked; object stores are not."""
import pytest

from cdc_sql.errors import StateError
from cdc_sql.lock import target_lock


def test_a_local_target_is_locked_once(tmp_path):
    for root in (str(tmp_path / "a"), f"file://{tmp_path / 'b'}"):
        with target_lock(root, "run"):
            with pytest.raises(StateError, match="another cdc-sql process"):
                with target_lock(root, "maintain"):
                    pass
        assert (tmp_path / root.rsplit("/", 1)[-1] / "_lock").exists()


@pytest.mark.parametrize("root", ["s3://bucket/lake", "dbfs:/mnt/lake", "abfss://c@a.dfs/x"])
def test_an_object_store_target_is_not_locked_here(root, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with target_lock(root, "run"):
        with target_lock(root, "run"):  # nothing to hold: scheduling keeps runs apart
            pass
    assert not list(tmp_path.iterdir())
